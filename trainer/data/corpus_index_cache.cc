// File: trainer/data/corpus_index_cache.cc
//
// A corpus's index kept in a file: see corpus_index_cache.h.
#include "trainer/data/corpus_index_cache.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <string_view>
#include <system_error>

#include "checkpoint/checksum.h"
#include "common/error.h"
#include "common/fd.h"

namespace hdp::trainer::data {
namespace {

constexpr std::string_view kMagic = "hdp corpus index 1 ";
// The decimal fields after the root, in order.
constexpr std::size_t kFields = 11;
// A file larger than this is refused unread (10 M documents of 100-byte paths, and some).
constexpr std::int64_t kMaxFileBytes = std::int64_t{2} << 30;

std::uint64_t checksum(std::string_view bytes) {
  return checkpoint::xxh3({reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()});
}

// Parses an unsigned number in `base` from the front of `text` and drops it; false when there is
// none.
bool take_number(std::string_view& text, std::uint64_t& value, int base) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (ec != std::errc() || end == text.data()) return false;
  text.remove_prefix(static_cast<std::size_t>(end - text.data()));
  return true;
}

std::optional<std::string> read_whole(const std::filesystem::path& file, std::string& why) {
  // O_NONBLOCK: a FIFO in the file's place does not block the open.
  const Fd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (fd.get() < 0) {
    why = errno == ENOENT ? "absent" : "cannot open: " + errno_text(errno);
    return std::nullopt;
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    why = "cannot examine: " + errno_text(errno);
    return std::nullopt;
  }
  if (!S_ISREG(st.st_mode) || st.st_size > kMaxFileBytes) {
    why = !S_ISREG(st.st_mode) ? std::string("not a regular file")
                               : "larger than " + std::to_string(kMaxFileBytes) + " bytes";
    return std::nullopt;
  }
  const off_t size = st.st_size;
  std::string bytes(static_cast<std::size_t>(size), '\0');
  std::size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::pread(fd.get(), bytes.data() + got, bytes.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      why = n == 0 ? std::string("shorter than its size") : "cannot read: " + errno_text(errno);
      return std::nullopt;
    }
    got += static_cast<std::size_t>(n);
  }
  return bytes;
}

// A path the walk can give: components separated by single '/', none empty, "." or "..", so that
// a garbled file cannot send a read outside the root.
bool relative_file_path(std::string_view path) {
  for (std::size_t start = 0;;) {
    const std::size_t end = std::min(path.find('/', start), path.size());
    const std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    if (end == path.size()) return true;
    start = end + 1;
  }
}

}  // namespace

std::filesystem::path corpus_index_file(const std::filesystem::path& dir, const std::filesystem::path& root,
                                        const CorpusOptions& options) {
  const std::string key = root.string() + '\0' + std::to_string(options.context) + ' ' +
                          std::to_string(options.max_documents) + ' ' + std::to_string(options.max_bytes);
  return dir / ("corpus-" + fingerprint_of(key) + ".index");
}

