// File: trainer/trainer_config.h
//
// What `hdp train` is told: the model, the data, the batch, the optimizer, checkpoints, timeouts
// and (for tests) injected faults. Flags, HDP_* environment variables and the --config file fill
// it (cli/train_command.cc); validate() refuses an impossible configuration with one message that
// names the flag and the value (`hdp train` exits 2). It only describes the job: what it builds (the
// data source, the cost model, the checkpoint layout) is built once by trainer/training_setup.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "elastic/live_settings.h"
#include "elastic/membership.h"
#include "mesh/comm/communicator_factory.h"  // DataPlaneHooks
#include "mesh/step/zero.h"  // StepPhase
#include "ops/model/llama_config.h"
#include "trainer/lr_schedule.h"

namespace hdp::trainer {

// A fault injected on purpose (tests, benchmarks, the README's demo). Each fires once per job:
// the rank that reaches it first claims the key fault:<index> in the job's namespace, so a worker
// restarted after a crash, or a job rolled back to before the step, does not fire it again.
//   crash:R@S       rank R kills itself (SIGKILL) just before running step S
//   kill-node:R@S   rank R SIGKILLs its agent and itself (the node's other workers die with their
//                   agent: PR_SET_PDEATHSIG), just before step S
//   crash:R@S:PHASE, kill-node:R@S:PHASE   the same in the middle of step S, where PHASE is
//                   forward (before the forward pass), reduce-scatter (before it), optimizer
//                   (after this rank's own update, before its copies') or all-gather (before it)
//   hang:R@S:MS     rank R stops itself (SIGSTOP) just before step S; a child it forked sends it
//                   SIGCONT MS milliseconds later
//   reset:R@S       rank R closes every connection of its communicator hard (RST) just before step
//                   S, its process and agent alive: its peers see resets from a live rank
// and two conditions of a worker (its hardware), named by NODE/SLOT since ranks are renumbered at
// every resize; they hold on every step in their range and are not claimed:
//   slow:NODE/SLOT@S[-E]:F      from step S (to E, inclusive) the worker's compute takes 1/F as
//                               long: after each micro-batch it sleeps (1/F - 1) x its compute
//                               (0 < F <= 1; mesh::StepOptions::slowdown)
//   throttle:NODE/SLOT@S:CPUS   at step S the worker moves itself into a new CPU cgroup limited to
//                               CPUS cores (a real slowdown, not a sleep: the kernel's CFS quota;
//                               needs a writable cpu cgroup, else it logs an error and does nothing)
// and one of a worker's start, also by NODE/SLOT, at every start of that worker:
//   setup:NODE/SLOT:MS          the worker takes MS longer to set itself up: it sleeps before it
//                               builds its model (as a GPU context or a large model's buffers take
//                               long), after it told its agent it is preparing (the tests of a
//                               joiner prepared beside the job: elastic/preparing_workers.h)
// and one for tests that act on a running job (docs/testing.md, "Holding a job"), once per worker:
//   hold:all@S:MS   every rank waits before step S (the job stands at step S-1) until the job is
//                   asked something: a pending request (hdp stop, drain, checkpoint) or a live
//                   setting (hdp config set), a signal to one of its workers or a new generation;
//                   at most MS ms. The first rank released releases the others (fault:<index>), and
//                   rank 0 reads the requests at once, so the boundary before step S acts on what
//                   was asked: at any speed, it comes at step S-1.
struct Fault {
  enum class Kind { kCrash, kKillNode, kHang, kSlow, kThrottle, kHold, kReset, kSetup };
  Kind kind = Kind::kCrash;
  int rank = 0;              // crash, kill-node, hang
  std::string node;          // slow, throttle, setup
  int slot = 0;              // slow, throttle, setup
  std::int64_t step = 1;
  std::int64_t until = 0;    // slow: the last step (0: to the end)
  double factor = 1;         // slow: the speed F; throttle: CPUS
  std::chrono::milliseconds hang{0};  // hang: the stop; hold: the most it holds; setup: the delay
  std::optional<mesh::StepPhase> phase;  // crash, kill-node: in the middle of the step; none: before it
  std::string spec;  // as written

