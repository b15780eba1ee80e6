// File: trainer/step_boundary.h
//
// The agreement at every step boundary: one all-gather of a row per rank, so that the ranks leave
// together, at the same boundary, and none in the middle of a step (one rank leaving alone would
// break the others' next collective and cost them the state of the step they were in). Every
// rank sends whether it must stop the job or leave (its signals), whether it saw a newer
// generation, and its compute time and plan digest of the step before (speeds; identical plans
// checked). Rank 0 also sends what its last step report read in the job's store (trainer/
// job_requests.h): a checkpoint or a drain asked for, the nodes standing by, and the live settings
// in force from this step on (elastic/live_settings.h), which every rank then applies.
// Every rank gets every row and decides the same from them.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "elastic/elastic_context.h"
#include "elastic/live_settings.h"
#include "mesh/comm/communicator.h"

namespace hdp::trainer {

struct StopRequest;

// What rank 0 read in the job's pending requests with its last step report (the other ranks send
// none of it: only rank 0's is read).
struct Asked {
  bool stop = false;        // `hdp stop`
  bool checkpoint = false;  // `hdp checkpoint`
  int drain_member = -1;    // `hdp drain`: the index of a member node of this generation
  int standby = 0;          // nodes standing by to take a leaving member's place
  elastic::LiveValues live; // the settings in force from the next step on
};

// This rank's row.
struct BoundaryRow {
  bool stop = false;    // a job stop (this worker's signal, or `hdp stop` that rank 0 read)
  bool leave = false;   // this worker's node leaves (SIGTERM/SIGINT: a drain)
  bool changed = false; // this rank saw a newer generation (or rank 0 asked for an eviction)
  std::int64_t compute_us = 0;  // the compute time of the step before
  std::uint64_t digest = 0;     // the plan digest of the step before
  Asked asked;                  // rank 0's
};

struct Boundary {
  bool stop = false;        // some rank was asked to stop the job
  bool changed = false;     // some rank saw a newer generation
  bool checkpoint = false;  // rank 0 read a `hdp checkpoint` request
  int drained_member = -1;  // rank 0 read a `hdp drain` of this member
  int standby = 0;          // rank 0 read this many nodes standing by
  elastic::LiveValues live; // rank 0's settings: in force on every rank from this step on
  std::vector<bool> leaving;             // by rank: asked to leave (its node drains)
  std::vector<std::int64_t> compute_us;  // each rank's compute time of the step before
  std::vector<std::int64_t> digests;     // each rank's plan digest of the step before
};

// This rank's row: its signals, and rank 0's reads.
BoundaryRow row_of(const StopRequest& signals, bool changed, std::int64_t compute_us, std::uint64_t digest,
                   const Asked& asked);

// Collective over `comm`: every rank's row, decided. `flags`: this worker's flags, which the live
// settings sent override.
Boundary agree(mesh::Communicator& comm, const BoundaryRow& mine, const elastic::LiveValues& flags);

// The nodes that leave at a boundary: every node with a rank asked to leave (a drain takes the
// whole node) and the member rank 0 read a drain of, and how many of the generation's nodes stay.
struct Leave {
  std::set<std::string> nodes;
  int staying = 0;
};
Leave leaving_nodes(const Boundary& b, const std::vector<std::string>& node_of_rank, const elastic::Generation& record);

// A node standing by takes a leaving member's place in the next generation (the leader picks
// it): only what neither the staying nodes nor the standbys make up is a leave below `min_nodes`.
bool leaves_below_min(const Boundary& b, const Leave& leave, int min_nodes);

// Every rank plans every step from the same inputs: the plans of the step before must be equal.
// InvariantViolation naming the first rank that differs from rank 0.
void check_same_plans(const Boundary& b, std::int64_t step);

// Rank r's node in the generation's membership.
std::vector<std::string> node_of_rank(const elastic::Membership& m);

}  // namespace hdp::trainer
