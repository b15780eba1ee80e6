#include "trainer/data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace hdp::trainer::data {
namespace {

namespace fs = std::filesystem;

constexpr unsigned char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
constexpr std::size_t kHeaderBytes = 34;

[[noreturn]] void bad(const fs::path& path, const std::string& what) {
  throw InvalidArgument("indexed dataset '" + path.string() + "': " + what);
}

template <typename T>
T load(const unsigned char* at) {
  T value;
  std::memcpy(&value, at, sizeof value);  // unaligned in the index: never cast
  return value;
}

// Bytes per token of a dtype code; 0 for a code that is not an integer type.
int item_size_of(std::uint8_t code) {
  switch (code) {
    case 1: case 2: return 1;  // uint8, int8
    case 3: case 8: return 2;  // int16, uint16
    case 4: return 4;          // int32
    case 5: return 8;          // int64
    default: return 0;
  }
}

std::int64_t token_at(const unsigned char* at, std::uint8_t code) {
  switch (code) {
    case 1: return load<std::uint8_t>(at);
    case 2: return load<std::int8_t>(at);
    case 3: return load<std::int16_t>(at);
    case 8: return load<std::uint16_t>(at);
    case 4: return load<std::int32_t>(at);
    default: return load<std::int64_t>(at);
  }
}

}  // namespace

bool IndexedDataset::exists(const fs::path& prefix) {
  return fs::is_regular_file(prefix.string() + ".idx") && fs::is_regular_file(prefix.string() + ".bin");
}

IndexedDataset::Mapped IndexedDataset::map(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) bad(path, std::string("cannot be opened: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    bad(path, std::string("cannot be read: ") + std::strerror(errno));
  }
  Mapped m;
  m.size = static_cast<std::size_t>(st.st_size);
  if (m.size > 0) {
    void* p = ::mmap(nullptr, m.size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      bad(path, std::string("cannot be mapped: ") + std::strerror(errno));
    }
    m.data = static_cast<const unsigned char*>(p);
  }
  ::close(fd);
  return m;
}

IndexedDataset::IndexedDataset(fs::path prefix, std::int64_t context, std::int64_t vocab)
    : idx_path_(prefix.string() + ".idx"), bin_path_(prefix.string() + ".bin"), context_(context), vocab_(vocab) {
  if (context < 1) throw InvalidArgument("indexed dataset: context must be >= 1");
  const Mapped idx = map(idx_path_);
  struct Unmap {
    Mapped m;
    ~Unmap() {
      if (m.data) ::munmap(const_cast<unsigned char*>(m.data), m.size);
    }
  } idx_guard{idx};
  const auto [sequences, entries] = read_header(idx);
  bin_ = map(bin_path_);
  const unsigned char* lengths = idx.data + kHeaderBytes;
  const unsigned char* pointers = lengths + 4 * sequences;
  const unsigned char* documents = pointers + 8 * sequences;
  read_sequences(lengths, pointers, sequences);
  check_document_index(documents, sequences, entries);
  documents_ = entries - 1;
  if (piece_count() == 0) bad(idx_path_, "holds no token");
  fingerprint_ = fingerprint_of_files(idx);
}

std::pair<std::uint64_t, std::uint64_t> IndexedDataset::read_header(const Mapped& idx) {
  if (idx.size < kHeaderBytes) bad(idx_path_, "is " + std::to_string(idx.size) + " bytes, shorter than the 34-byte header");
  if (std::memcmp(idx.data, kMagic, sizeof kMagic) != 0) bad(idx_path_, "does not start with the MMIDIDX magic (offset 0)");
  const auto version = load<std::uint64_t>(idx.data + 9);
  if (version != 1) bad(idx_path_, "version " + std::to_string(version) + " at offset 9; hdp reads version 1");
  dtype_code_ = idx.data[17];
  item_size_ = item_size_of(dtype_code_);
  if (item_size_ == 0) {
    bad(idx_path_, "dtype code " + std::to_string(dtype_code_) +
                       " at offset 17 is not a token dtype (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16)");
  }
  const auto sequences = load<std::uint64_t>(idx.data + 18);
  const auto entries = load<std::uint64_t>(idx.data + 26);
  // Sizes, overflow-checked: 34 + 12 S + 8 D (+ S sequence modes in a multimodal dataset).
  constexpr std::uint64_t kLimit = std::uint64_t{1} << 56;
  if (sequences > kLimit || entries > kLimit) bad(idx_path_, "sequence or document counts at offsets 18/26 are impossible");
  const std::uint64_t expected = kHeaderBytes + 12 * sequences + 8 * entries;
  if (idx.size != expected && idx.size != expected + sequences) {
    bad(idx_path_, "is " + std::to_string(idx.size) + " bytes; its counts (" + std::to_string(sequences) +
                       " sequences, " + std::to_string(entries) + " document index entries) need " +
                       std::to_string(expected) + " (the file is truncated or its counts are wrong)");
  }
  if (entries < 1) bad(idx_path_, "the document index is empty (offset 26)");
  return {sequences, entries};
}

