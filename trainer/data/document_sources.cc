// File: trainer/data/document_sources.cc
//
// The documents of `hdp tokenize`'s input, batch by batch: see document_sources.h.
#include "trainer/data/document_sources.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/fd.h"
#include "common/text.h"

namespace hdp::trainer::data {
namespace {

namespace fs = std::filesystem;

// Encodes one document's text into the result, or records a skip when it gives no token.
void add_document(const DocumentEncoder& encoder, std::string_view text, EncodedBatch& result,
                  const std::function<std::string()>& where) {
  const std::size_t before = result.tokens.size();
  encoder.tokenizer.encode_document(text, result.tokens, encoder.whole);
  if (result.tokens.size() == before) {
    result.skips.push_back({SkipKind::kNoTokens, where(), "encodes to no token (empty or only whitespace)"});
    return;
  }
  result.tokens.push_back(encoder.eos);
  const auto length = static_cast<std::int64_t>(result.tokens.size() - before);
  if (length > std::numeric_limits<std::int32_t>::max()) {
    throw InvalidArgument("document " + where() + " has " + std::to_string(length) +
                          " tokens, more than an indexed dataset's sequence (int32) holds");
  }
  result.lengths.push_back(length);
}

// Reads exactly `size` bytes; false (errno set, or 0 when the file is shorter) when it cannot.
bool read_exactly(int fd, char* out, std::int64_t size) {
  std::int64_t offset = 0;
  while (offset < size) {
    const ssize_t n = ::pread(fd, out + offset, static_cast<std::size_t>(size - offset), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = 0;
      return false;
    }
    offset += n;
  }
  return true;
}

// The part of a parse error's message after "parse error at line 1, column N: ", bounded.
std::string parse_error_text(const nlohmann::json::parse_error& e) {
  std::string what = e.what();
  const auto at = what.find("parse error");
  if (at != std::string::npos) {
    const auto colon = what.find(": ", at);
    if (colon != std::string::npos) what = what.substr(colon + 2);
  }
  if (what.size() > 200) what = what.substr(0, 200) + "...";
  if (!is_valid_utf8(what)) what = quote_value(what);
  return what;
}

// The first keys of an object, quoted, for an error: "'a', 'b', ..." (at most five named).
std::string first_keys(const nlohmann::json& object) {
  constexpr std::size_t kShown = 5;
  std::vector<std::string> keys;
  for (const auto& item : object.items()) {
    if (keys.size() == kShown) {
      keys.emplace_back("...");
      break;
    }
    keys.push_back(quote_value(item.key(), 40));
  }
  return join(keys, ", ");
}

}  // namespace

// ---- DirectorySource -----------------------------------------------------------------------------

bool DirectorySource::next(DocumentBatch& batch) {
  const std::uint64_t count = corpus_.document_count();
  if (next_ >= count) return false;
  batch.first_document = next_;
  std::int64_t bytes = 0;
  while (next_ < count && next_ - batch.first_document < kTokenizeBatchDocuments &&
         (bytes == 0 || bytes + corpus_.document_size(next_) <= static_cast<std::int64_t>(kTokenizeBatchBytes))) {
    bytes += corpus_.document_size(next_);
    ++next_;
  }
  batch.end_document = next_;
  return true;
}

void DirectorySource::process(const DocumentBatch& batch, EncodedBatch& result) const {
  std::string text;
  for (std::uint64_t d = batch.first_document; d < batch.end_document; ++d) {
    const std::string& relative = corpus_.document_path(d);
    const std::int64_t size = corpus_.document_size(d);
    result.input_bytes += size;
    auto skip = [&](SkipKind kind, std::string why) { result.skips.push_back({kind, relative, std::move(why)}); };
    // As Corpus::read: no link followed, no FIFO blocking the open, the size the walk saw.
    const fs::path path = corpus_.root() / relative;
    const Fd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (fd.get() < 0) {
      skip(SkipKind::kChanged, "cannot open: " + errno_text(errno));
      continue;
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
      skip(SkipKind::kChanged, "cannot examine: " + errno_text(errno));
      continue;
    }
    if (!S_ISREG(st.st_mode)) {
      skip(SkipKind::kChanged, "no longer a regular file");
      continue;
    }
    if (st.st_size != size) {
      skip(SkipKind::kChanged, "size changed since the walk (" + std::to_string(size) + " -> " +
                                   std::to_string(st.st_size) + " bytes)");
      continue;
    }
    text.resize(static_cast<std::size_t>(size));
    if (!read_exactly(fd.get(), text.data(), size)) {
      skip(SkipKind::kChanged, errno == 0 ? std::string("shorter than its size") : "cannot read: " + errno_text(errno));
      continue;
    }
    const std::string_view head = std::string_view(text).substr(0, static_cast<std::size_t>(kBinaryProbeBytes));
    if (const auto nul = head.find('\0'); nul != std::string_view::npos) {
      skip(SkipKind::kBinary, "binary (NUL byte at offset " + std::to_string(nul) + ")");
      continue;
    }
    if (!is_valid_utf8(text)) {
      skip(SkipKind::kInvalidUtf8, "not valid UTF-8");
      continue;
    }
    add_document(encoder_, text, result, [&] { return relative; });
  }
}

// ---- JsonLinesSource -----------------------------------------------------------------------------

JsonLinesSource::JsonLinesSource(const fs::path& path, std::string key, const DocumentEncoder& encoder)
    : shown_(quote_value(path.string())), key_(std::move(key)), encoder_(encoder) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw InvalidArgument("input " + shown_ + " cannot be opened: " + errno_text(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int error = errno;
    ::close(fd_);
    throw InvalidArgument("input " + shown_ + " cannot be examined: " + errno_text(error));
  }
  size_ = st.st_size;
}

JsonLinesSource::~JsonLinesSource() { ::close(fd_); }

bool JsonLinesSource::next(DocumentBatch& batch) {
  std::string text = std::move(carry_);
  carry_.clear();
  while (!eof_) {
    const std::size_t old = text.size();
    text.resize(old + kTokenizeBatchBytes);
    ssize_t n;
    do {
      n = ::read(fd_, text.data() + old, kTokenizeBatchBytes);
    } while (n < 0 && errno == EINTR);
    if (n < 0) throw Error("input " + shown_ + ": cannot read at byte " + std::to_string(offset_ + static_cast<std::int64_t>(old)) + ": " + errno_text(errno));
    text.resize(old + static_cast<std::size_t>(n));
    if (n == 0) {
      eof_ = true;
      break;
    }
    // Cut after the last newline once the batch is big enough (the carry holds none).
    if (text.size() >= kTokenizeBatchBytes) {
      const void* nl = ::memrchr(text.data() + old, '\n', static_cast<std::size_t>(n));
      if (nl != nullptr) {
        const std::size_t cut = static_cast<std::size_t>(static_cast<const char*>(nl) - text.data()) + 1;
        carry_.assign(text, cut);
        text.resize(cut);
        break;
      }
    }
  }
  if (text.empty()) return false;
  batch.first_line = next_line_;
  batch.offset = offset_;
  next_line_ += static_cast<std::uint64_t>(std::count(text.begin(), text.end(), '\n'));
  offset_ += static_cast<std::int64_t>(text.size());
  batch.text = std::move(text);
  return true;
}

void JsonLinesSource::process(const DocumentBatch& batch, EncodedBatch& result) const {
  result.input_bytes = static_cast<std::int64_t>(batch.text.size());
  const std::string_view text = batch.text;
  std::size_t begin = 0;
  std::uint64_t line = batch.first_line;
  while (begin < text.size()) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view content = text.substr(begin, end - begin);
    const std::int64_t offset = batch.offset + static_cast<std::int64_t>(begin);
    process_line(content, line, offset, result);
    begin = end + 1;
    ++line;
  }
}

