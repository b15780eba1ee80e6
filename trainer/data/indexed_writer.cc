#include "trainer/data/indexed_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <system_error>
#include <utility>

#include "common/error.h"
#include "common/text.h"

namespace hdp::trainer::data {
namespace {

namespace fs = std::filesystem;

constexpr unsigned char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
constexpr std::size_t kBufferBytes = std::size_t{4} << 20;

[[noreturn]] void io_error(const fs::path& path, const std::string& what) {
  throw Error("indexed dataset '" + path.string() + "': " + what + ": " + errno_text(errno));
}

void write_all(int fd, const unsigned char* data, std::size_t size, const fs::path& shown) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) io_error(shown, "cannot write");
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

template <typename T>
void put(std::vector<unsigned char>& out, T value) {
  unsigned char bytes[sizeof value];
  std::memcpy(bytes, &value, sizeof value);  // native little-endian, as Megatron's NumPy dumps
  out.insert(out.end(), bytes, bytes + sizeof value);
}

// Creates `<base>.tmp.<pid>.<n>` exclusively (mode 0666 less the umask, as the final file will have).
int create_temporary(const fs::path& base, fs::path& created) {
  for (int n = 0;; ++n) {
    created = base.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(n);
    const int fd = ::open(created.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) return fd;
    if (errno == EEXIST && n < 1000) continue;
    const int error = errno;
    const fs::path dir = base.parent_path().empty() ? fs::path(".") : base.parent_path();
    if (error == ENOENT || error == ENOTDIR) {
      throw InvalidArgument("output " + quote_value(base.string()) + ": directory " + quote_value(dir.string()) +
                            " does not exist");
    }
    throw InvalidArgument("output " + quote_value(base.string()) + ": cannot create a file in " +
                          quote_value(dir.string()) + ": " + errno_text(error));
  }
}

void sync_and_close(int& fd, const fs::path& shown) {
  if (::fsync(fd) != 0) io_error(shown, "cannot sync");
  const int closing = std::exchange(fd, -1);
  if (::close(closing) != 0) io_error(shown, "cannot close");
}

}  // namespace

TokenDtype token_dtype_for_vocab(std::int64_t vocab) {
  return vocab <= 65536 ? TokenDtype::kUInt16 : TokenDtype::kInt32;
}

int token_dtype_bytes(TokenDtype dtype) { return dtype == TokenDtype::kUInt16 ? 2 : 4; }

const char* token_dtype_name(TokenDtype dtype) { return dtype == TokenDtype::kUInt16 ? "uint16" : "int32"; }

IndexedDatasetWriter::IndexedDatasetWriter(fs::path prefix, std::int64_t vocab)
    : bin_path_(prefix.string() + ".bin"),
      idx_path_(prefix.string() + ".idx"),
      vocab_(vocab),
      dtype_(token_dtype_for_vocab(vocab)) {
  if (vocab < 1 || vocab > std::numeric_limits<std::int32_t>::max()) {
    throw InvalidArgument("indexed dataset writer: vocabulary size " + std::to_string(vocab) + " out of range");
  }
  if (prefix.empty() || !prefix.has_filename()) {
    throw InvalidArgument("output prefix " + quote_value(prefix.string()) +
                          " names a directory; give a path prefix such as DIR/corpus (DIR/corpus.bin and .idx are written)");
  }
  bin_fd_ = create_temporary(bin_path_, bin_tmp_);
  try {
    idx_fd_ = create_temporary(idx_path_, idx_tmp_);
  } catch (...) {
    remove_temporaries();
    throw;
  }
  buffer_.reserve(kBufferBytes);
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (!finished_) remove_temporaries();
}

void IndexedDatasetWriter::remove_temporaries() noexcept {
  if (bin_fd_ >= 0) ::close(std::exchange(bin_fd_, -1));
  if (idx_fd_ >= 0) ::close(std::exchange(idx_fd_, -1));
  if (!bin_tmp_.empty()) ::unlink(bin_tmp_.c_str());
  if (!idx_tmp_.empty()) ::unlink(idx_tmp_.c_str());
}

void IndexedDatasetWriter::flush_buffer() {
  write_all(bin_fd_, buffer_.data(), buffer_.size(), bin_tmp_);
  buffer_.clear();
}

