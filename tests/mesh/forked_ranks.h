// File: tests/mesh/forked_ranks.h
//
// Ranks as forked processes of the test: each child runs fn(rank) and _exits with what it
// returns (3 when it threw). The parent reaps them; a child still running after `bound` is killed
// with SIGKILL (and its status reports that), so no test can hang on a rank and no child outlives
// the call. Fork from a process without threads of its own (a gtest binary whose earlier cases
// started none): the children run communicators, which start threads after the fork.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <vector>

namespace hdp::mesh::test {

struct ForkedRanks {
  std::vector<int> statuses;  // waitpid statuses, by rank
  bool all_exited_zero() const;
};

ForkedRanks run_forked_ranks(int n, const std::function<int(int rank)>& fn, std::chrono::milliseconds bound);

}  // namespace hdp::mesh::test
