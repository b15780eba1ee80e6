// bench/checkpoint: checkpoint I/O against raw POSIX I/O of the same bytes, on the same disk, in
// the same run, and the training stall of a save against the demo model's step
// (docs/performance.md, "Checkpoint").
//
//   save     Saver on 4 thread-ranks (write, fsync, manifest, rename)  vs  pwrite + fsync of the
//            same slices, one file per rank: plain, and with the preallocation and early
//            writeback that hdp's writer uses (RawWrite::kLikeHdp)
//   async    the background write of AsyncSaver, 1 rank  vs  the same raw writes of one file
//   restore  N -> M with resharding and checksum verification, cold page cache  vs  pread of the
//            same files, cold page cache (posix_fadvise DONTNEED evicts only these files)
//   stall    AsyncSaver::save after each training step of the demo model (bench/checkpoint_stall.h)
//
// Every comparison runs its contenders back to back within each repetition, in an order that
// rotates from one repetition to the next, and reports the median and range of the per-repetition
// ratios, so that a slow moment of a shared machine lands on both sides of a ratio.
//
// Usage: bench_checkpoint [--dir D] [--layers L] [--reps R] [--saves S]
//        (defaults: $TMPDIR or /tmp, 4, 5, 5)
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/checkpoint_stall.h"
#include "bench/checkpoint_support.h"
#include "checkpoint/async_saver.h"
#include "checkpoint/checkpoint_root.h"
#include "checkpoint/local_group.h"
#include "checkpoint/restorer.h"
#include "checkpoint/saver.h"

namespace {
namespace fs = std::filesystem;
using namespace hdp::checkpoint;
using hdp::bench::Buffers;
using hdp::bench::check;
using hdp::bench::Samples;
using hdp::bench::seconds;

// A LLaMA-shaped model for the bandwidth figures, large enough that a save is mostly disk time:
// hidden 1024, MLP 2816, vocabulary 8000, `layers` decoder layers.
FlatLayout model(int layers) {
  std::vector<TensorSpec> t{{"model.embed_tokens.weight", {8000, 1024}}};
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "o_proj"}) t.push_back({p + "self_attn." + proj + ".weight", {1024, 1024}});
    t.push_back({p + "input_layernorm.weight", {1024}});
    t.push_back({p + "post_attention_layernorm.weight", {1024}});
    t.push_back({p + "mlp.gate_proj.weight", {2816, 1024}});
    t.push_back({p + "mlp.up_proj.weight", {2816, 1024}});
    t.push_back({p + "mlp.down_proj.weight", {1024, 2816}});
  }
  t.push_back({"model.norm.weight", {1024}});
  t.push_back({"lm_head.weight", {8000, 1024}});
  return FlatLayout(std::move(t));
}

ShardSnapshot shard_of(const Buffers& b, ShardRange range, std::int64_t step) {
  ShardSnapshot s;
  s.range = range;
  for (std::size_t k = 0; k < kBufferCount; ++k) {
    s.buffers[k] = std::span<const float>(b.data[k]).subspan(static_cast<std::size_t>(range.begin), static_cast<std::size_t>(range.size()));
  }
  s.step = step;
  s.rng_state.assign(64, 7);
  return s;
}

CheckpointOptions options_for(const fs::path& root) {
  CheckpointOptions o;
  o.root = root;
  o.model_config = {{"hidden_size", 1024}};
  o.keep = 1000;  // retention is not timed; the bench deletes between repetitions
  return o;
}

double gbps(double bytes, double s) { return bytes / s / 1e9; }

// Runs `contenders` once each, starting with contender `rep % size` (the order rotates).
void rotated(int rep, const std::vector<std::function<void()>>& contenders) {
  for (std::size_t i = 0; i < contenders.size(); ++i) contenders[(i + static_cast<std::size_t>(rep)) % contenders.size()]();
}

