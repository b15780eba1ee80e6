#include "cli/self_executable.h"

#include <unistd.h>

#include <climits>

namespace hdp::cli {

std::string self_executable() {
  char path[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : "hdp";
}

}  // namespace hdp::cli
