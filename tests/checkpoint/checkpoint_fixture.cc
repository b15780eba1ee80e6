#include "tests/checkpoint/checkpoint_fixture.h"

#include <cstring>

#include "checkpoint/checkpoint_root.h"
#include "checkpoint/local_group.h"
#include "checkpoint/restorer.h"
#include "checkpoint/saver.h"

namespace hdp::checkpoint::test {
namespace {

void add_layer(std::vector<TensorSpec>& tensors, int layer) {
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  tensors.push_back({p + "input_layernorm.weight", {16}});
  tensors.push_back({p + "self_attn.q_proj.weight", {16, 16}});
  tensors.push_back({p + "self_attn.k_proj.weight", {8, 16}});
  tensors.push_back({p + "self_attn.v_proj.weight", {8, 16}});
  tensors.push_back({p + "self_attn.o_proj.weight", {16, 16}});
  tensors.push_back({p + "post_attention_layernorm.weight", {16}});
  tensors.push_back({p + "mlp.gate_proj.weight", {43, 16}});
  tensors.push_back({p + "mlp.up_proj.weight", {43, 16}});
  tensors.push_back({p + "mlp.down_proj.weight", {16, 43}});
}

}  // namespace

FlatLayout tiny_llama_layout() {
  std::vector<TensorSpec> tensors{{"model.embed_tokens.weight", {37, 16}}};
  add_layer(tensors, 0);
  add_layer(tensors, 1);
  tensors.push_back({"model.norm.weight", {16}});
  tensors.push_back({"lm_head.weight", {37, 16}});
  return FlatLayout(std::move(tensors));
}

nlohmann::json tiny_llama_config() {
  return {{"architecture", "llama"}, {"hidden_size", 16}, {"num_hidden_layers", 2}, {"vocab_size", 37},
          {"intermediate_size", 43}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}};
}

FullState make_state(const FlatLayout& layout, std::uint32_t seed) {
  FullState state;
  for (std::size_t b = 0; b < kBufferCount; ++b) {
    state.buffers[b].resize(static_cast<std::size_t>(layout.total()));
    for (std::size_t i = 0; i < state.buffers[b].size(); ++i) {
      // Built from the bits so every element differs: sign, exponent and mantissa all vary.
      const std::uint32_t bits = (static_cast<std::uint32_t>(i) * 2654435761u) ^ (seed * 40503u) ^ (static_cast<std::uint32_t>(b) << 28);
      const std::uint32_t finite = (bits & 0x807fffffu) | (static_cast<std::uint32_t>(100 + (i + b + seed) % 50) << 23);
      std::memcpy(&state.buffers[b][i], &finite, sizeof finite);
    }
  }
  return state;
}

FullState zero_state(const FlatLayout& layout) {
  FullState state;
  for (auto& buffer : state.buffers) buffer.assign(static_cast<std::size_t>(layout.total()), 0.0f);
  return state;
}

std::vector<ShardRange> uneven_ranges(std::int64_t total, int world) {
  std::vector<ShardRange> out;
  const std::int64_t weights = static_cast<std::int64_t>(world) * (world + 1) / 2 + world;  // rank r weighs r + 2
  std::int64_t begin = 0, weight_so_far = 0;
  for (int r = 0; r < world; ++r) {
    weight_so_far += r + 2;
    const std::int64_t end = r + 1 == world ? total : total * weight_so_far / weights + 3;
    out.push_back({begin, end});
    begin = end;
  }
  return out;
}

std::vector<std::uint8_t> rng_bytes(int rank, std::int64_t step) {
  std::vector<std::uint8_t> out(32 + static_cast<std::size_t>(rank));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::uint8_t>(rank * 31 + step * 7 + static_cast<std::int64_t>(i));
  return out;
}

CheckpointOptions small_options(const std::filesystem::path& root) {
  CheckpointOptions options;
  options.root = root;
  options.model_config = tiny_llama_config();
  options.keep = 3;
  options.checksum_block_bytes = 64;
  return options;
}

ShardSnapshot snapshot_of(const FullState& state, ShardRange range, int rank, std::int64_t step) {
  ShardSnapshot shard;
  shard.range = range;
  for (std::size_t b = 0; b < kBufferCount; ++b) {
    shard.buffers[b] = std::span<const float>(state.buffers[b]).subspan(static_cast<std::size_t>(range.begin),
                                                                        static_cast<std::size_t>(range.size()));
  }
  shard.step = step;
  shard.rng_state = rng_bytes(rank, step);
  shard.data = data_position(step);
  return shard;
}

void save_on(int world, const CheckpointOptions& options, const FlatLayout& layout, const FullState& state, std::int64_t step) {
  const std::vector<ShardRange> ranges = uneven_ranges(layout.total(), world);
  run_ranks(world, [&](Group& group) {
    Saver saver(options, layout, group);
    saver.save(snapshot_of(state, ranges[static_cast<std::size_t>(group.rank())], group.rank(), step));
  });
}

Restored restore_on(int world, const CheckpointOptions& options, const FlatLayout& layout) {
  const std::vector<ShardRange> ranges = uneven_ranges(layout.total(), world);
  Restored restored{zero_state(layout), std::vector<std::optional<RestoredProgress>>(static_cast<std::size_t>(world))};
  run_ranks(world, [&](Group& group) {
    const auto r = static_cast<std::size_t>(group.rank());
    ShardTarget target{ranges[r], {}};
    for (std::size_t b = 0; b < kBufferCount; ++b) {
      target.buffers[b] = std::span<float>(restored.state.buffers[b]).subspan(static_cast<std::size_t>(ranges[r].begin),
                                                                              static_cast<std::size_t>(ranges[r].size()));
    }
    restored.progress[r] = restore_latest(options, layout, group, target);  // each rank writes its own slot
  });
  return restored;
}

std::uint64_t bytes_under(const std::filesystem::path& dir) {
  std::uint64_t bytes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) bytes += std::filesystem::file_size(entry.path());
  return bytes;
}

std::vector<std::int64_t> committed_steps(const std::filesystem::path& root) {
  std::vector<std::int64_t> steps;
  for (const CommittedCheckpoint& c : list_committed(root)) steps.push_back(c.step);
  return steps;
}

}  // namespace hdp::checkpoint::test
