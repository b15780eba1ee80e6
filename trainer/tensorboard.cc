#include "trainer/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <boost/crc.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/error.h"
#include "trainer/tensorboard.pb.h"

namespace hdp::trainer {
namespace {

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

void put_le(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

}  // namespace

std::uint32_t masked_crc32c(const void* data, std::size_t size) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(data, size);
  const std::uint32_t value = crc.checksum();
  return ((value >> 15) | (value << 17)) + 0xa282ead8U;
}

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("tensorboard: cannot create " + dir.string() + ": " + ec.message());
  const auto seconds = static_cast<long long>(wall_seconds());
  path_ = dir / ("events.out.tfevents." + std::to_string(seconds) + "." + host_name() + "." + std::to_string(::getpid()));
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("tensorboard: cannot create " + path_.string() + ": " + std::strerror(errno));
  tensorboard::Event first;
  first.set_wall_time(wall_seconds());
  first.set_file_version("brain.Event:2");
  record(first.SerializeAsString());
}

TensorBoardWriter::~TensorBoardWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void TensorBoardWriter::scalars(std::int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  tensorboard::Event event;
  event.set_wall_time(wall_seconds());
  event.set_step(step);
  for (const auto& [tag, value] : values) {
    auto* v = event.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  record(event.SerializeAsString());
}

void TensorBoardWriter::record(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, masked_crc32c(out.data(), 8), 4);
  out += data;
  put_le(out, masked_crc32c(data.data(), data.size()), 4);
  // One write of the whole record: O_APPEND places it at the end in one piece.
  const ssize_t n = ::write(fd_, out.data(), out.size());
  if (n != static_cast<ssize_t>(out.size())) {
    throw Error("tensorboard: cannot write to " + path_.string() + ": " + (n < 0 ? std::strerror(errno) : "short write"));
  }
}

}  // namespace hdp::trainer
