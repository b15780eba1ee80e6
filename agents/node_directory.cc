// File: agents/node_directory.cc
//
// The directory an agent keeps for its life: see node_directory.h.
#include "agents/node_directory.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <string>
#include <string_view>
#include <system_error>

#include "common/error.h"
#include "common/fd.h"

namespace hdp::agents {
namespace {

namespace fs = std::filesystem;

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
  std::error_code ec;
  const fs::path temporary = fs::absolute(fs::temp_directory_path(ec), ec);
  if (ec) throw Error("no temporary directory for the node's directory: " + ec.message());
  remove_stale(temporary);
  std::string pattern = (temporary / (std::string(kPrefix) + std::to_string(::getpid()) + "-XXXXXX")).string();
  if (!::mkdtemp(pattern.data())) throw Error("cannot create the node's directory " + pattern + ": " + errno_text(errno));
  path_ = pattern;
  const fs::path lock = path_ / kLockFile;
  lock_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (lock_ < 0 || ::flock(lock_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    if (lock_ >= 0) ::close(lock_);
    fs::remove_all(path_, ec);
    throw Error("cannot lock the node's directory " + pattern + ": " + errno_text(error));
  }
}

NodeDirectory::~NodeDirectory() {
  std::error_code ignored;
  fs::remove_all(path_, ignored);
  ::close(lock_);
}

void NodeDirectory::remove_stale(const fs::path& temporary) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(temporary, ec)) {
    const std::string name = entry.path().filename().string();
    const int earlier = owner_pid(name, "hdp-agent-metrics-");  // an earlier version's, without a lock
    const int pid = earlier ? earlier : owner_pid(name, kPrefix);
    if (pid == 0) continue;
    struct stat st {};
    if (::lstat(entry.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    if (!earlier) {
      // A lock still held: its agent lives, in another pid namespace. No lock file: an agent that
      // died between creating its directory and locking it.
      const Fd lock(::open((entry.path() / kLockFile).c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC));
      if (lock.get() >= 0 && ::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) continue;
    }
    std::error_code ignored;
    fs::remove_all(entry.path(), ignored);
  }
}

}  // namespace hdp::agents