void JsonLinesSource::bad_line(std::uint64_t line, std::int64_t offset, const std::string& what) const {
  throw InvalidArgument("input " + shown_ + " line " + std::to_string(line) + " (byte offset " +
                        std::to_string(offset) + "): " + what);
}

void JsonLinesSource::process_line(std::string_view content, std::uint64_t line, std::int64_t offset,
                                   EncodedBatch& result) const {
  if (content.find_first_not_of(" \t\r") == std::string_view::npos) {
    ++result.blank_lines;
    return;
  }
  nlohmann::json value;
  try {
    value = nlohmann::json::parse(content.begin(), content.end());
  } catch (const nlohmann::json::parse_error& e) {
    bad_line(line, offset, "not JSON (at byte " + std::to_string(e.byte) + " of the line: " + parse_error_text(e) + ")");
  }
  if (!value.is_object()) {
    bad_line(line, offset, std::string("a JSON ") + value.type_name() + ", not an object holding " + quote_value(key_));
  }
  const auto it = value.find(key_);
  if (it == value.end()) {
    const std::string keys = first_keys(value);
    bad_line(line, offset, "no key " + quote_value(key_) + " in the object" + (keys.empty() ? " (it is empty)" : " (its keys: " + keys + ")"));
  }
  if (!it->is_string()) {
    bad_line(line, offset, "the value of " + quote_value(key_) + " is a JSON " + it->type_name() + ", not a string");
  }
  add_document(encoder_, it->get_ref<const std::string&>(), result,
               [&] { return "line " + std::to_string(line); });
}

}  // namespace hdp::trainer::data
