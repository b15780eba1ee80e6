// bench/checkpoint: checkpoint I/O against raw POSIX I/O of the same bytes, on the same disk, in
// the same run (docs/performance.md, "Checkpoint").
//
//   save     Saver on N thread-ranks (write, fsync, manifest, rename)  vs  pwrite + fsync, one file per rank
//   async    the stall of AsyncSaver::save (memcpy into staging) vs one AdamW pass over the same
//            shard (a fixed compute loop every step runs; the demo model's full step comes later),
//            and the background write bandwidth
//   restore  N -> M with resharding and checksum verification, cold page cache  vs  pread of the
//            same files, cold page cache (posix_fadvise DONTNEED evicts only these files)
//
// Usage: bench_checkpoint [--dir D] [--layers L] [--reps R]   (defaults: $TMPDIR or /tmp, 4, 3)
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint/async_saver.h"
#include "checkpoint/checkpoint_root.h"
#include "checkpoint/local_group.h"
#include "checkpoint/restorer.h"
#include "checkpoint/saver.h"

namespace {
namespace fs = std::filesystem;
using namespace hdp::checkpoint;
using Clock = std::chrono::steady_clock;

double seconds(const std::function<void()>& fn) {
  const auto start = Clock::now();
  fn();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A LLaMA-shaped model: hidden 1024, MLP 2816, vocabulary 8000, `layers` decoder layers.
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

struct Buffers {
  std::array<std::vector<float>, kBufferCount> data;
};

Buffers filled(std::int64_t n) {
  Buffers b;
  for (std::size_t k = 0; k < kBufferCount; ++k) {
    b.data[k].resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) b.data[k][static_cast<std::size_t>(i)] = static_cast<float>((i * 7 + static_cast<std::int64_t>(k)) % 1000) * 1e-3f;
  }
  return b;
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

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "bench_checkpoint: %s failed: %s\n", what, std::strerror(errno));
    std::exit(1);
  }
}

constexpr std::size_t kChunk = std::size_t{64} << 20;

// The baseline writer: per rank one file, its three buffer slices written sequentially with pwrite, then fsync.
void raw_write(const fs::path& dir, const Buffers& b, const std::vector<ShardRange>& ranges) {
  fs::create_directories(dir);
  for (std::size_t r = 0; r < ranges.size(); ++r) {
    const int fd = ::open((dir / ("raw-" + std::to_string(r))).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    check(fd >= 0, "open");
    off_t offset = 0;
    for (std::size_t k = 0; k < kBufferCount; ++k) {
      const char* p = reinterpret_cast<const char*>(b.data[k].data() + ranges[r].begin);
      std::size_t left = static_cast<std::size_t>(ranges[r].size()) * sizeof(float);
      while (left > 0) {
        const ssize_t n = ::pwrite(fd, p, std::min(left, kChunk), offset);
        check(n > 0, "pwrite");
        p += n, offset += n, left -= static_cast<std::size_t>(n);
      }
    }
    check(::fsync(fd) == 0, "fsync");
    ::close(fd);
  }
  const int d = ::open(dir.c_str(), O_RDONLY);
  check(d >= 0 && ::fsync(d) == 0, "fsync dir");
  ::close(d);
}

// Evicts the (clean, fsynced) pages of every file under `dir` from the page cache.
void evict(const fs::path& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    check(fd >= 0, "open for eviction");
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

std::uint64_t raw_read(const fs::path& dir) {
  std::vector<char> buffer(kChunk);
  std::uint64_t total = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    check(fd >= 0, "open");
    for (off_t offset = 0;;) {
      const ssize_t n = ::pread(fd, buffer.data(), buffer.size(), offset);
      check(n >= 0, "pread");
      if (n == 0) break;
      offset += n, total += static_cast<std::uint64_t>(n);
    }
    ::close(fd);
  }
  return total;
}

// One AdamW update over a shard (p, m, v updated from g): the fixed compute loop the stall is compared with.
void adamw_pass(std::vector<float>& p, std::vector<float>& m, std::vector<float>& v, const std::vector<float>& g) {
  const float b1 = 0.9f, b2 = 0.95f, lr = 1e-4f, eps = 1e-8f, wd = 0.1f;
  for (std::size_t i = 0; i < p.size(); ++i) {
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    p[i] -= lr * (m[i] / (std::sqrt(v[i]) + eps) + wd * p[i]);
  }
}

CheckpointOptions options_for(const fs::path& root) {
  CheckpointOptions o;
  o.root = root;
  o.model_config = {{"hidden_size", 1024}};
  o.keep = 1000;  // retention is not timed; the bench deletes between repetitions
  return o;
}

double gbps(double bytes, double s) { return bytes / s / 1e9; }

}  // namespace