  bool claimed_once() const {
    return kind == Kind::kCrash || kind == Kind::kKillNode || kind == Kind::kHang || kind == Kind::kReset;
  }
};

// Parses one of the forms above; InvalidArgument naming the spec.
Fault parse_fault(std::string_view spec);

// The model presets of --model: "tiny" (d 64, 2 layers), "demo" (d 256, 4 layers; LlamaConfig's
// defaults), "small" (d 512, 8 layers). InvalidArgument naming an unknown word.
ops::model::LlamaConfig model_preset(std::string_view name);

// The live settings (straggler_threshold, straggler_strikes, evict_stragglers, cooldown,
// checkpoint_every, log_every) are the fields of elastic::LiveValues: their flags set them, and
// `hdp config set` overrides them while the job trains (elastic/live_settings.h).
struct TrainerConfig : elastic::LiveValues {
  ops::model::LlamaConfig model;
  // --dtype: f32, or bf16 mixed precision (ops/model/llama_model.h): bf16 GEMM and attention
  // operands, bf16 gradients and parameters on the wire (mesh/step/zero.h), f32 master weights,
  // moments and loss. Checkpoints hold the f32 master state either way, so a job may resume with
  // the other dtype.
  ops::model::Precision precision = ops::model::Precision::kFull;
  // --device, as placed (trainer/device_placement.h): where the model, its gradients and the
  // optimizer state live; on kCuda the data plane is chosen from every rank's (docs/data-plane.md).
  ops::Device device = ops::Device::kCpu;
  int device_ordinal = -1;  // the visible CUDA device on kCuda; -1 on the CPU
  std::int64_t context = 1024;       // the longest training sequence: documents are cut to it
  std::int64_t capacity = 1024;      // C: tokens one rank holds in one micro-batch
  std::int64_t batch_tokens = 8192;  // the global batch of every step, in tokens, whatever the world size
  std::int64_t steps = 200;          // the job completes after this step
  LrSchedule lr;                     // total defaults to `steps` (cli)
  float beta1 = 0.9f, beta2 = 0.95f;
  float weight_decay = 0.1f;
  bool decay_norms = false;          // false: RMSNorm weights take no weight decay
  double max_grad_norm = 1.0;        // <= 0: no clipping
  // A directory tree of text files (one file a document), or synthetic:NAME for documents with
  // lengths from a planner distribution (github, byted, file:PATH).
  std::string data = "/usr/include";
  // Where a directory corpus's index is kept for the node's other workers, and read from
  // (trainer/data/corpus_index_cache.h): the agent's HDP_NODE_DIR; empty (outside an agent): each
  // worker walks the tree. Not part of the job's identity.
  std::filesystem::path data_index_dir;
  std::uint64_t seed = 1234;          // initial weights and data order
  std::filesystem::path init_from;    // --init-from: initial weights from a Hugging Face directory (hf_model.h)
  // A restore from a checkpoint written over other data (its fingerprint differs) goes on, logged,
  // instead of being refused; a saved position past the new data's epoch moves to the next epoch.
  bool allow_data_change = false;
  // Validation (--eval-data, same forms as --data): every eval_every steps (and at the last step)
  // the loss of a held-out batch, the first eval_tokens tokens of the eval data in the seed's
  // order (at most all of it, each piece cut to `context`), fixed for the whole job, is computed
  // across the current world (mesh::DistributedStep::evaluate) and reported as eval_loss.
  std::string eval_data;              // empty: no validation
  int eval_every = 0;                 // > 0 exactly when eval_data is given
  std::int64_t eval_tokens = 65536;
  std::filesystem::path checkpoint_dir;  // empty: no checkpoints
  int keep = 3;
  bool resume = true;                 // restore the newest valid checkpoint when the job starts
  std::int64_t max_rank_memory_bytes = 0;  // the per-rank memory limit; 0: none
  // CUDA: the GPU's free memory when the worker started, before it allocated anything (0: not
  // known); check_rank_memory holds the estimate's device bytes to it, less MemoryMargin::gpu().
  std::int64_t device_free_bytes = 0;
  // Tests only: the data plane's hooks (a fake NCCL, mesh/comm/communicator_factory.h) and the
  // device the ranks' agreement is told this rank's tensors are on (they stay where `device`
  // puts them); production sets neither.
  mesh::DataPlaneHooks data_plane_hooks;
  std::optional<mesh::RankDevice> announced_device;
  std::string cost_model;             // a cost model file (hdp plan --calibrate); empty: estimated
  std::chrono::milliseconds timeout{30000};  // rendezvous and every collective
  // Rank 0 appends one JSON line per step here: step, loss (exact: 17 significant digits),
  // world_size, generation, lr, grad_norm, tokens_per_s, step_ms, time_ms (wall clock when the
  // step completed, ms since the epoch). Empty: none.
  std::filesystem::path metrics_file;
  // Rank 0 writes loss, lr, tokens/s, world size, step time and grad norm per step as TensorBoard
  // scalars (trainer/tensorboard.h) into a new event file here. Empty: none.
  std::filesystem::path tensorboard_dir;
  int threads = 0;                    // OpenMP threads of this worker's kernels; 0: as the process has
  std::vector<Fault> faults;

