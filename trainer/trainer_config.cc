#include "trainer/trainer_config.h"

#include "trainer/data/blend.h"
#include "trainer/data/indexed_dataset.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "trainer/hf_model.h"
#include "trainer/memory_model.h"

namespace hdp::trainer {
namespace {

template <typename T>
bool parse_number(std::string_view text, T& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size();
}

std::string mib(std::int64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; }

Fault::Kind fault_kind(std::string_view kind, const std::string& quoted) {
  if (kind == "crash") return Fault::Kind::kCrash;
  if (kind == "kill-node") return Fault::Kind::kKillNode;
  if (kind == "hang") return Fault::Kind::kHang;
  if (kind == "slow") return Fault::Kind::kSlow;
  if (kind == "throttle") return Fault::Kind::kThrottle;
  if (kind == "hold") return Fault::Kind::kHold;
  if (kind == "reset") return Fault::Kind::kReset;
  if (kind == "setup") return Fault::Kind::kSetup;
  throw InvalidArgument(quoted + ": unknown fault '" + std::string(kind) +
                        "' (crash, kill-node, hang, reset, slow, throttle, hold, setup)");
}

// Splits the value after the step off `step_text`: hang's and hold's MS, slow's F, throttle's CPUS (returned),
// or a crash's or kill-node's phase (set in `fault`).
std::string_view split_tail(Fault& fault, std::string_view& step_text, std::string_view kind, const std::string& quoted) {
  if (fault.kind == Fault::Kind::kHang || fault.kind == Fault::Kind::kHold || fault.kind == Fault::Kind::kSlow ||
      fault.kind == Fault::Kind::kThrottle) {
    const auto sep = step_text.find(':');
    if (sep == std::string_view::npos) throw InvalidArgument(quoted + ": " + std::string(kind) + " needs a value after the step");
    const std::string_view tail = step_text.substr(sep + 1);
    step_text = step_text.substr(0, sep);
    return tail;
  }
  if (const auto sep = step_text.find(':'); sep != std::string_view::npos) {
    const std::string_view name = step_text.substr(sep + 1);
    step_text = step_text.substr(0, sep);
    for (auto phase : {mesh::StepPhase::kForward, mesh::StepPhase::kReduceScatter, mesh::StepPhase::kOptimizer,
                       mesh::StepPhase::kAllGather}) {
      if (name == mesh::phase_name(phase)) fault.phase = phase;
    }
    if (!fault.phase || !fault.claimed_once() || fault.kind == Fault::Kind::kReset) {
      throw InvalidArgument(quoted + ": the phase '" + std::string(name) +
                            "' is not one of forward, reduce-scatter, optimizer, all-gather (crash, kill-node only)");
    }
  }
  return {};
}

// The rank (crash, kill-node, hang), `all` (hold) or NODE/SLOT (the others) the fault names.
void parse_target(Fault& fault, std::string_view who, std::string_view kind, const std::string& quoted) {
  if (fault.kind == Fault::Kind::kHold) {
    if (who != "all") throw InvalidArgument(quoted + ": hold holds every rank: write hold:all@STEP:MS");
    return;
  }
  if (fault.claimed_once()) {
    if (!parse_number(who, fault.rank) || fault.rank < 0) throw InvalidArgument(quoted + ": the rank must be an integer >= 0");
    return;
  }
  const auto slash = who.rfind('/');
  if (slash == std::string_view::npos || slash == 0 || !parse_number(who.substr(slash + 1), fault.slot) ||
      fault.slot < 0) {
    throw InvalidArgument(quoted + ": " + std::string(kind) + " names a worker as NODE/SLOT (node id, local rank >= 0)");
  }
  fault.node = std::string(who.substr(0, slash));
}

// STEP, or slow's STEP-END.
void parse_steps(Fault& fault, std::string_view step_text, const std::string& quoted) {
  if (fault.kind == Fault::Kind::kSlow) {
    if (const auto dash = step_text.find('-'); dash != std::string_view::npos) {
      if (!parse_number(step_text.substr(dash + 1), fault.until) || fault.until < 1) {
        throw InvalidArgument(quoted + ": the last step must be an integer >= 1");
      }
      step_text = step_text.substr(0, dash);
    }
  }
  if (!parse_number(step_text, fault.step) || fault.step < 1) {
    throw InvalidArgument(quoted + ": the step must be an integer >= 1");
  }
  if (fault.until != 0 && fault.until < fault.step) throw InvalidArgument(quoted + ": the range ends before it starts");
}

// hang's and hold's MS, slow's F, throttle's CPUS.
void parse_value(Fault& fault, std::string_view tail, const std::string& quoted) {
  switch (fault.kind) {
    case Fault::Kind::kHang:
    case Fault::Kind::kHold: {
      std::int64_t hang_ms = 0;
      if (!parse_number(tail, hang_ms) || hang_ms < 1 || hang_ms > 3'600'000) {
        throw InvalidArgument(quoted + ": " + (fault.kind == Fault::Kind::kHang ? "hang" : "hold") +
                              " needs :MS with 1 <= MS <= 3600000 after the step");
      }
      fault.hang = std::chrono::milliseconds(hang_ms);
      break;
    }
    case Fault::Kind::kSlow:
      if (!parse_number(tail, fault.factor) || !(fault.factor > 0 && fault.factor <= 1)) {
        throw InvalidArgument(quoted + ": slow needs a speed F with 0 < F <= 1 after the step");
      }
      break;
    case Fault::Kind::kThrottle:
      if (!parse_number(tail, fault.factor) || !(fault.factor >= 0.01 && fault.factor <= 1024)) {
        throw InvalidArgument(quoted + ": throttle needs a CPU count in [0.01, 1024] after the step");
      }
      break;
    default:
      break;
  }
}

}  // namespace

Fault parse_fault(std::string_view spec) {
  const std::string quoted = "--fault '" + std::string(spec) + "'";
  const auto colon = spec.find(':');
  if (colon != std::string_view::npos && spec.substr(0, colon) == "setup") {  // setup:NODE/SLOT:MS, no step
    Fault fault;
    fault.spec = std::string(spec);
    fault.kind = Fault::Kind::kSetup;
    const std::string_view rest = spec.substr(colon + 1);
    const auto last = rest.rfind(':');
    std::int64_t ms = 0;
    if (last == std::string_view::npos || !parse_number(rest.substr(last + 1), ms) || ms < 1 || ms > 3'600'000) {
      throw InvalidArgument(quoted + " is not setup:NODE/SLOT:MS with 1 <= MS <= 3600000");
    }
    parse_target(fault, rest.substr(0, last), "setup", quoted);
    fault.hang = std::chrono::milliseconds(ms);
    return fault;
  }
  const auto at = spec.find('@');
  if (colon == std::string_view::npos || at == std::string_view::npos || at < colon) {
    throw InvalidArgument(quoted + " is not KIND:RANK@STEP[:PHASE] (crash, kill-node), hang:RANK@STEP:MS, "
                          "reset:RANK@STEP, slow:NODE/SLOT@STEP[-END]:F, throttle:NODE/SLOT@STEP:CPUS, "
                          "hold:all@STEP:MS or setup:NODE/SLOT:MS");
  }
  Fault fault;
  fault.spec = std::string(spec);
  const std::string_view kind = spec.substr(0, colon);
  fault.kind = fault_kind(kind, quoted);
  std::string_view step_text = spec.substr(at + 1);
  const std::string_view tail = split_tail(fault, step_text, kind, quoted);
  parse_target(fault, spec.substr(colon + 1, at - colon - 1), kind, quoted);
  parse_steps(fault, step_text, quoted);
  parse_value(fault, tail, quoted);
  return fault;
}

ops::model::LlamaConfig model_preset(std::string_view name) {
  ops::model::LlamaConfig c;  // "demo"
  if (name == "demo") return c;
  if (name == "tiny") {
    c.d_model = 64;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.ffn_dim = 192;
    return c;
  }
  if (name == "small") {
    c.d_model = 512;
    c.n_layers = 8;
    c.n_heads = 8;
    c.n_kv_heads = 8;
    c.ffn_dim = 1536;
    return c;
  }
  throw InvalidArgument("--model '" + std::string(name) + "' is not one of tiny, demo, small");
}

namespace {

// A blend's form is checked here, before the environment (its paths when they are opened), and a
// vocabulary too small for a text corpus's byte tokens.
void check_data(const std::string& data, std::int64_t vocab_size) {
  std::vector<std::string> paths{data};
  if (data::is_blend_spec(data)) {
    paths.clear();
    for (auto& [weight, path] : data::parse_blend_spec(data)) paths.push_back(std::move(path));
  }
  if (vocab_size >= 256) return;
  // Synthetic documents and indexed datasets hold ids below --vocab (an indexed dataset's are
  // checked as they are read); a text corpus's are bytes. In a blend, each dataset alike.
  const auto text_corpus = [](const std::string& path) {
    return path.rfind("synthetic:", 0) != 0 && !data::IndexedDataset::exists(path);
  };
  for (const std::string& path : paths) {
    if (!text_corpus(path)) continue;
    throw InvalidArgument("--vocab " + std::to_string(vocab_size) + " cannot hold a text corpus's byte tokens (0-255)" +
                          (path == data ? std::string() : " of '" + path + "' in the --data blend") +
                          ": use 256 or more");
  }
}

}  // namespace

void TrainerConfig::validate() const {
  if (!init_from.empty() && !std::filesystem::exists(init_from / "model.safetensors") &&
      !std::filesystem::exists(init_from / "model.safetensors.index.json")) {
    throw InvalidArgument("--init-from '" + init_from.string() +
                          "' holds neither model.safetensors nor model.safetensors.index.json");
  }
  model.validate();
  check_data(data, model.vocab_size);
  if (eval_every < 0) throw InvalidArgument("--eval-every " + std::to_string(eval_every) + " must be >= 1");
  if (!eval_data.empty() && eval_every == 0) throw InvalidArgument("--eval-data needs --eval-every N (steps between evaluations)");
  if (eval_data.empty() && eval_every > 0) throw InvalidArgument("--eval-every needs --eval-data (the held-out data)");
  if (eval_tokens < 1) throw InvalidArgument("--eval-tokens " + std::to_string(eval_tokens) + " must be >= 1");
  if (context < 1) throw InvalidArgument("--context " + std::to_string(context) + " must be >= 1 token");
  if (model.sliding_window > 0 && context > model.sliding_window) {
    throw InvalidArgument("field 'sliding_window' is " + std::to_string(model.sliding_window) + ", shorter than --context " +
                          std::to_string(context) + ": hdp's attention has no sliding window");
  }
  if (capacity < 1) throw InvalidArgument("--capacity " + std::to_string(capacity) + " must be >= 1 token");
  if (batch_tokens < 1) throw InvalidArgument("--batch-tokens " + std::to_string(batch_tokens) + " must be >= 1");
  if (steps < 1) throw InvalidArgument("--steps " + std::to_string(steps) + " must be >= 1");
  if (verify_replicas_every < 0) {
    throw InvalidArgument("--verify-replicas-every " + std::to_string(verify_replicas_every) + " must be >= 0");
  }
  if (verify_replicas_every > 0 && !redundant_shards) {
    throw InvalidArgument("--verify-replicas-every needs --redundant-shards");
  }
  lr.validate();
  if (!(beta1 >= 0 && beta1 < 1)) throw InvalidArgument("--beta1 " + std::to_string(beta1) + " must lie in [0, 1)");
  if (!(beta2 >= 0 && beta2 < 1)) throw InvalidArgument("--beta2 " + std::to_string(beta2) + " must lie in [0, 1)");
  if (!std::isfinite(weight_decay) || weight_decay < 0) {
    throw InvalidArgument("--weight-decay " + std::to_string(weight_decay) + " must be >= 0");
  }
  if (!std::isfinite(max_grad_norm)) {
    throw InvalidArgument("--clip " + std::to_string(max_grad_norm) + " must be a finite number (<= 0: no clipping)");
  }
  if (checkpoint_every < 1) {
    throw InvalidArgument("--checkpoint-every " + std::to_string(checkpoint_every) + " must be >= 1");
  }
  if (keep < 1) throw InvalidArgument("--keep " + std::to_string(keep) + " must be >= 1");
  if (max_rank_memory_bytes < 0) throw InvalidArgument("--max-rank-memory-mb must be >= 0");
  if (timeout.count() < 100) {
    throw InvalidArgument("--timeout-ms " + std::to_string(timeout.count()) + " must be >= 100");
  }
  if (log_every < 1) throw InvalidArgument("--log-every " + std::to_string(log_every) + " must be >= 1");
  if (!(straggler_threshold > 0 && straggler_threshold < 1)) {
    throw InvalidArgument("--straggler-threshold " + std::to_string(straggler_threshold) + " must lie in (0, 1)");
  }
  if (straggler_strikes < 1 || straggler_strikes > 1000) {
    throw InvalidArgument("--straggler-strikes " + std::to_string(straggler_strikes) + " must lie in [1, 1000]");
  }
  if (cooldown.base_ms < 1 || cooldown.max_ms < cooldown.base_ms || cooldown.max_ms > std::int64_t{1000} * 3600 * 24 * 365) {
    throw InvalidArgument("--evict-cooldown-s " + std::to_string(cooldown.base_ms / 1000.0) + " and --evict-cooldown-max-s " +
                          std::to_string(cooldown.max_ms / 1000.0) + " must satisfy 0.001 <= cool-down <= maximum <= a year");
  }
  // Whatever the world size, a rank holds the full parameters, their gradients and a micro-batch's
  // activations: a model above the limit even then cannot run (the moments' shard is checked per
  // generation, check_world).
  constexpr int kAnyWorld = 1 << 20;
  if (const std::int64_t floor = estimate_rank_bytes(*this, kAnyWorld);
      max_rank_memory_bytes > 0 && floor > max_rank_memory_bytes) {
    throw InvalidArgument("the model needs at least " + mib(floor) + " per rank at C = " + std::to_string(capacity) +
                          " (parameters, gradients and a micro-batch's activations), above --max-rank-memory-mb " +
                          mib(max_rank_memory_bytes));
  }
}

nlohmann::json TrainerConfig::model_json() const {
  nlohmann::json j = model_manifest_json(model);
  j["max_position_embeddings"] = std::max<std::int64_t>(model.max_positions, context);
  return j;
}

namespace {

// The usual plan of a multi-node job (check_world sees the world size, not the nodes): with
// redundancy each rank holds one copy and keeps the previous versions; on one node it holds
// none, so this is an upper bound there.
MemoryInputs memory_inputs(const TrainerConfig& config, int world_size) {
  const bool copies = config.redundant_shards && world_size > 1;
  return {.model = config.model,
          .precision = config.precision,
          .device = config.device,
          .device_ordinal = config.device_ordinal,
          .world_size = world_size,
          .capacity = config.capacity,
          .buddy_copies = copies ? 1 : 0,
          .keep_previous = copies,
          .ring = config.context > config.capacity,
          .threads = config.threads > 0 ? config.threads
                                        : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))};
}

}  // namespace

std::int64_t estimate_rank_bytes(const TrainerConfig& config, int world_size) {
  return estimate_memory(memory_inputs(config, world_size)).device_bytes();
}

void check_rank_memory(const TrainerConfig& config, int world_size) {
  const MemoryBreakdown need = estimate_memory(memory_inputs(config, world_size));
  if (config.max_rank_memory_bytes > 0) check_fits(need, config.max_rank_memory_bytes, "--max-rank-memory-mb");
  if (config.device == ops::Device::kCuda && config.device_free_bytes > 0) {
    check_fits(need, config.device_free_bytes, "free on " + need.device_name() + " when the worker started",
               MemoryMargin::gpu());
  }
}

}  // namespace hdp::trainer
