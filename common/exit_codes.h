// File: common/exit_codes.h
//
// The exit codes of the `hdp` command: the one definition, included by both sides of the contract
// between an agent and its workers (agents/agent.cc reads a worker's code; cli/ chooses them). docs/errors.md (and the systemd/Slurm
// table of docs/deploy.md) list the same codes; tests/cli/exit_codes_test.cc checks that they agree.
// cli/exit_codes.h brings them into hdp::cli.
// cli/main.cc maps exceptions onto them: InvalidArgument and CLI parse errors -> kExitUsage, every
// other hdp::Error (StoreUnavailable past its retries, AuthError, elastic::NodeIdInUse, ...) and
// anything unexpected -> kExitFailure, except RefusedByJob (an InvalidArgument) -> kExitRefused;
// subcommands choose kExitJobFailed, kExitDrained and kExitRefused.
#pragma once

namespace hdp {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // a runtime error (store unreachable, I/O, a failed check,
                                        // a node id held by another live agent)
inline constexpr int kExitUsage = 2;    // bad command line, bad configuration or bad input
inline constexpr int kExitJobFailed = 3;  // agent/worker: the job failed permanently; do not requeue
inline constexpr int kExitDrained = 4;    // agent: stopped by a signal after draining; requeue is fine
// agent/worker: this node was refused by the running job, which goes on without it (a worker that
// differs from the job: trainer/job_identity.h). Says nothing of the job's fate: do not restart the
// node as it is, but a job that completes or drains elsewhere is not failed by it.
inline constexpr int kExitRefused = 5;

}  // namespace hdp