  // Stragglers (docs/architecture.md, "Stragglers"). Plans use measured speeds unless
  // speed_aware is false (the benchmark's speed-blind baseline). A rank whose filtered speed stays
  // below straggler_threshold of the median for straggler_strikes consecutive steps (twice as many
  // for each earlier eviction of its node/slot) is handed to the leader for eviction, for
  // cooldown.base_ms doubling per eviction up to cooldown.max_ms; never when evict_stragglers is
  // false (those four are live settings, above).
  bool speed_aware = true;

  // Redundant optimizer shards (mesh/step/buddies.h, docs/data-plane.md): every rank's shard also kept,
  // bitwise equal, by a rank of another node (none on a single node). Each generation starts by
  // sending every shard to its holder; every step keeps the copies current. Every
  // verify_replicas_every steps (0: never) the ranks compare checksums of every shard and its copy
  // and log an error naming both ranks on a mismatch. With it, every update also keeps the triple it
  // changes, so that a failure in the middle of a step can be rolled back (mesh/step/reshard.h). On by
  // default; on a single node there are no copies and nothing is kept, so it costs nothing.
  bool redundant_shards = true;
  int verify_replicas_every = 0;

  // InvalidArgument naming the first bad flag and its value (the world size is checked per
  // generation, see check_world in trainer/training_setup.h).
  void validate() const;
  // The model's shape as recorded in a checkpoint's manifest: a checkpoint of another shape is
  // refused at restore. With it, max_position_embeddings: the larger of the model's max_positions
  // and `context`, what `hdp export` writes (not compared at restore: a job may resume at another
  // --context).
  nlohmann::json model_json() const;
};

// Bytes one rank of a `world_size`-rank job needs on its device at its peak (trainer/memory_model.h:
// parameters, gradients, its optimizer shard, the activations of a micro-batch of C tokens, ...;
// with redundant shards, one buddy copy and the previous versions).
std::int64_t estimate_rank_bytes(const TrainerConfig& config, int world_size);

// InvalidArgument with the figures when estimate_rank_bytes exceeds config.max_rank_memory_bytes
// (> 0); part of check_world (trainer/training_setup.h).
void check_rank_memory(const TrainerConfig& config, int world_size);

}  // namespace hdp::trainer
