#include "trainer/cpu_throttle.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "common/error.h"

namespace hdp::trainer {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kPeriodUs = 100'000;

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  if (!out) throw Error("cannot write '" + text + "' to " + path.string() + ": " + std::strerror(errno));
}

bool is_v2(const fs::path& root) { return fs::exists(root / "cgroup.controllers"); }

bool v2_has_cpu(const fs::path& root) {
  std::ifstream in(root / "cgroup.subtree_control");
  std::string word;
  while (in >> word) {
    if (word == "cpu") return true;
  }
  return false;
}

}  // namespace

fs::path cpu_cgroup_root() {
  const fs::path v2 = "/sys/fs/cgroup";
  std::error_code ec;
  if (is_v2(v2) && v2_has_cpu(v2)) return v2;
  const fs::path v1 = "/sys/fs/cgroup/cpu";
  if (fs::exists(v1 / "cpu.cfs_quota_us", ec)) return v1;
  return {};
}

void throttle_self(double cpus) {
  if (!(cpus > 0 && std::isfinite(cpus))) throw InvalidArgument("throttle: the CPU count must be > 0");
  const fs::path root = cpu_cgroup_root();
  if (root.empty()) {
    throw Error("throttle: no CPU cgroup controller this process can use (neither cgroup v2 with cpu in "
                "/sys/fs/cgroup/cgroup.subtree_control nor a v1 cpu hierarchy)");
  }
  const fs::path group = root / ("hdp-throttle-" + std::to_string(::getpid()));
  std::error_code ec;
  fs::create_directory(group, ec);
  if (ec) throw Error("throttle: cannot create " + group.string() + ": " + ec.message());
  const auto quota = static_cast<std::int64_t>(std::llround(cpus * kPeriodUs));
  if (is_v2(root)) {
    write_file(group / "cpu.max", std::to_string(quota) + " " + std::to_string(kPeriodUs));
  } else {
    write_file(group / "cpu.cfs_period_us", std::to_string(kPeriodUs));
    write_file(group / "cpu.cfs_quota_us", std::to_string(quota));
  }
  // Every thread of the process (OpenMP's included): cgroup.procs moves them all.
  write_file(group / "cgroup.procs", std::to_string(::getpid()));
}

int remove_throttle_groups() {
  const fs::path root = cpu_cgroup_root();
  if (root.empty()) return 0;
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (!entry.is_directory() || entry.path().filename().string().rfind("hdp-throttle-", 0) != 0) continue;
    std::ifstream procs(entry.path() / "cgroup.procs");
    std::string pid;
    if (procs >> pid) continue;  // still in use
    if (::rmdir(entry.path().c_str()) == 0) ++removed;
  }
  return removed;
}

}  // namespace hdp::trainer
