// File: cli/exit_codes.h
//
// The exit codes of the `hdp` command (docs/errors.md lists them for users and for Slurm/systemd).
#pragma once

namespace hdp::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // a runtime error (store unreachable, I/O, a failed check)
inline constexpr int kExitUsage = 2;    // bad command line, bad configuration or bad input
inline constexpr int kExitJobFailed = 3;  // agent/worker: the job failed permanently; do not requeue
inline constexpr int kExitDrained = 4;    // agent: stopped by a signal after draining; requeue is fine

}  // namespace hdp::cli
