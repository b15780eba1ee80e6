#include "trainer/data/tokenize.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>

#include <nlohmann/json.hpp>
#include <sentencepiece_processor.h>

#include "common/error.h"
#include "common/fd.h"
#include "common/log.h"
#include "common/text.h"
#include "trainer/data/corpus.h"

namespace hdp::trainer::data {

namespace fs = std::filesystem;

// ---- Tokenizer ------------------------------------------------------------------------------

static_assert(std::is_same_v<int, std::int32_t>, "SentencePiece's ids are int");

struct Tokenizer::Impl {
  sentencepiece::SentencePieceProcessor processor;
};

Tokenizer::Tokenizer(const fs::path& model) : impl_(std::make_unique<Impl>()) {
  const std::string shown = quote_value(model.string());
  std::error_code ec;
  const fs::file_status status = fs::status(model, ec);
  if (status.type() == fs::file_type::not_found) throw InvalidArgument("tokenizer " + shown + " does not exist");
  if (status.type() == fs::file_type::directory) {
    throw InvalidArgument("tokenizer " + shown + " is a directory, not a SentencePiece .model file");
  }
  const sentencepiece::util::Status loaded = impl_->processor.Load(model.string());
  if (!loaded.ok()) {
    std::string why = loaded.ToString();
    std::replace(why.begin(), why.end(), '\n', ' ');
    while (!why.empty() && why.back() == ' ') why.pop_back();
    throw InvalidArgument("tokenizer " + shown + " does not load as a SentencePiece model: " + why);
  }
  lines_independent_ = check_lines_independent();
}

bool Tokenizer::check_lines_independent() const {
  const sentencepiece::SentencePieceProcessor& sp = impl_->processor;
  constexpr std::string_view kSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's whitespace mark
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    if (sp.IsControl(id) || sp.IsUnknown(id) || sp.IsByte(id) || sp.IsUnused(id)) continue;
    const std::string& piece = sp.IdToPiece(id);
    if (piece.find_first_of("\n\r") != std::string::npos) return false;
    const auto mark = piece.find(kSpace, 1);
    if (mark != std::string::npos) return false;
  }
  static const char* const kProbes[] = {
      "a\nb", "a \n b", "a\n\nb", "\na", "a\n", "\n", "\n\n", "a\r\nb", "a\r\n\r\nb", "a\t\n\tb",
      "hello world\nthe end", "x  \n  y", "1\n2", ".\n,", "\xe3\x80\x80\n\xe3\x80\x80" "a", "word\n word\n  word\n",
      "caf\xc3\xa9\nna\xc3\xafve", "a\n\n\n\nb\n"};
  std::vector<std::int32_t> whole, lines;
  for (const char* probe : kProbes) {
    const std::string_view text = probe;
    whole.clear();
    lines.clear();
    encode(text, whole);
    for (std::size_t begin = 0;;) {
      const std::size_t end = text.find('\n', begin);
      encode(text.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin), lines);
      if (end == std::string_view::npos) break;
      begin = end + 1;
    }
    if (whole != lines) return false;
  }
  return true;
}

Tokenizer::~Tokenizer() = default;

std::int64_t Tokenizer::vocab_size() const { return impl_->processor.GetPieceSize(); }

std::int32_t Tokenizer::eos_id() const { return impl_->processor.eos_id(); }

void Tokenizer::encode(std::string_view text, std::vector<std::int32_t>& ids) const {
  // Encode() replaces its output: straight into `ids` when that is empty, else through a scratch.
  thread_local std::vector<int> scratch;
  std::vector<int>& out = ids.empty() ? ids : scratch;
  const sentencepiece::util::Status status = impl_->processor.Encode(text, &out);
  if (!status.ok()) throw Error("SentencePiece could not encode a document: " + status.ToString());
  if (&out == &scratch) ids.insert(ids.end(), scratch.begin(), scratch.end());
}

