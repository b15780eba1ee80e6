// `hdp train`: one worker of a job, started by an agent (which sets its environment,
// elastic/worker_env.h). Without --smoke it is the elastic HDP trainer (trainer/trainer.h); with
// --smoke the stand-in that checks exact all-reduce sums (trainer/smoke_worker.h), for tests.
// Every trainer flag can also come from the environment (HDP_<FLAG>, e.g. HDP_BATCH_TOKENS) or
// the --config file's [train] section.
// SIGTERM/SIGINT: this worker's node leaves at the next step boundary and the job goes on without it
// (or stops, when what stays would be below its minimum); SIGUSR1 stops every rank of the job at the
// next step boundary with a final checkpoint (trainer/trainer.h). Exit 0 either way. The smoke
// worker stops every rank on any of the three.
// An impossible configuration exits 2 with one line naming the value; a wrong smoke sum exits 3.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "trainer/device_placement.h"
#include "trainer/hf_model.h"
#include "trainer/memory_model.h"
#include "ops/model/llama_params.h"
#include "cli/exit_codes.h"
#include "common/error.h"
#include "common/log.h"
#include "ops/tensor.h"
#include "elastic/worker_env.h"
#include "trainer/smoke_worker.h"
#include "trainer/trainer.h"

namespace hdp::cli {
namespace {

trainer::StopRequest stop_request;

void request_leave(int) { stop_request.requested = true; }
void request_job_stop(int) {
  stop_request.job = true;
  stop_request.requested = true;
}

struct TrainFlags {
  bool smoke = false;
  bool dry_run = false;
  long steps = 200;
  int step_ms = 50;
  int timeout_ms = 30000;
  // The trainer's; model shape overrides apply on top of the preset.
  std::string model = "demo";
  std::string model_config;  // --model-config: a Hugging Face config.json instead of the preset
  std::string dtype;   // empty: by device (trainer/device_placement.h)
  std::string device = "auto";
  int d_model = 0, layers = 0, heads = 0, kv_heads = 0, ffn_dim = 0;
  long warmup = -1, decay_steps = 0;
  long max_rank_memory_mb = -1;
  int threads = 0;
  std::string checkpoint_dir, metrics_file, tensorboard_dir;
  std::vector<std::string> faults;
  double cooldown_s = 60, cooldown_max_s = 3600;
  trainer::TrainerConfig config;
};

// Half the physical memory over the node's workers: the default per-rank memory limit.
long default_rank_memory_mb(int nproc_per_node) {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<long>((static_cast<double>(pages) * page / 2) / (1 << 20) / std::max(1, nproc_per_node));
}

// Where this worker trains and in which precision (trainer/device_placement.h).
trainer::DevicePlacement place(const TrainFlags& f, int local_rank, int nproc_per_node, trainer::TrainerConfig& c) {
  std::optional<ops::model::Precision> precision;
  if (!f.dtype.empty()) precision = ops::model::parse_precision(f.dtype);
  const trainer::DevicePlacement placement =
      trainer::place_worker(trainer::parse_device_request(f.device), precision, local_rank, nproc_per_node,
                            trainer::VisibleDevices::probe());
  c.device = placement.device;
  c.device_ordinal = placement.ordinal;
  c.precision = placement.precision;
  // On a GPU the device's memory is the limit (check_rank_memory), not the host's default.
  if (placement.device == ops::Device::kCuda && f.max_rank_memory_mb < 0) c.max_rank_memory_bytes = 0;
  return placement;
}

trainer::TrainerConfig make_config(TrainFlags& f, int nproc_per_node) {
  trainer::TrainerConfig c = f.config;
  c.model = trainer::model_preset(f.model);
  if (!f.model_config.empty()) {
    if (f.d_model > 0 || f.layers > 0 || f.heads > 0 || f.kv_heads > 0 || f.ffn_dim > 0) {
      throw InvalidArgument("--model-config gives the whole shape: drop --d-model, --layers, --heads, --kv-heads and --ffn-dim");
    }
    c.model = trainer::read_hf_config(f.model_config);
  }
  if (f.d_model > 0) c.model.d_model = f.d_model;
  if (f.layers > 0) c.model.n_layers = f.layers;
  if (f.heads > 0) c.model.n_heads = f.heads;
  if (f.kv_heads > 0) c.model.n_kv_heads = f.kv_heads;
  if (f.ffn_dim > 0) c.model.ffn_dim = f.ffn_dim;
  c.steps = f.steps;
  c.lr.total = f.decay_steps > 0 ? f.decay_steps : f.steps;
  c.lr.warmup = f.warmup >= 0 ? f.warmup : std::min<long>(100, f.steps / 10);
  c.checkpoint_dir = f.checkpoint_dir;
  c.metrics_file = f.metrics_file;
  c.tensorboard_dir = f.tensorboard_dir;
  c.timeout = std::chrono::milliseconds(f.timeout_ms);
  const long memory_mb = f.max_rank_memory_mb >= 0 ? f.max_rank_memory_mb : default_rank_memory_mb(nproc_per_node);
  c.max_rank_memory_bytes = static_cast<std::int64_t>(memory_mb) << 20;
  for (const std::string& spec : f.faults) c.faults.push_back(trainer::parse_fault(spec));
  c.cooldown = {.base_ms = std::llround(f.cooldown_s * 1000), .max_ms = std::llround(f.cooldown_max_s * 1000)};
  return c;
}

// --dry-run: the configuration checked as a job would check it (but for the memory limit: the
// estimate is printed instead), the model and one rank's estimate on stdout.
void dry_run(trainer::TrainerConfig config) {
  const std::int64_t limit = config.max_rank_memory_bytes;
  config.max_rank_memory_bytes = 0;
  config.validate();
  const ops::model::LlamaConfig& m = config.model;
  std::cout << "model: " << ops::model::family_name(m.family) << ", " << m.n_layers << " layers, hidden " << m.d_model
            << ", " << m.n_heads << " heads (" << m.n_kv_heads << " key/value) of " << m.head_dim() << ", ffn "
            << m.ffn_dim << ", vocabulary " << m.vocab_size << ", RoPE " << ops::model::rope_type_name(m.rope_scaling.type)
            << (m.tie_embeddings ? ", tied embeddings" : "") << (m.qkv_bias ? ", q/k/v biases" : "") << "\n"
            << "parameters: " << ops::model::param_count(m) << "\n"
            << "memory per rank (1 rank, C = " << config.capacity << "): "
            << trainer::format_bytes(trainer::estimate_rank_bytes(config, 1))
            << (limit > 0 ? " (limit " + trainer::format_bytes(limit) + ")" : std::string()) << "\n";
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  TrainFlags& f = *flags;
  trainer::TrainerConfig& c = f.config;
  CLI::App* command = app.add_subcommand("train", "Run one worker of a job (started by `hdp agent`, which sets its environment)");
  auto opt = [&](const std::string& name, auto& value, const std::string& help, const std::string& env) {
    // The last value wins: a flag given twice (a wrapper's default, then the user's) overrides.
    return command->add_option(name, value, help)
        ->envname(env)
        ->capture_default_str()
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  };
  command->add_flag("--dry-run", f.dry_run,
                    "Check the configuration, print the model (its parameter count) and one rank's memory estimate, "
                    "and exit without joining a job");
  command->add_flag("--smoke", f.smoke, "Run the elastic smoke worker (tests): all-reduce with exact sums every step");
  opt("--steps", f.steps, "Steps until the job completes", "HDP_STEPS")->check(CLI::Range(1L, 1L << 40));
  opt("--step-ms", f.step_ms, "Smoke worker: pause per step", "HDP_STEP_MS")->check(CLI::Range(0, 60000));
  opt("--timeout-ms", f.timeout_ms, "Rendezvous and collective timeout", "HDP_TIMEOUT_MS")->check(CLI::Range(100, 3600000));

  opt("--model", f.model, "Model preset: tiny, demo, small", "HDP_MODEL");
  opt("--model-config", f.model_config, "A Hugging Face LLaMA config.json: the model's shape (instead of --model)",
      "HDP_MODEL_CONFIG");
  opt("--init-from", c.init_from,
      "A directory with model.safetensors (or its sharded index): the initial weights, unless the job resumes from "
      "its own checkpoint", "HDP_INIT_FROM");
  opt("--d-model", f.d_model, "Override the preset's hidden size", "HDP_D_MODEL");
  opt("--layers", f.layers, "Override the preset's layer count", "HDP_LAYERS");
  opt("--heads", f.heads, "Override the preset's attention heads", "HDP_HEADS");
  opt("--kv-heads", f.kv_heads, "Override the preset's key/value heads", "HDP_KV_HEADS");
  opt("--ffn-dim", f.ffn_dim, "Override the preset's MLP width", "HDP_FFN_DIM");
  opt("--dtype", f.dtype,
      "f32, or bf16 mixed precision: bf16 GEMM and attention operands and bf16 gradients and parameters on the wire, "
      "f32 master weights, optimizer state and loss (checkpoints hold f32 either way). Default: bf16 on a GPU, f32 "
      "on the CPU",
      "HDP_DTYPE")
      ->check(CLI::IsMember({"f32", "bf16"}));
  opt("--device", f.device,
      "cuda (the local rank's GPU: local rank mod the visible devices), cpu, or auto (cuda when this worker sees a "
      "device). On a GPU the step, the optimizer state and the data plane live on the device (NCCL when every rank "
      "has a GPU of its own, TCP through pinned host buffers when ranks share one). Default: auto",
      "HDP_DEVICE")
      ->check(CLI::IsMember({"cuda", "cpu", "auto"}));
  opt("--context", c.context, "Longest training sequence in tokens (documents are cut to it)", "HDP_CONTEXT");
  opt("--capacity", c.capacity, "C: tokens one rank holds in one micro-batch", "HDP_CAPACITY");
  opt("--batch-tokens", c.batch_tokens, "Global batch per step in tokens, whatever the world size", "HDP_BATCH_TOKENS");
  opt("--lr", c.lr.peak, "Peak learning rate", "HDP_LR");
  opt("--min-lr", c.lr.min, "Learning rate at the end of the cosine decay", "HDP_MIN_LR");
  opt("--warmup-steps", f.warmup, "Linear warm-up steps (default: min(100, steps/10))", "HDP_WARMUP_STEPS");
  opt("--decay-steps", f.decay_steps, "Step at which the cosine decay reaches --min-lr (default: --steps)",
      "HDP_DECAY_STEPS");
  opt("--beta1", c.beta1, "AdamW beta1", "HDP_BETA1");
  opt("--beta2", c.beta2, "AdamW beta2", "HDP_BETA2");
  opt("--weight-decay", c.weight_decay, "AdamW decoupled weight decay", "HDP_WEIGHT_DECAY");
  command->add_flag("--decay-norms,!--no-decay-norms", c.decay_norms,
                    "Apply weight decay to RMSNorm weights too (default: exempt, as most LLaMA recipes)")
      ->envname("HDP_DECAY_NORMS");
  opt("--clip", c.max_grad_norm, "Clip the global gradient norm to this (<= 0: no clipping)", "HDP_CLIP");
  opt("--data", c.data,
      "A directory of text files (one file a document), a Megatron indexed dataset PREFIX (PREFIX.idx + PREFIX.bin), "
      "synthetic:github|byted|file:PATH, or a weighted blend of those, \"W1 PATH1 W2 PATH2 ...\" (e.g. \"0.7 A 0.3 "
      "B\": weights count sequences; an epoch reads every piece of every dataset at least once, repeating those of a "
      "dataset small for its weight)",
      "HDP_DATA");
  opt("--eval-data", c.eval_data,
      "Held-out data (the forms of --data): its loss every --eval-every steps, reported as eval_loss", "HDP_EVAL_DATA");
  opt("--eval-every", c.eval_every, "Steps between evaluations of --eval-data (and one at the last step)",
      "HDP_EVAL_EVERY")
      ->check(CLI::Range(0, 1 << 30));
  opt("--eval-tokens", c.eval_tokens, "Tokens of the held-out batch (at most all of --eval-data)", "HDP_EVAL_TOKENS")
      ->check(CLI::Range(1L, 1L << 40));
  opt("--seed", c.seed, "Seed of the initial weights and the data order", "HDP_SEED");
  opt("--checkpoint-dir", f.checkpoint_dir, "Where checkpoints go (empty: none)", "HDP_CHECKPOINT_DIR");
  opt("--checkpoint-every", c.checkpoint_every, "Steps between checkpoints", "HDP_CHECKPOINT_EVERY");
  opt("--keep", c.keep, "Committed checkpoints kept", "HDP_KEEP");
  command->add_flag("--allow-data-change", c.allow_data_change,
                    "Resume from a checkpoint written over other --data, or in an earlier data order (its fingerprint "
                    "differs), instead of refusing")
      ->envname("HDP_ALLOW_DATA_CHANGE");
  command->add_flag("--resume,!--no-resume", c.resume,
                    "Restore the newest valid checkpoint when the job starts (default on); --no-resume needs an "
                    "empty checkpoint directory")
      ->envname("HDP_RESUME");
  opt("--max-rank-memory-mb", f.max_rank_memory_mb,
      "Memory limit per rank (default on the CPU: half the machine's memory over the node's workers; on a GPU "
      "none, and the device's free memory at the worker's start, its share when workers share the device, is "
      "checked as well; 0: none)",
      "HDP_MAX_RANK_MEMORY_MB");
  opt("--cost-model", c.cost_model, "A cost model file from `hdp plan --calibrate` (default: estimated)",
      "HDP_COST_MODEL");
  opt("--threads", f.threads, "OpenMP threads per worker (0: the machine's cores over the node's workers)",
      "HDP_THREADS")
      ->check(CLI::Range(0, 1024));
  opt("--metrics-file", f.metrics_file, "Rank 0 appends a JSON line per step (step, exact loss, world size, ...)",
      "HDP_METRICS_FILE");
  opt("--tensorboard-dir", f.tensorboard_dir, "Rank 0 writes the training curves here as TensorBoard event files",
      "HDP_TENSORBOARD_DIR");
  opt("--log-every", c.log_every, "Rank 0 prints a line every this many steps (and at every evaluation)", "HDP_LOG_EVERY");
  command->add_flag("--speed-aware,!--no-speed-aware", c.speed_aware,
                    "Plan every step with the ranks' measured speeds (default on; off: equal speeds, the "
                    "benchmark's speed-blind baseline)")
      ->envname("HDP_SPEED_AWARE");
  opt("--straggler-threshold", c.straggler_threshold, "A rank below this fraction of the median speed is a straggler",
      "HDP_STRAGGLER_THRESHOLD");
  opt("--straggler-strikes", c.straggler_strikes,
      "Consecutive straggler steps before eviction (doubled per earlier eviction of the node/slot)",
      "HDP_STRAGGLER_STRIKES");
  command->add_flag("--redundant-shards,!--no-redundant-shards", c.redundant_shards,
                    "Keep a copy of every rank's optimizer shard on a rank of another node, updated every step, so "
                    "that a node's loss is recovered from memory with no step lost (default on)")
      ->envname("HDP_REDUNDANT_SHARDS");
  opt("--verify-replicas-every", c.verify_replicas_every,
      "Compare checksums of every shard and its copy every this many steps (0: never)", "HDP_VERIFY_REPLICAS_EVERY");
  command->add_flag("--evict-stragglers,!--no-evict-stragglers", c.evict_stragglers,
                    "Ask the leader to evict persistent stragglers for a cool-down (default on)")
      ->envname("HDP_EVICT_STRAGGLERS");
  opt("--evict-cooldown-s", f.cooldown_s, "First cool-down of an evicted node/slot; doubles per eviction",
      "HDP_EVICT_COOLDOWN_S")
      ->check(CLI::Range(0.001, 3.15e7));
  opt("--evict-cooldown-max-s", f.cooldown_max_s, "Longest cool-down", "HDP_EVICT_COOLDOWN_MAX_S")
      ->check(CLI::Range(0.001, 3.15e7));
  command->add_option("--fault", f.faults,
                      "Inject a fault (tests): crash:R@S[:PHASE], kill-node:R@S[:PHASE], hang:R@S:MS, reset:R@S, slow:NODE/SLOT@S[-E]:F, "
                      "throttle:NODE/SLOT@S:CPUS, hold:all@S:MS, setup:NODE/SLOT:MS")
      ->envname("HDP_FAULTS")
      ->delimiter(',');

  command->callback([flags] {
    struct sigaction leave {}, stop {};
    leave.sa_handler = request_leave;
    stop.sa_handler = request_job_stop;
    sigaction(SIGTERM, &leave, nullptr);
    sigaction(SIGINT, &leave, nullptr);
    sigaction(SIGUSR1, &stop, nullptr);  // Slurm signals a whole step, workers included
    // A standby worker (elastic/worker_env.h) prepares what does not depend on its slot, then waits
    // for one on its standard input; end of input (the agent did not need it) ends it with exit 0.
    const bool standby = elastic::is_standby([](const char* name) { return std::getenv(name); });
    auto await_slot = [] {
      const bool assigned = elastic::await_standby_assignment(STDIN_FILENO, stop_request.requested);
      if (assigned) log()->info("standby worker: given local rank {}", std::getenv(elastic::worker_env::kLocalRank));
      return assigned;
    };
    if (flags->smoke) {
      if (standby && !await_slot()) return;
      auto ctx = elastic::ElasticContext::from_environment();
      trainer::SmokeOptions options;
      options.steps = flags->steps;
      options.step_time = std::chrono::milliseconds(flags->step_ms);
      options.timeout = std::chrono::milliseconds(flags->timeout_ms);
      if (trainer::run_smoke_worker(ctx, options, stop_request.requested) == trainer::SmokeResult::kWrongSum) {
        throw CLI::RuntimeError(kExitJobFailed);
      }
      return;
    }
    // The configuration is checked before the environment: a bad flag is named even outside a job.
    const char* nproc_text = std::getenv(elastic::worker_env::kNprocPerNode);
    const int nproc = std::max(1, nproc_text ? std::atoi(nproc_text) : 1);
    trainer::TrainerConfig config = make_config(*flags, nproc);
    if (const char* node_dir = std::getenv(elastic::worker_env::kNodeDir)) config.data_index_dir = node_dir;
    config.threads = flags->threads > 0 ? flags->threads
                                        : std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)) / nproc);
    std::optional<trainer::PreparedWorker> prepared;
    trainer::TrainerConfig at_zero = config;
    if (standby && !flags->dry_run) {
      // Local rank 0's placement stands for the slot's: the device kind and precision, all the
      // setup reads, are the node's. A slot placed otherwise builds its own (below).
      place(*flags, 0, nproc, at_zero);
      at_zero.validate();
      const auto started = std::chrono::steady_clock::now();
      prepared = trainer::prepare_worker(at_zero);
      log()->info("standby worker: set up in {:.3f} s; waiting for a slot",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
      if (!await_slot()) return;
    }
    const char* local_text = std::getenv(elastic::worker_env::kLocalRank);
    const int local_rank = local_text ? std::atoi(local_text) : 0;  // out of [0, nproc): place() refuses it
    const trainer::DevicePlacement placement = place(*flags, local_rank, nproc, config);
    if (prepared && (at_zero.device != config.device || at_zero.precision != config.precision)) {
      log()->info("standby worker: this slot's placement differs from local rank 0's; setting up again");
      prepared.reset();
    }
    if (prepared) log()->info("standby worker: training with the setup it prepared");
    if (flags->dry_run) {
      dry_run(config);
      return;
    }
    config.validate();
    auto ctx = elastic::ElasticContext::from_environment();
    // Logged once the worker is sure to train (a refusal above is its one line).
    log()->info("device {}", placement.describe());
    if (placement.device == ops::Device::kCuda) {
      ops::use_cuda_device(placement.ordinal);
      // The device's free memory before this worker allocated, its share when workers share it.
      if (const auto memory = ops::cuda_memory()) config.device_free_bytes = memory->free_bytes / placement.sharing;
    }
    trainer::run_trainer(ctx, config, stop_request, std::move(prepared));
  });
}

}  // namespace hdp::cli
