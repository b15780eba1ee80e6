// File: cli/self_executable.h
//
// The absolute path of the running `hdp` binary, so that launchers (`hdp run`, `hdp agent`) start
// the same build as children, whatever PATH says.
#pragma once

#include <string>

namespace hdp::cli {

// /proc/self/exe resolved; "hdp" (looked up in PATH) if that cannot be read.
std::string self_executable();

}  // namespace hdp::cli
