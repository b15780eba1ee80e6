#include "bench/checkpoint_support.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace hdp::bench {
namespace fs = std::filesystem;
namespace {

constexpr std::size_t kChunk = std::size_t{64} << 20;

std::vector<double> sorted(std::vector<double> values) {
  check(!values.empty(), "summary of no samples");
  std::sort(values.begin(), values.end());
  return values;
}

}  // namespace

double seconds(const std::function<void()>& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double Samples::median() const {
  const std::vector<double> v = sorted(values_);
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}
double Samples::min() const { return sorted(values_).front(); }
double Samples::max() const { return sorted(values_).back(); }

std::string Samples::summary(int digits) const {
  char text[96];
  std::snprintf(text, sizeof text, "%.*f [%.*f-%.*f]", digits, median(), digits, min(), digits, max());
  return text;
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "bench_checkpoint: %s failed: %s\n", what, std::strerror(errno));
    std::exit(1);
  }
}

Buffers filled(std::int64_t elements) {
  Buffers b;
  for (std::size_t k = 0; k < checkpoint::kBufferCount; ++k) {
    b.data[k].resize(static_cast<std::size_t>(elements));
    for (std::int64_t i = 0; i < elements; ++i) {
      b.data[k][static_cast<std::size_t>(i)] = static_cast<float>((i * 7 + static_cast<std::int64_t>(k)) % 1000) * 1e-3f;
    }
  }
  return b;
}

void raw_write(const fs::path& dir, const Buffers& buffers, const std::vector<checkpoint::ShardRange>& ranges,
               RawWrite mode) {
  fs::create_directories(dir);
  for (std::size_t r = 0; r < ranges.size(); ++r) {
    const int fd = ::open((dir / ("raw-" + std::to_string(r))).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    check(fd >= 0, "open");
    const off_t bytes = static_cast<off_t>(checkpoint::kBufferCount * sizeof(float)) * ranges[r].size();
    if (mode == RawWrite::kLikeHdp) check(::fallocate(fd, 0, 0, bytes) == 0, "fallocate");
    off_t offset = 0;
    for (std::size_t k = 0; k < checkpoint::kBufferCount; ++k) {
      const char* p = reinterpret_cast<const char*>(buffers.data[k].data() + ranges[r].begin);
      std::size_t left = static_cast<std::size_t>(ranges[r].size()) * sizeof(float);
      while (left > 0) {
        const ssize_t n = ::pwrite(fd, p, std::min(left, kChunk), offset);
        check(n > 0, "pwrite");
        if (mode == RawWrite::kLikeHdp) ::sync_file_range(fd, offset, n, SYNC_FILE_RANGE_WRITE);
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

void remove_settled(const fs::path& path) {
  fs::remove_all(path);
  const int fd = ::open(path.parent_path().c_str(), O_RDONLY);
  check(fd >= 0 && ::syncfs(fd) == 0, "syncfs");
  ::close(fd);
}

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

}  // namespace hdp::bench
