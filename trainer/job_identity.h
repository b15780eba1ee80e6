// File: trainer/job_identity.h
//
// What the ranks of one job must share to train it as one, and what becomes of a rank that does
// not (docs/architecture.md, "One job: checked at every generation's start"). Four digests (xxh3-64):
//   data      the pieces and their order (data::order_fingerprint), and the held-out data's: a node
//             whose files differ as PieceSource::fingerprint sees them (a corpus's file names and
//             sizes, an indexed dataset's index and first and last MiB), or whose hdp orders an
//             epoch another way, would train on other batches than its peers, and nothing else
//             would notice;
//   model     the model's shape (TrainerConfig::model_json) and precision;
//   training  the settings that enter a step's arithmetic, its plan or the ranks' collectives:
//             context, capacity, batch tokens, steps, the learning-rate schedule, AdamW's betas and
//             weight decay, the norms' decay, clipping, the seed, the planner's cost model (from
//             --cost-model, or estimated for the device: a CPU rank and a GPU rank would plan the
//             same step differently) and whether it may offload, speed-aware plans, redundant
//             shards and their verification, validation, checkpoints on or off, resume, a data
//             change allowed on restore;
//   build     the hdp release (HDP_VERSION). A node of another release or wire joining a running
//             job is refused earlier, by the leader before it joins (elastic/release.h); two builds
//             whose wires differ started at once fail in the all-gather that carries the digests.
// Not in them, by design: what each worker may set for itself (threads, timeouts, paths: the data
// is compared by its content; metrics and TensorBoard files, the memory limit, injected faults)
// and the live settings (`hdp config set`), which rank 0 hands to every rank at a step boundary.
//
// The initial weights (--init-from) are not a part: they are read after the check, and matter only
// where the ranks initialise; check_initial_weights compares them there.
//
// The check (check_one_job) runs at every generation's start on what the ranks' held state
// already carries (Recovery::start, mesh::exchange_states: no message of its own):
//   - every rank the same: the generation goes on;
//   - some ranks hold the running job's state (they trained in an earlier generation) and agree:
//     they are the job. A rank that differs from them (a node that joins, a worker restarted from
//     files changed under it; its data's index, though, is its node's kept one while its agent
//     runs: trainer/data/corpus_index_cache.h) is refused: it throws RefusedByJob (`hdp train` exits 5; its agent
//     stops its node, leaves the job and exits 5, not to be restarted), and the others abandon the
//     generation (RecoverableError; the lowest rank of their side records a `node_refused` event)
//     to go on in the next one without it, from memory;
//   - no rank holds state (the job starts, or restarts from its checkpoint) and every rank of more
//     than half the nodes agrees: they are the job, and the others are refused as above (one node
//     started with stale files or flags does not stop a job of many); the job's side starts in
//     the next generation without them (or waits for nodes, below its minimum). Nodes are
//     counted, not ranks, since a refusal takes a whole node out: a node of 8 workers does not
//     outvote two of 4, and a node whose own ranks differ leaves no majority;
//   - no rank holds state and no such majority (one node against one, a node split in itself),
//     or the holders disagree: nothing says which side is the job, so every rank refuses (exit 2
//     on all), the message naming the nodes on each side and what differs.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "trainer/trainer_config.h"
#include "trainer/training_setup.h"

namespace hdp::trainer {

struct JobIdentity {
  enum Part : std::size_t { kData, kModel, kTraining, kBuild, kPartCount };
  std::array<std::uint64_t, kPartCount> digest{};
  bool operator==(const JobIdentity&) const = default;
};

// What each part is, as the refusal names it.
inline constexpr std::array<std::string_view, JobIdentity::kPartCount> kIdentityParts = {
    "data (its pieces or their order)", "model (its shape, or its precision: --dtype)",
    "training settings (including the planner's cost model, which follows --device and --cost-model)",
    "hdp version"};

// This worker's identity, from its command line's configuration and what it built from it.
JobIdentity job_identity(const TrainerConfig& config, const TrainingSetup& setup);

// The parts in which `a` and `b` differ, named and joined by ", " (empty when equal).
std::string differing_parts(const JobIdentity& a, const JobIdentity& b);

// The check above on one rank: a pure function of every rank's identity, so every rank reaches
// the same verdict with no further message.
struct JobCheck {
  enum class Outcome {
    kSame,           // the generation goes on
    kRefused,        // this rank differs from the job's: RefusedByJob(message)
    kOthersRefused,  // this rank is the job's, others differ: RecoverableError(message)
    kNoJob,          // nothing says which side is the job: InvalidArgument(message) on every rank
  };
  Outcome outcome = Outcome::kSame;
  std::string message;
  std::vector<std::string> refused_nodes;  // kOthersRefused: the nodes of the refused ranks
  std::string parts;                       // kOthersRefused: what they differ in (every part any differs in)
  int recorder = -1;                       // kOthersRefused: the lowest rank of the job's side, which records it
};
// `ids` and `holds_state` by rank, `nodes` each rank's node, `me` this rank.
JobCheck check_one_job(const std::vector<JobIdentity>& ids, const std::vector<bool>& holds_state,
                       const std::vector<std::string>& nodes, int me);

// The initial weights, checked wherever the ranks initialise without a checkpoint (Recovery::restore:
// a job's start, or a restart with no checkpoint to restore): every rank initialised its
// parameters, from the seed (a part of the training settings above) or from --init-from's files,
// which a path per node may name differently, so that only their content can be compared. Each
// rank's `weights` digest: 0 for the seed, the xxh3 of the weights it read otherwise. Ranks that
// differ would start from different models and ZeRO-1 would stitch their shards into one. The
// same rule as above decides which side is the job (`holds_state`: the ranks that held the job's
// state before a restart without a checkpoint), and the others are refused (kRefused,
// kOthersRefused with parts kInitialWeights); with no such side every rank refuses (kNoJob), the
// message naming each side's weights.
inline constexpr std::string_view kInitialWeights = "initial weights (--init-from)";
JobCheck check_initial_weights(const std::vector<std::uint64_t>& weights, const std::vector<bool>& holds_state,
                               const std::vector<std::string>& nodes, int me);

}  // namespace hdp::trainer