std::optional<CorpusIndex> read_corpus_index(const std::filesystem::path& file, const std::filesystem::path& root,
                                             const CorpusOptions& options, std::string& why) {
  const std::optional<std::string> bytes = read_whole(file, why);
  if (!bytes) return std::nullopt;
  auto refuse = [&](std::string reason) {
    why = std::move(reason);
    return std::nullopt;
  };
  std::string_view text = *bytes;
  if (!text.starts_with(kMagic)) return refuse("not an index of this version (its first line differs)");
  text.remove_prefix(kMagic.size());
  std::uint64_t sum = 0;
  if (text.size() < 17 || !take_number(text, sum, 16) || !text.starts_with('\n')) {
    return refuse("not an index of this version (its first line differs)");
  }
  text.remove_prefix(1);
  if (sum != checksum(text)) return refuse("its checksum differs");
  const std::string& wanted_root = root.string();
  if (!text.starts_with(wanted_root) || text.size() == wanted_root.size() || text[wanted_root.size()] != '\0') {
    return refuse("taken for another root");
  }
  text.remove_prefix(wanted_root.size() + 1);
  std::array<std::uint64_t, kFields> fields{};
  for (std::size_t f = 0; f < kFields; ++f) {
    if (f > 0) {
      if (!text.starts_with(' ')) return refuse("malformed header");
      text.remove_prefix(1);
    }
    if (!take_number(text, fields[f], 10)) return refuse("malformed header");
  }
  if (!text.starts_with('\n')) return refuse("malformed header");
  text.remove_prefix(1);
  if (fields[0] != static_cast<std::uint64_t>(options.context) || fields[1] != options.max_documents ||
      fields[2] != static_cast<std::uint64_t>(options.max_bytes)) {
    return refuse("taken with other options");
  }
  if (fields[10] != text.size()) {
    return refuse("its body is " + std::to_string(text.size()) + " bytes, its header says " + std::to_string(fields[10]));
  }
  CorpusIndex index;
  CorpusStats& s = index.stats;
  s.documents = fields[3];
  s.bytes = static_cast<std::int64_t>(fields[4]);
  s.empty_files = fields[5];
  s.symlinks = fields[6];
  s.special_files = fields[7];
  s.unreadable = fields[8];
  s.truncated = fields[9] == 1;
  if (fields[9] > 1) return refuse("malformed header");
  // A walk that found no document throws before it writes: such a file is no walk's.
  if (s.documents == 0) return refuse("it holds no document");
  if (s.documents > options.max_documents || fields[4] > static_cast<std::uint64_t>(options.max_bytes)) {
    return refuse("its counts pass the limits it was taken under");
  }
  // An entry takes 4 bytes at least ("a", '\0', "1", '\n'): a header cannot make this reserve more.
  const std::size_t entries = std::min<std::uint64_t>(s.documents, text.size() / 4);
  index.paths.reserve(entries);
  index.sizes.reserve(entries);
  std::uint64_t total = 0;
  while (!text.empty()) {
    if (index.paths.size() == s.documents) return refuse("more documents than its header says");
    const std::size_t nul = text.find('\0');
    if (nul == std::string_view::npos || nul == 0) return refuse("malformed document entry");
    std::string_view path = text.substr(0, nul);
    if (!relative_file_path(path)) return refuse("a document path that is not a relative file path");
    if (!index.paths.empty() && !(index.paths.back() < path)) return refuse("document paths out of order");
    text.remove_prefix(nul + 1);
    std::uint64_t size = 0;
    if (!take_number(text, size, 10) || !text.starts_with('\n') || size < 1 ||
        size > static_cast<std::uint64_t>(options.max_bytes) - total) {
      return refuse("malformed document size");
    }
    text.remove_prefix(1);
    total += size;
    index.paths.emplace_back(path);
    index.sizes.push_back(static_cast<std::int64_t>(size));
  }
  if (index.paths.size() != s.documents || total != fields[4]) return refuse("its counts disagree with its documents");
  return index;
}

bool write_corpus_index(const std::filesystem::path& file, const std::filesystem::path& root,
                        const CorpusOptions& options, const CorpusIndex& index) {
  // The header's line, then the rest: root and fields, and the body, whose length goes in a field.
  std::size_t body_bytes = 0;
  for (std::size_t d = 0; d < index.paths.size(); ++d) {
    body_bytes += index.paths[d].size() + std::to_string(index.sizes[d]).size() + 2;
  }
  const CorpusStats& s = index.stats;
  const std::array<std::uint64_t, kFields> fields = {
      static_cast<std::uint64_t>(options.context), options.max_documents, static_cast<std::uint64_t>(options.max_bytes),
      s.documents, static_cast<std::uint64_t>(s.bytes), s.empty_files, s.symlinks, s.special_files, s.unreadable,
      s.truncated ? 1u : 0u, body_bytes};
  const std::size_t first_line = kMagic.size() + 17;  // the magic, 16 hex digits, '\n'
  std::string text(first_line, ' ');
  text += root.string();
  text += '\0';
  for (std::size_t f = 0; f < kFields; ++f) {
    if (f > 0) text += ' ';
    text += std::to_string(fields[f]);
  }
  text += '\n';
  if (static_cast<std::int64_t>(text.size() + body_bytes) > kMaxFileBytes) return false;
  text.reserve(text.size() + body_bytes);
  for (std::size_t d = 0; d < index.paths.size(); ++d) {
    text += index.paths[d];
    text += '\0';
    text += std::to_string(index.sizes[d]);
    text += '\n';
  }
  const std::string head = std::string(kMagic) + checkpoint::to_hex(checksum(std::string_view(text).substr(first_line))) + "\n";
  text.replace(0, first_line, head);

  // A name of this process's own beside the file (mkstemp), renamed over it once whole.
  std::string temporary = file.string() + ".XXXXXX";
  auto fail = [&](const std::string& what, int error, bool created) {
    if (created) ::unlink(temporary.c_str());
    throw Error("cannot " + what + " the corpus index " + file.string() + ": " + errno_text(error));
  };
  {
    const Fd fd(::mkostemp(temporary.data(), O_CLOEXEC));
    if (fd.get() < 0) fail("create", errno, false);
    std::size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("write", n < 0 ? errno : EIO, true);
      done += static_cast<std::size_t>(n);
    }
  }
  if (::rename(temporary.c_str(), file.c_str()) != 0) fail("rename into place", errno, true);
  return true;
}

}  // namespace hdp::trainer::data