std::string Tokenizer::decode(const std::vector<std::int32_t>& ids) const {
  const std::int64_t vocab = vocab_size();
  for (std::int32_t id : ids) {
    if (id < 0 || id >= vocab) {
      throw InvalidArgument("token " + std::to_string(id) + " is outside the tokenizer's vocabulary of " + std::to_string(vocab));
    }
  }
  std::string text;
  const std::vector<int> pieces(ids.begin(), ids.end());
  const sentencepiece::util::Status status = impl_->processor.Decode(pieces, &text);
  if (!status.ok()) throw Error("SentencePiece could not decode: " + status.ToString());
  return text;
}

void Tokenizer::encode_document(std::string_view text, std::vector<std::int32_t>& ids, bool whole) const {
  constexpr std::size_t kChunkBytes = 1024;  // measured: 1 KiB chunks 2.9x whole documents, 4 KiB 2.6x
  if (whole || !lines_independent_ || text.size() <= kChunkBytes) {
    encode(text, ids);
    return;
  }
  // Chunks end after the first newline at or past kChunkBytes from their start.
  std::size_t begin = 0;
  while (begin < text.size()) {
    std::size_t end = text.size();
    if (text.size() - begin > kChunkBytes) {
      const std::size_t nl = text.find('\n', begin + kChunkBytes);
      if (nl != std::string_view::npos) end = nl + 1;
    }
    encode(text.substr(begin, end - begin), ids);
    begin = end;
  }
}

// ---- the conversion ---------------------------------------------------------------------------