// Raw writes of `ranges` (kPlain and kLikeHdp) and `hdp` in rotating order, `reps` times;
// prints bandwidths and the per-repetition ratios hdp / raw. `hdp` returns its own seconds.
void compare_writes(const char* label, const fs::path& root, const Buffers& state, const std::vector<ShardRange>& ranges,
                    double bytes, int reps, const std::function<double(int rep)>& hdp) {
  auto raw = [&](hdp::bench::RawWrite mode) {
    const double s = seconds([&] { hdp::bench::raw_write(root / "raw", state, ranges, mode); });
    hdp::bench::remove_settled(root / "raw");  // untimed, like the removal of hdp's checkpoints
    return s;
  };
  Samples plain_bw, like_bw, hdp_bw, vs_plain, vs_like;
  for (int rep = 0; rep < reps; ++rep) {
    double plain = 0, like = 0, ours = 0;
    rotated(rep, {[&] { plain = raw(hdp::bench::RawWrite::kPlain); }, [&] { like = raw(hdp::bench::RawWrite::kLikeHdp); },
                  [&] { ours = hdp(rep); }});
    plain_bw.add(gbps(bytes, plain));
    like_bw.add(gbps(bytes, like));
    hdp_bw.add(gbps(bytes, ours));
    vs_plain.add(plain / ours);
    vs_like.add(like / ours);
  }
  std::printf("%s  GB/s: raw pwrite+fsync %s   raw fallocate+pwrite+early writeback+fsync %s   hdp %s\n", label,
              plain_bw.summary().c_str(), like_bw.summary().c_str(), hdp_bw.summary().c_str());
  std::printf("%*s  hdp / raw with fallocate+early writeback %s   hdp / raw pwrite+fsync %s\n",
              static_cast<int>(std::string(label).size()), "", vs_like.summary(2).c_str(), vs_plain.summary(2).c_str());
}