void IndexedDataset::read_sequences(const unsigned char* lengths, const unsigned char* pointers,
                                    std::uint64_t sequences) {
  lengths_.resize(sequences);
  pointers_.resize(sequences);
  piece_start_.resize(sequences + 1);
  std::int64_t next = 0;
  for (std::uint64_t s = 0; s < sequences; ++s) {
    const auto length = load<std::int32_t>(lengths + 4 * s);
    const auto pointer = load<std::int64_t>(pointers + 8 * s);
    if (length < 0) {
      bad(idx_path_, "sequence " + std::to_string(s) + " has length " + std::to_string(length) + " (offset " +
                         std::to_string(kHeaderBytes + 4 * s) + ")");
    }
    if (pointer != next) {
      bad(idx_path_, "sequence " + std::to_string(s) + " starts at .bin byte " + std::to_string(pointer) +
                         ", expected " + std::to_string(next) + " (offset " + std::to_string(kHeaderBytes + 4 * sequences + 8 * s) +
                         ")");
    }
    next = pointer + static_cast<std::int64_t>(length) * item_size_;
    if (static_cast<std::uint64_t>(next) > bin_.size) {
      bad(bin_path_, "sequence " + std::to_string(s) + " runs to byte " + std::to_string(next) + ", past the end of the " +
                         std::to_string(bin_.size) + "-byte file (truncated, or the index points past it)");
    }
    lengths_[s] = length;
    pointers_[s] = pointer;
    tokens_ += length;
    piece_start_[s + 1] = piece_start_[s] + static_cast<std::uint64_t>((length + context_ - 1) / context_);
  }
}

void IndexedDataset::check_document_index(const unsigned char* documents, std::uint64_t sequences,
                                          std::uint64_t entries) const {
  std::uint64_t previous = 0;
  for (std::uint64_t d = 0; d < entries; ++d) {
    const auto entry = load<std::int64_t>(documents + 8 * d);
    const std::uint64_t offset = kHeaderBytes + 12 * sequences + 8 * d;
    if (entry < 0 || static_cast<std::uint64_t>(entry) < previous || static_cast<std::uint64_t>(entry) > sequences ||
        (d == 0 && entry != 0) || (d + 1 == entries && static_cast<std::uint64_t>(entry) != sequences)) {
      bad(idx_path_, "document index entry " + std::to_string(d) + " is " + std::to_string(entry) + " (offset " +
                         std::to_string(offset) + "): it must start at 0, ascend and end at the sequence count " +
                         std::to_string(sequences));
    }
    previous = static_cast<std::uint64_t>(entry);
  }
}

std::string IndexedDataset::fingerprint_of_files(const Mapped& idx) const {
  constexpr std::size_t kEdge = std::size_t{1} << 20;
  const std::size_t head = std::min(kEdge, bin_.size), tail = std::min(kEdge, bin_.size - head);
  std::string summary = "indexed " + std::to_string(context_) + " " + std::to_string(bin_.size) + "\n";
  summary += fingerprint_of({reinterpret_cast<const char*>(idx.data), idx.size});
  summary += fingerprint_of({reinterpret_cast<const char*>(bin_.data), head});
  summary += fingerprint_of({reinterpret_cast<const char*>(bin_.data) + bin_.size - tail, tail});
  return fingerprint_of(summary);
}

IndexedDataset::~IndexedDataset() {
  if (bin_.data) ::munmap(const_cast<unsigned char*>(bin_.data), bin_.size);
}

std::int64_t IndexedDataset::piece_length(std::uint64_t piece) const {
  const auto it = std::upper_bound(piece_start_.begin(), piece_start_.end(), piece);
  const auto s = static_cast<std::size_t>(it - piece_start_.begin() - 1);
  const std::int64_t first = static_cast<std::int64_t>(piece - piece_start_[s]) * context_;
  return std::min(context_, static_cast<std::int64_t>(lengths_[s]) - first);
}

bool IndexedDataset::read(std::uint64_t piece, std::int64_t length, std::vector<std::int32_t>& tokens,
                          std::string& why) const {
  (void)why;  // the files were checked at open and are mapped: nothing here can fail but a token id
  const auto it = std::upper_bound(piece_start_.begin(), piece_start_.end(), piece);
  const auto s = static_cast<std::size_t>(it - piece_start_.begin() - 1);
  const std::int64_t first = static_cast<std::int64_t>(piece - piece_start_[s]) * context_;
  tokens.resize(static_cast<std::size_t>(length));
  const unsigned char* at = bin_.data + pointers_[s] + first * item_size_;
  for (std::int64_t i = 0; i < length; ++i) {
    const std::int64_t id = token_at(at + i * item_size_, dtype_code_);
    if (id < 0 || id >= vocab_) {
      throw InvalidArgument("indexed dataset '" + bin_path_.string() + "': token id " + std::to_string(id) +
                            " at byte " + std::to_string(pointers_[s] + (first + i) * item_size_) + " (sequence " +
                            std::to_string(s) + ") is outside the model's vocabulary of " + std::to_string(vocab_));
    }
    tokens[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(id);
  }
  return true;
}

}  // namespace hdp::trainer::data
