// File: cli/exit_codes.h
//
// The exit codes of the `hdp` command, defined in common/exit_codes.h (the agent reads its workers'
// codes from the same definition), under the names the subcommands use.
#pragma once

#include <iostream>

#include "common/error.h"
#include "common/exit_codes.h"

namespace hdp::cli {

using hdp::kExitDrained;
using hdp::kExitFailure;
using hdp::kExitJobFailed;
using hdp::kExitOk;
using hdp::kExitRefused;
using hdp::kExitUsage;

// An hdp::Error that escaped a command, as every hdp binary reports it: one line
// "hdp: error: ..." on stderr, then kExitRefused for RefusedByJob (a worker the running job
// refused), kExitUsage for any other InvalidArgument (bad usage or input, which a restart would not
// fix) and kExitFailure for the others.
inline int report_error(const hdp::Error& e) {
  std::cerr << "hdp: error: " << e.what() << "\n";
  if (dynamic_cast<const hdp::RefusedByJob*>(&e) != nullptr) return kExitRefused;
  return dynamic_cast<const hdp::InvalidArgument*>(&e) != nullptr ? kExitUsage : kExitFailure;
}

}  // namespace hdp::cli