void IndexedDatasetWriter::add_document(std::span<const std::int32_t> tokens) {
  HDP_CHECK(!finished_, "add_document after finish");
  if (tokens.empty()) throw InvalidArgument("indexed dataset '" + bin_path_.string() + "': a document must hold a token");
  if (tokens.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    throw InvalidArgument("indexed dataset '" + bin_path_.string() + "': document " + std::to_string(lengths_.size()) +
                          " has " + std::to_string(tokens.size()) + " tokens, more than a sequence length (int32) holds");
  }
  const bool narrow = dtype_ == TokenDtype::kUInt16;
  const std::size_t item = narrow ? 2 : 4;
  for (std::size_t i = 0; i < tokens.size();) {
    if (buffer_.size() + item > kBufferBytes) flush_buffer();
    const std::size_t room = (kBufferBytes - buffer_.size()) / item;
    const std::size_t n = std::min(room, tokens.size() - i);
    const std::size_t at = buffer_.size();
    buffer_.resize(at + n * item);
    unsigned char* out = buffer_.data() + at;
    for (std::size_t k = 0; k < n; ++k) {
      const std::int32_t id = tokens[i + k];
      if (id < 0 || id >= vocab_) {
        throw InvalidArgument("indexed dataset '" + bin_path_.string() + "': token id " + std::to_string(id) +
                              " of document " + std::to_string(lengths_.size()) + " is outside the vocabulary of " +
                              std::to_string(vocab_));
      }
      if (narrow) {
        const auto v = static_cast<std::uint16_t>(id);
        std::memcpy(out + 2 * k, &v, 2);
      } else {
        std::memcpy(out + 4 * k, &id, 4);
      }
    }
    i += n;
  }
  lengths_.push_back(static_cast<std::int32_t>(tokens.size()));
  tokens_ += static_cast<std::int64_t>(tokens.size());
}

void IndexedDatasetWriter::finish() {
  HDP_CHECK(!finished_, "finish called twice");
  if (lengths_.empty()) {
    throw InvalidArgument("indexed dataset '" + idx_path_.string() + "': no document to write (an empty dataset cannot be read)");
  }
  flush_buffer();
  sync_and_close(bin_fd_, bin_tmp_);

  // The index, streamed through the buffer: header, lengths, byte pointers, document index.
  const auto sequences = static_cast<std::uint64_t>(lengths_.size());
  std::vector<unsigned char>& out = buffer_;
  out.insert(out.end(), kMagic, kMagic + sizeof kMagic);
  put<std::uint64_t>(out, 1);
  out.push_back(static_cast<unsigned char>(dtype_));
  put<std::uint64_t>(out, sequences);
  put<std::uint64_t>(out, sequences + 1);
  auto drain = [&] {
    if (out.size() >= kBufferBytes - 16) {
      write_all(idx_fd_, out.data(), out.size(), idx_tmp_);
      out.clear();
    }
  };
  for (std::int32_t length : lengths_) {
    put<std::int32_t>(out, length);
    drain();
  }
  const std::int64_t item = token_dtype_bytes(dtype_);
  std::int64_t pointer = 0;
  for (std::int32_t length : lengths_) {
    put<std::int64_t>(out, pointer);
    pointer += static_cast<std::int64_t>(length) * item;
    drain();
  }
  for (std::uint64_t d = 0; d <= sequences; ++d) {
    put<std::int64_t>(out, static_cast<std::int64_t>(d));
    drain();
  }
  write_all(idx_fd_, out.data(), out.size(), idx_tmp_);
  out.clear();
  sync_and_close(idx_fd_, idx_tmp_);

  // Into place: no old index can pair with the new .bin, and the new index comes last.
  if (::unlink(idx_path_.c_str()) != 0 && errno != ENOENT) io_error(idx_path_, "cannot replace the existing index");
  if (::rename(bin_tmp_.c_str(), bin_path_.c_str()) != 0) io_error(bin_path_, "cannot rename " + bin_tmp_.string() + " to it");
  if (::rename(idx_tmp_.c_str(), idx_path_.c_str()) != 0) io_error(idx_path_, "cannot rename " + idx_tmp_.string() + " to it");
  finished_ = true;
  const fs::path dir = idx_path_.parent_path().empty() ? fs::path(".") : idx_path_.parent_path();
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);  // best effort: the files are complete under their names either way
    ::close(dir_fd);
  }
}

}  // namespace hdp::trainer::data