namespace {

constexpr std::size_t kBatchBytes = std::size_t{1} << 20;  // input bytes a batch holds (about)
constexpr std::uint64_t kBatchDocuments = 4096;            // files a directory batch holds at most
constexpr std::uint64_t kNamedSkips = 5;                   // skipped documents named in a warning each

std::string errno_text(int error) { return std::error_code(error, std::generic_category()).message(); }

enum class SkipKind { kBinary, kInvalidUtf8, kChanged, kNoTokens };

struct Skip {
  SkipKind kind;
  std::string where;  // the file (relative path) or "line N"
  std::string why;
};

// A unit of work, cut from the input alone.
struct Batch {
  std::uint64_t first_document = 0, end_document = 0;  // directory: documents [first, end)
  std::string text;                                    // JSON lines: whole lines
  std::uint64_t first_line = 0;                        // its first line's number (1-based)
  std::int64_t offset = 0;                             // its first byte's offset in the file
};

// What a worker made of a batch.
struct Result {
  std::vector<std::int32_t> tokens;   // every document's, eos included, back to back
  std::vector<std::int64_t> lengths;  // tokens per document
  std::int64_t input_bytes = 0;
  std::vector<Skip> skips;
  std::uint64_t blank_lines = 0;
  std::exception_ptr error;           // thrown when the batch's turn to be written comes
};

class Source {
 public:
  virtual ~Source() = default;
  // The next batch; false at the end. Called under the pipeline's lock, in batch order.
  virtual bool next(Batch& batch) = 0;
  virtual void process(const Batch& batch, Result& result) const = 0;
};

// How documents are encoded.
struct Encoder {
  const Tokenizer& tokenizer;
  std::int32_t eos;
  bool whole;  // never in chunks of lines
};

// Encodes one document's text into the result, or records a skip when it gives no token.
void add_document(const Encoder& encoder, std::string_view text, Result& result,
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

class DirectorySource final : public Source {
 public:
  DirectorySource(const Corpus& corpus, const Encoder& encoder) : corpus_(corpus), encoder_(encoder) {}

  bool next(Batch& batch) override {
    const std::uint64_t count = corpus_.document_count();
    if (next_ >= count) return false;
    batch.first_document = next_;
    std::int64_t bytes = 0;
    while (next_ < count && next_ - batch.first_document < kBatchDocuments &&
           (bytes == 0 || bytes + corpus_.document_size(next_) <= static_cast<std::int64_t>(kBatchBytes))) {
      bytes += corpus_.document_size(next_);
      ++next_;
    }
    batch.end_document = next_;
    return true;
  }

  void process(const Batch& batch, Result& result) const override {
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

 private:
  const Corpus& corpus_;
  const Encoder& encoder_;
  std::uint64_t next_ = 0;
};

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

class JsonLinesSource final : public Source {
 public:
  JsonLinesSource(const fs::path& path, std::string key, const Encoder& encoder)
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
  ~JsonLinesSource() override { ::close(fd_); }
  JsonLinesSource(const JsonLinesSource&) = delete;
  JsonLinesSource& operator=(const JsonLinesSource&) = delete;

  std::int64_t size() const { return size_; }

  bool next(Batch& batch) override {
    std::string text = std::move(carry_);
    carry_.clear();
    while (!eof_) {
      const std::size_t old = text.size();
      text.resize(old + kBatchBytes);
      ssize_t n;
      do {
        n = ::read(fd_, text.data() + old, kBatchBytes);
      } while (n < 0 && errno == EINTR);
      if (n < 0) throw Error("input " + shown_ + ": cannot read at byte " + std::to_string(offset_ + static_cast<std::int64_t>(old)) + ": " + errno_text(errno));
      text.resize(old + static_cast<std::size_t>(n));
      if (n == 0) {
        eof_ = true;
        break;
      }
      // Cut after the last newline once the batch is big enough (the carry holds none).
      if (text.size() >= kBatchBytes) {
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

  void process(const Batch& batch, Result& result) const override {
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

 private:
  [[noreturn]] void bad_line(std::uint64_t line, std::int64_t offset, const std::string& what) const {
    throw InvalidArgument("input " + shown_ + " line " + std::to_string(line) + " (byte offset " +
                          std::to_string(offset) + "): " + what);
  }

  void process_line(std::string_view content, std::uint64_t line, std::int64_t offset, Result& result) const {
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
      std::string keys;
      std::size_t shown = 0;
      for (const auto& item : value.items()) {
        if (shown++ == 5) {
          keys += ", ...";
          break;
        }
        keys += (keys.empty() ? "" : ", ") + quote_value(item.key(), 40);
      }
      bad_line(line, offset, "no key " + quote_value(key_) + " in the object" + (keys.empty() ? " (it is empty)" : " (its keys: " + keys + ")"));
    }
    if (!it->is_string()) {
      bad_line(line, offset, "the value of " + quote_value(key_) + " is a JSON " + it->type_name() + ", not a string");
    }
    add_document(encoder_, it->get_ref<const std::string&>(), result,
                 [&] { return "line " + std::to_string(line); });
  }

  std::string shown_;
  std::string key_;
  const Encoder& encoder_;
  int fd_ = -1;
  std::int64_t size_ = 0;
  // The reading position (next(), under the pipeline's lock).
  std::string carry_;  // a partial last line, read but not yet in a batch
  std::int64_t offset_ = 0;
  std::uint64_t next_line_ = 1;
  bool eof_ = false;
};

// Workers take batches in order and encode them; the calling thread writes the results in batch
// order. At most `window` batches are taken beyond the one being written, which bounds memory.
class Pipeline {
 public:
  Pipeline(Source& source, int threads) : source_(source), window_(2 * static_cast<std::uint64_t>(threads) + 2) {
    workers_.reserve(static_cast<std::size_t>(threads));
    for (int t = 0; t < threads; ++t) workers_.emplace_back([this] { work(); });
  }
  ~Pipeline() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& worker : workers_) worker.join();
  }
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // The next result in batch order; false when every batch was handed out. Waits at most until
  // `deadline`, then returns false with `timed_out` set.
  bool next(Result& result, std::chrono::steady_clock::time_point deadline, bool& timed_out) {
    std::unique_lock lock(mutex_);
    timed_out = false;
    const auto ready = [&] { return results_.count(next_write_) > 0 || (exhausted_ && next_write_ == next_take_); };
    if (!done_cv_.wait_until(lock, deadline, ready)) {
      timed_out = true;
      return false;
    }
    const auto it = results_.find(next_write_);
    if (it == results_.end()) return false;
    result = std::move(it->second);
    results_.erase(it);
    ++next_write_;
    lock.unlock();
    work_cv_.notify_all();
    return true;
  }

 private:
  void work() {
    for (;;) {
      Batch batch;
      std::uint64_t id = 0;
      {
        std::unique_lock lock(mutex_);
        work_cv_.wait(lock, [&] { return stop_ || exhausted_ || next_take_ < next_write_ + window_; });
        if (stop_ || exhausted_) return;
        id = next_take_;
        bool more = false;
        try {
          more = source_.next(batch);
        } catch (...) {
          Result failed;
          failed.error = std::current_exception();
          results_.emplace(id, std::move(failed));
          more = false;
          ++next_take_;
        }
        if (!more) {
          exhausted_ = true;
          lock.unlock();
          done_cv_.notify_all();
          work_cv_.notify_all();
          return;
        }
        ++next_take_;
      }
      Result result;
      try {
        source_.process(batch, result);
      } catch (...) {
        result.error = std::current_exception();
      }
      {
        std::lock_guard lock(mutex_);
        results_.emplace(id, std::move(result));
      }
      done_cv_.notify_all();
    }
  }

  Source& source_;
  const std::uint64_t window_;
  std::mutex mutex_;
  std::condition_variable work_cv_, done_cv_;
  std::uint64_t next_take_ = 0, next_write_ = 0;
  bool exhausted_ = false, stop_ = false;
  std::map<std::uint64_t, Result> results_;
  std::vector<std::thread> workers_;
};

}  // namespace

TokenizeResult tokenize_to_indexed(const TokenizeOptions& options,
                                   const std::function<void(const TokenizeProgress&)>& progress,
                                   double progress_interval_s) {
  const auto start = std::chrono::steady_clock::now();
  TokenizeResult result;

  // 1. The tokenizer.
  const Tokenizer tokenizer(options.tokenizer);
  result.vocab = tokenizer.vocab_size();
  result.eos_id = tokenizer.eos_id();
  if (result.eos_id < 0) {
    throw InvalidArgument("tokenizer " + quote_value(options.tokenizer.string()) +
                          " has no end-of-sequence piece (eos_id is -1), so documents cannot be delimited; "
                          "train it with one (spm_train --eos_id=N, the default is 2)");
  }
  if (result.eos_id >= result.vocab) {
    throw InvalidArgument("tokenizer " + quote_value(options.tokenizer.string()) + ": eos id " +
                          std::to_string(result.eos_id) + " is outside its vocabulary of " + std::to_string(result.vocab));
  }

  // 2. The input.
  const std::string input_shown = quote_value(options.input.string());
  std::error_code ec;
  const fs::file_status status = fs::status(options.input, ec);
  if (status.type() == fs::file_type::not_found) throw InvalidArgument("input " + input_shown + " does not exist");
  if (ec) throw InvalidArgument("cannot examine input " + input_shown + ": " + ec.message());
  if (status.type() != fs::file_type::directory && status.type() != fs::file_type::regular) {
    throw InvalidArgument("input " + input_shown + " is neither a directory of text files nor a JSON-lines file");
  }
  result.jsonl = status.type() == fs::file_type::regular;
  if (options.jsonl_key.empty()) throw InvalidArgument("--jsonl-key must not be empty");
  const Encoder encoder{tokenizer, result.eos_id, options.whole_documents};
  result.line_chunks = tokenizer.lines_independent() && !options.whole_documents;
  std::unique_ptr<JsonLinesSource> jsonl;
  if (result.jsonl) jsonl = std::make_unique<JsonLinesSource>(options.input, options.jsonl_key, encoder);

  // 3. The output.
  IndexedDatasetWriter writer(options.output, result.vocab);
  result.dtype = writer.dtype();
  result.bin_path = writer.bin_path();
  result.idx_path = writer.idx_path();

  // 4. The documents.
  std::unique_ptr<Corpus> corpus;
  std::unique_ptr<DirectorySource> directory;
  Source* source = jsonl.get();
  TokenizeProgress& totals = result.totals;
  if (result.jsonl) {
    totals.total_bytes = jsonl->size();
  } else {
    CorpusOptions walk;
    walk.context = std::int64_t{1} << 50;  // pieces are not used here: one per document
    walk.max_documents = std::numeric_limits<std::uint64_t>::max();
    walk.max_bytes = std::int64_t{1} << 62;
    corpus = std::make_unique<Corpus>(options.input, walk);
    const CorpusStats& stats = corpus->stats();
    result.walk_empty_files = stats.empty_files;
    result.walk_symlinks = stats.symlinks;
    result.walk_special_files = stats.special_files;
    result.walk_unreadable = stats.unreadable;
    totals.total_bytes = stats.bytes;
    directory = std::make_unique<DirectorySource>(*corpus, encoder);
    source = directory.get();
  }

  int threads = options.threads;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  result.threads = threads;

  const auto interval = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(std::max(0.05, progress_interval_s)));
  auto deadline = std::chrono::steady_clock::now() + interval;
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  auto report = [&] {
    totals.seconds = elapsed();
    if (progress) progress(totals);
    deadline = std::chrono::steady_clock::now() + interval;
  };
  std::uint64_t named = 0;
  {
    Pipeline pipeline(*source, threads);
    Result batch;
    for (;;) {
      if (options.stop != nullptr && options.stop->load()) throw Error("interrupted");
      bool timed_out = false;
      const auto wake = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(100));
      if (!pipeline.next(batch, wake, timed_out)) {
        if (timed_out) {
          if (std::chrono::steady_clock::now() >= deadline) report();
          continue;
        }
        break;
      }
      if (batch.error) std::rethrow_exception(batch.error);
      std::size_t at = 0;
      for (const std::int64_t length : batch.lengths) {
        writer.add_document(std::span<const std::int32_t>(batch.tokens).subspan(at, static_cast<std::size_t>(length)));
        at += static_cast<std::size_t>(length);
        const auto bucket = static_cast<std::size_t>(std::bit_width(static_cast<std::uint64_t>(length)) - 1);
        if (result.length_histogram.size() <= bucket) result.length_histogram.resize(bucket + 1);
        ++result.length_histogram[bucket];
      }
      totals.documents += batch.lengths.size();
      totals.tokens += static_cast<std::int64_t>(batch.tokens.size());
      totals.input_bytes += batch.input_bytes;
      result.blank_lines += batch.blank_lines;
      for (const Skip& skip : batch.skips) {
        switch (skip.kind) {
          case SkipKind::kBinary: ++result.skipped_binary; break;
          case SkipKind::kInvalidUtf8: ++result.skipped_invalid_utf8; break;
          case SkipKind::kChanged: ++result.skipped_changed; break;
          case SkipKind::kNoTokens: ++result.skipped_no_tokens; break;
        }
        if (named < kNamedSkips) {
          ++named;
          log()->warn("tokenize: skipping {} of {}: {}", result.jsonl ? skip.where : quote_value(skip.where),
                      input_shown, skip.why);
        }
      }
      if (std::chrono::steady_clock::now() >= deadline) report();
    }
  }
  if (totals.documents == 0) {
    throw InvalidArgument("input " + input_shown + " holds no document with text (" +
                          std::to_string(result.skipped_binary + result.skipped_invalid_utf8 + result.skipped_changed +
                                         result.skipped_no_tokens) +
                          " skipped)");
  }
  writer.finish();
  totals.seconds = elapsed();
  return result;
}

}  // namespace hdp::trainer::data
