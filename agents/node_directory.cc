// File: agents/node_directory.cc
//
// The directory an agent keeps for its life: see node_directory.h.
#include "agents/node_directory.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <string>
#include <string_view>
#include <system_error>

#include "common/error.h"

namespace hdp::agents {
namespace {

// The pid in a name "<prefix><pid>-...", or 0 when the name has no such form.
int owner_pid(std::string_view name, std::string_view prefix) {
  if (!name.starts_with(prefix)) return 0;
  name.remove_prefix(prefix.size());
  int pid = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), pid);
  if (ec != std::errc() || end == name.data() || end == name.data() + name.size() || *end != '-' || pid <= 0) return 0;
  return pid;
}

}  // namespace

NodeDirectory::NodeDirectory() {
  remove_stale();
  std::string pattern =
      (std::filesystem::temp_directory_path() / (std::string(kPrefix) + std::to_string(::getpid()) + "-XXXXXX")).string();
  if (!::mkdtemp(pattern.data())) {
    throw Error("cannot create the node's directory " + pattern + ": " +
                std::error_code(errno, std::generic_category()).message());
  }
  path_ = pattern;
}

NodeDirectory::~NodeDirectory() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

void NodeDirectory::remove_stale() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::temp_directory_path(), ec)) {
    const std::string name = entry.path().filename().string();
    int pid = owner_pid(name, "hdp-agent-metrics-");  // an earlier version's metrics directory
    if (pid == 0) pid = owner_pid(name, kPrefix);
    if (pid == 0 || !entry.is_directory(ec) || entry.is_symlink(ec)) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    std::error_code ignored;
    std::filesystem::remove_all(entry.path(), ignored);
  }
}

}  // namespace hdp::agents
