// File: cli/exit_codes.h
//
// The exit codes of the `hdp` command, defined in common/exit_codes.h (the agent reads its workers'
// codes from the same definition), under the names the subcommands use.
#pragma once

#include "common/exit_codes.h"

namespace hdp::cli {

using hdp::kExitDrained;
using hdp::kExitFailure;
using hdp::kExitJobFailed;
using hdp::kExitOk;
using hdp::kExitUsage;

}  // namespace hdp::cli