void restore_section(const fs::path& root, const FlatLayout& layout, const Buffers& state, int saved, int restored,
                     int reps) {
  const fs::path dir = root / ("restore-" + std::to_string(saved));
  const std::vector<ShardRange> from = split_evenly(layout.total(), saved), to = split_evenly(layout.total(), restored);
  run_ranks(saved, [&](Group& g) {
    Saver saver(options_for(dir), layout, g);
    saver.save(shard_of(state, from[static_cast<std::size_t>(g.rank())], 300));
  });
  const fs::path ckpt = dir / step_dir_name(300);
  Buffers out;
  for (auto& buffer : out.data) buffer.resize(static_cast<std::size_t>(layout.total()));
  const double bytes = 3.0 * static_cast<double>(layout.total()) * sizeof(float);
  Samples raw_bw, hdp_bw, ratio;
  for (int rep = 0; rep < reps; ++rep) {
    double raw = 0, ours = 0;
    std::uint64_t file_bytes = 0;
    rotated(rep, {[&] {
                    hdp::bench::evict(ckpt);
                    raw = seconds([&] { file_bytes = hdp::bench::raw_read(ckpt); });
                  },
                  [&] {
                    hdp::bench::evict(ckpt);
                    ours = seconds([&] {
                      run_ranks(restored, [&](Group& g) {
                        const ShardRange r = to[static_cast<std::size_t>(g.rank())];
                        ShardTarget target{r, {}};
                        for (std::size_t k = 0; k < kBufferCount; ++k) {
                          target.buffers[k] = std::span<float>(out.data[k]).subspan(static_cast<std::size_t>(r.begin),
                                                                                    static_cast<std::size_t>(r.size()));
                        }
                        check(restore_latest(options_for(dir), layout, g, target).has_value(), "restore");
                      });
                    });
                  }});
    raw_bw.add(gbps(static_cast<double>(file_bytes), raw));
    hdp_bw.add(gbps(bytes, ours));
    ratio.add(gbps(bytes, ours) / gbps(static_cast<double>(file_bytes), raw));
  }
  check(out.data == state.data, "restored state equals the saved state");
  std::printf("restore %d -> %d  GB/s: raw pread (cold) %s   hdp restore (cold, verified) %s\n", saved, restored,
              raw_bw.summary().c_str(), hdp_bw.summary().c_str());
  std::printf("                hdp / raw %s\n", ratio.summary(2).c_str());
  fs::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) {
  const char* tmp = std::getenv("TMPDIR");
  fs::path base = tmp && *tmp ? tmp : "/tmp";
  int layers = 4, reps = 5, saves = 5;
  // Each figure is a median over repetitions or saves, so it needs at least one of each.
  const CLI::Range at_least_one(1, std::numeric_limits<int>::max());
  CLI::App app{"Checkpoint I/O against raw POSIX I/O of the same bytes, and the training stall of a save"};
  app.add_option("--dir", base, "Where the scratch directory hdp-bench-ckpt-PID goes (removed at the end)")
      ->capture_default_str();
  app.add_option("--layers", layers, "Decoder layers of the model saved and restored")
      ->check(at_least_one)
      ->capture_default_str();
  app.add_option("--reps", reps, "Repetitions of each save and restore comparison")
      ->check(at_least_one)
      ->capture_default_str();
  app.add_option("--saves", saves, "Training steps, each followed by a save, for the stall")
      ->check(at_least_one)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const fs::path root = base / ("hdp-bench-ckpt-" + std::to_string(::getpid()));
  const FlatLayout layout = model(layers);
  const Buffers state = hdp::bench::filled(layout.total());
  const double bytes = 3.0 * static_cast<double>(layout.total()) * sizeof(float);
  std::printf("checkpoint bench: %zu tensors, %lld elements per buffer, %.0f MiB per save (3 buffers), dir %s, %d reps;"
              " each figure: median [min-max]\n",
              layout.tensors().size(), static_cast<long long>(layout.total()), bytes / (1 << 20), root.c_str(), reps);

  // --- save: Saver on 4 thread-ranks (write + fsync + manifest + rename) ----------------------
  const int save_world = 4;
  const std::vector<ShardRange> save_ranges = split_evenly(layout.total(), save_world);
  compare_writes("save  4 ranks", root, state, save_ranges, bytes, reps, [&](int rep) {
    const double s = seconds([&] {
      run_ranks(save_world, [&](Group& g) {
        Saver saver(options_for(root / "save"), layout, g);
        saver.save(shard_of(state, save_ranges[static_cast<std::size_t>(g.rank())], 100 + rep));
      });
    });
    hdp::bench::remove_settled(root / "save");
    return s;
  });

  // --- async: the background write of one rank's whole file, the trainer idle ------------------
  {
    SoloGroup solo;
    // One saver for all saves, as in a job: its staging buffers are reused.
    AsyncSaver saver(options_for(root / "async"), layout, solo);
    saver.save(shard_of(state, {0, layout.total()}, 199));  // first touch of the staging buffers, not timed
    check(saver.wait(), "async save");
    compare_writes("async 1 rank ", root, state, {{0, layout.total()}}, bytes, reps, [&](int rep) {
      double copy = 0;
      const double total = seconds([&] {
        copy = saver.save(shard_of(state, {0, layout.total()}, 200 + rep)).copy_seconds;
        check(saver.wait(), "async save");
      });
      hdp::bench::remove_settled(root / "async" / step_dir_name(200 + rep));
      return total - copy;  // the writer's time: staging is the stall, measured below
    });
  }

  // --- restore: N -> M, cold cache, vs raw pread of the same files, cold cache -------------------
  restore_section(root, layout, state, 4, 3, reps);
  restore_section(root, layout, state, 2, 4, reps);

  // --- stall: the demo model's training step, a save after each -------------------------------
  hdp::bench::measure_stall(root / "stall", saves);
  fs::remove_all(root);
  return 0;
}