int main(int argc, char** argv) {
  const char* tmp = std::getenv("TMPDIR");
  fs::path base = tmp && *tmp ? tmp : "/tmp";
  int layers = 4, reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--dir") base = argv[i + 1];
    else if (flag == "--layers") layers = std::atoi(argv[i + 1]);
    else if (flag == "--reps") reps = std::atoi(argv[i + 1]);
    else { std::fprintf(stderr, "usage: bench_checkpoint [--dir D] [--layers L] [--reps R]\n"); return 2; }
  }
  const fs::path root = base / ("hdp-bench-ckpt-" + std::to_string(::getpid()));
  const FlatLayout layout = model(layers);
  const Buffers state = filled(layout.total());
  const double bytes = 3.0 * static_cast<double>(layout.total()) * sizeof(float);
  std::printf("checkpoint bench: %zu tensors, %lld elements per buffer, %.0f MiB per save (3 buffers), dir %s, %d reps\n",
              layout.tensors().size(), static_cast<long long>(layout.total()), bytes / (1 << 20), root.c_str(), reps);

  // --- save: Saver on 4 thread-ranks vs raw pwrite + fsync of the same slices --------------------
  const int save_world = 4;
  const std::vector<ShardRange> save_ranges = split_evenly(layout.total(), save_world);
  std::vector<double> raw_s, save_s;
  for (int rep = 0; rep < reps; ++rep) {
    raw_s.push_back(seconds([&] { raw_write(root / "raw", state, save_ranges); }));
    fs::remove_all(root / "raw");
    save_s.push_back(seconds([&] {
      run_ranks(save_world, [&](Group& g) {
        Saver saver(options_for(root / "save"), layout, g);
        saver.save(shard_of(state, save_ranges[static_cast<std::size_t>(g.rank())], 100 + rep));
      });
    }));
    fs::remove_all(root / "save");
  }
  const double raw_w = gbps(bytes, median(raw_s)), save_w = gbps(bytes, median(save_s));
  std::printf("save  %d ranks   raw pwrite+fsync %.3f GB/s   hdp save (incl. commit) %.3f GB/s   ratio %.2f\n", save_world,
              raw_w, save_w, save_w / raw_w);

  // --- async: stall per save vs one AdamW pass over the same shard, background bandwidth ---------
  {
    const std::int64_t n = layout.total();
    std::vector<float> p(state.data[0]), m(state.data[1]), v(state.data[2]), g(static_cast<std::size_t>(n), 1e-3f);
    std::vector<double> adamw_s, stall_s, background_s, busy_adamw_s;
    for (int rep = 0; rep < reps; ++rep) adamw_s.push_back(seconds([&] { adamw_pass(p, m, v, g); }));
    SoloGroup solo;
    // One saver for all saves, as in a job: its staging buffers are allocated and first touched by
    // the first save (page faults), and reused by every later one. Save 0 is reported apart.
    AsyncSaver saver(options_for(root / "async"), layout, solo);
    double first_stall = 0;
    for (int rep = 0; rep <= reps; ++rep) {
      const auto start = Clock::now();
      const StageTiming t = saver.save(shard_of(state, {0, n}, 200 + rep));
      check(saver.wait(), "async save");
      const double background = std::chrono::duration<double>(Clock::now() - start).count() - t.copy_seconds;
      fs::remove_all(root / "async" / step_dir_name(200 + rep));
      if (rep == 0) {
        first_stall = t.copy_seconds;
        continue;
      }
      stall_s.push_back(t.copy_seconds);
      background_s.push_back(background);
      // Training goes on while the writer works: time one AdamW pass under that contention.
      saver.save(shard_of(state, {0, n}, 400 + rep));
      busy_adamw_s.push_back(seconds([&] { adamw_pass(p, m, v, g); }));
      check(saver.wait(), "async save");
      fs::remove_all(root / "async" / step_dir_name(400 + rep));
    }
    std::printf("async 1 rank    stall (memcpy to staging) %.3f s = %.2f x one AdamW pass (%.3f s) over the same %.0f MiB shard"
                " (first save, staging not yet touched: %.3f s)\n",
                median(stall_s), median(stall_s) / median(adamw_s), median(adamw_s), bytes / (1 << 20), first_stall);
    std::printf("                background write %.3f GB/s = %.2f x raw   AdamW pass while the writer runs %.3f s (%.2f x idle)\n",
                gbps(bytes, median(background_s)), gbps(bytes, median(background_s)) / raw_w, median(busy_adamw_s),
                median(busy_adamw_s) / median(adamw_s));
  }

  // --- restore: N -> M, cold cache, vs raw pread of the same files, cold cache -------------------
  for (const auto& [saved, restored] : {std::pair{4, 3}, std::pair{2, 4}}) {
    const fs::path dir = root / ("restore-" + std::to_string(saved));
    const std::vector<ShardRange> from = split_evenly(layout.total(), saved), to = split_evenly(layout.total(), restored);
    run_ranks(saved, [&](Group& g) {
      Saver saver(options_for(dir), layout, g);
      saver.save(shard_of(state, from[static_cast<std::size_t>(g.rank())], 300));
    });
    const fs::path ckpt = dir / step_dir_name(300);
    Buffers out{{std::vector<float>(static_cast<std::size_t>(layout.total())), std::vector<float>(static_cast<std::size_t>(layout.total())),
                 std::vector<float>(static_cast<std::size_t>(layout.total()))}};
    std::vector<double> raw_r, restore_r;
    std::uint64_t file_bytes = 0;
    for (int rep = 0; rep < reps; ++rep) {
      evict(ckpt);
      raw_r.push_back(seconds([&] { file_bytes = raw_read(ckpt); }));
      evict(ckpt);
      restore_r.push_back(seconds([&] {
        run_ranks(restored, [&](Group& g) {
          const ShardRange r = to[static_cast<std::size_t>(g.rank())];
          ShardTarget target{r, {}};
          for (std::size_t k = 0; k < kBufferCount; ++k) {
            target.buffers[k] = std::span<float>(out.data[k]).subspan(static_cast<std::size_t>(r.begin), static_cast<std::size_t>(r.size()));
          }
          check(restore_latest(options_for(dir), layout, g, target).has_value(), "restore");
        });
      }));
    }
    check(out.data == state.data, "restored state equals the saved state");
    const double raw_bw = gbps(static_cast<double>(file_bytes), median(raw_r)), restore_bw = gbps(bytes, median(restore_r));
    std::printf("restore %d -> %d  raw pread (cold) %.3f GB/s   hdp restore (cold, verified) %.3f GB/s   ratio %.2f\n", saved,
                restored, raw_bw, restore_bw, restore_bw / raw_bw);
    fs::remove_all(dir);
  }
  fs::remove_all(root);
  return 0;
}
