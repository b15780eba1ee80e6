#include "checkpoint/posix_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/fd.h"

namespace hdp::checkpoint {
namespace {

[[noreturn]] void fail(const std::string& what, const std::filesystem::path& path) {
  throw FatalError(what + " " + path.string() + ": " + std::strerror(errno));
}

}  // namespace

void fsync_path(const std::filesystem::path& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail("cannot open", path);
  if (::fsync(fd.get()) != 0) fail("cannot fsync", path);
}

namespace {

int create(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create", path);
  return fd;
}

void write_all(int fd, const std::filesystem::path& path, std::string_view content) {
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write", path);
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

void write_small_file(const std::filesystem::path& path, std::string_view content) {
  const int fd = create(path);
  try {
    write_all(fd, path, content);
  } catch (...) {
    ::close(fd);
    throw;
  }
  // A network filesystem may report a failed write only here.
  if (::close(fd) != 0) fail("cannot close", path);
}

void write_file_durably(const std::filesystem::path& path, std::string_view content) {
  Fd fd(create(path));
  write_all(fd.get(), path, content);
  if (::fsync(fd.get()) != 0) fail("cannot fsync", path);
}

void replace_file_atomically(const std::filesystem::path& path, std::string_view content) {
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  write_file_durably(tmp, content);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("cannot rename onto", path);
  fsync_path(path.parent_path());
}

std::string read_small_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FatalError("cannot read " + path.string());
  std::stringstream content;
  content << in.rdbuf();
  return content.str();
}

}  // namespace hdp::checkpoint
