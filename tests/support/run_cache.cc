#include "tests/support/run_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <thread>
#include <vector>

namespace hdp::test {
namespace {

namespace fs = std::filesystem;

constexpr const char* kCompleteMarker = "COMPLETE";

fs::path hdp_binary() {
  const char* dir = std::getenv("HDP_BIN_DIR");
  return fs::path(dir ? dir : "build/bin") / "hdp";
}

// XXH3 over the recipe and the bytes of the binary that computes the run.
std::string key_of(const std::string& recipe) {
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
  if (!state || XXH3_64bits_reset(state.get()) != XXH_OK) throw std::runtime_error("XXH3: cannot allocate a state");
  XXH3_64bits_update(state.get(), recipe.data(), recipe.size());
  const fs::path binary = hdp_binary();
  std::ifstream in(binary, std::ios::binary);
  if (!in) throw std::runtime_error("run cache: cannot read " + binary.string());
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    XXH3_64bits_update(state.get(), buffer.data(), static_cast<std::size_t>(in.gcount()));
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(XXH3_64bits_digest(state.get())));
  return hex;
}

int lock_with_deadline(const fs::path& path, std::chrono::milliseconds wait) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("run cache: cannot open " + path.string() + ": " + std::strerror(errno));
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      const int error = errno;
      ::close(fd);
      throw std::runtime_error("run cache: cannot lock " + path.string() + ": " + std::strerror(error));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      ::close(fd);
      throw std::runtime_error("run cache: " + path.string() + " still locked by another test after " +
                               std::to_string(wait.count()) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return fd;
}

}  // namespace

RunCacheEntry::RunCacheEntry(const std::string& name, const std::string& recipe, std::chrono::milliseconds wait)
    : name_(name) {
  const char* root = std::getenv("HDP_TEST_CACHE");
  if (name.empty() || !root || !*root) {
    temp_ = std::make_unique<TempDir>();
    dir_ = temp_->path();
    return;
  }
  root_ = root;
  fs::create_directories(root_);
  lock_fd_ = lock_with_deadline(root_ / (name + ".lock"), wait);
  dir_ = root_ / (name + "-" + key_of(recipe));
  complete_ = fs::exists(dir_ / kCompleteMarker);
  if (!complete_) {
    fs::remove_all(dir_);  // what a run that did not complete left
    fs::create_directories(dir_);
  }
}

RunCacheEntry::~RunCacheEntry() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

void RunCacheEntry::commit() {
  if (root_.empty() || complete_) return;
  std::ofstream(dir_ / kCompleteMarker) << "complete\n";
  complete_ = true;
  const std::string prefix = name_ + "-";
  for (const auto& entry : fs::directory_iterator(root_)) {
    const std::string file = entry.path().filename().string();
    const bool same_name = file.size() == prefix.size() + 16 && file.starts_with(prefix);
    if (same_name && entry.path() != dir_ && entry.is_directory()) fs::remove_all(entry.path());
  }
}

}  // namespace hdp::test
