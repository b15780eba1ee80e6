// File: trainer/data/tokenize.cc
//
// `hdp tokenize`'s run (tokenize.h) as orchestration: the checks, the input's DocumentSource
// (document_sources.h), the OrderedPipeline of encoding threads (ordered_pipeline.h) and the
// writer (indexed_writer.h), with the run's counts and progress.
#include "trainer/data/tokenize.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <exception>
#include <limits>
#include <span>
#include <system_error>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "common/text.h"
#include "trainer/data/corpus.h"
#include "trainer/data/document_sources.h"
#include "trainer/data/ordered_pipeline.h"

namespace hdp::trainer::data {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kNamedSkips = 5;  // skipped documents named in a warning each

// The model's vocabulary and end-of-sequence id into `result`; a model without an eos inside its
// vocabulary is refused.
void check_tokenizer(const Tokenizer& tokenizer, const fs::path& model, TokenizeResult& result) {
  result.vocab = tokenizer.vocab_size();
  result.eos_id = tokenizer.eos_id();
  if (result.eos_id < 0) {
    throw InvalidArgument("tokenizer " + quote_value(model.string()) +
                          " has no end-of-sequence piece (eos_id is -1), so documents cannot be delimited; "
                          "train it with one (spm_train --eos_id=N, the default is 2)");
  }
  if (result.eos_id >= result.vocab) {
    throw InvalidArgument("tokenizer " + quote_value(model.string()) + ": eos id " + std::to_string(result.eos_id) +
                          " is outside its vocabulary of " + std::to_string(result.vocab));
  }
}

// Whether the input is a JSON-lines file (else a directory); refuses anything else.
bool is_jsonl_input(const TokenizeOptions& options) {
  const std::string shown = quote_value(options.input.string());
  std::error_code ec;
  const fs::file_status status = fs::status(options.input, ec);
  if (status.type() == fs::file_type::not_found) throw InvalidArgument("input " + shown + " does not exist");
  if (ec) throw InvalidArgument("cannot examine input " + shown + ": " + ec.message());
  if (status.type() != fs::file_type::directory && status.type() != fs::file_type::regular) {
    throw InvalidArgument("input " + shown + " is neither a directory of text files nor a JSON-lines file");
  }
  if (options.jsonl_key.empty()) throw InvalidArgument("--jsonl-key must not be empty");
  return status.type() == fs::file_type::regular;
}

// The directory's walk, every file a document, its own skips into `result`.
std::unique_ptr<Corpus> walk_directory(const fs::path& input, TokenizeResult& result) {
  CorpusOptions walk;
  walk.context = std::int64_t{1} << 50;  // pieces are not used here: one per document
  walk.max_documents = std::numeric_limits<std::uint64_t>::max();
  walk.max_bytes = std::int64_t{1} << 62;
  auto corpus = std::make_unique<Corpus>(input, walk);
  const CorpusStats& stats = corpus->stats();
  result.walk_empty_files = stats.empty_files;
  result.walk_symlinks = stats.symlinks;
  result.walk_special_files = stats.special_files;
  result.walk_unreadable = stats.unreadable;
  result.totals.total_bytes = stats.bytes;
  return corpus;
}

// The progress callback, called about every interval from the writing thread.
class ProgressReports {
 public:
  ProgressReports(Clock::time_point start, double interval_s, const std::function<void(const TokenizeProgress&)>& callback)
      : start_(start),
        interval_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::max(0.05, interval_s)))),
        deadline_(Clock::now() + interval_),
        callback_(callback) {}

  Clock::time_point deadline() const { return deadline_; }
  double elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  // Reports when the interval is up.
  void maybe_report(TokenizeProgress& totals) {
    if (Clock::now() < deadline_) return;
    totals.seconds = elapsed();
    if (callback_) callback_(totals);
    deadline_ = Clock::now() + interval_;
  }

 private:
  const Clock::time_point start_;
  const Clock::duration interval_;
  Clock::time_point deadline_;
  const std::function<void(const TokenizeProgress&)>& callback_;
};

// Writes one encoded batch's documents and counts them, its skips and its input into `result`;
// the first kNamedSkips skips of the run (`named` so far) are named in a warning.
void write_batch(const EncodedBatch& batch, IndexedDatasetWriter& writer, TokenizeResult& result, std::uint64_t& named,
                 const std::string& input_shown) {
  std::size_t at = 0;
  for (const std::int64_t length : batch.lengths) {
    writer.add_document(std::span<const std::int32_t>(batch.tokens).subspan(at, static_cast<std::size_t>(length)));
    at += static_cast<std::size_t>(length);
    const auto bucket = static_cast<std::size_t>(std::bit_width(static_cast<std::uint64_t>(length)) - 1);
    if (result.length_histogram.size() <= bucket) result.length_histogram.resize(bucket + 1);
    ++result.length_histogram[bucket];
  }
  TokenizeProgress& totals = result.totals;
  totals.documents += batch.lengths.size();
  totals.tokens += static_cast<std::int64_t>(batch.tokens.size());
  totals.input_bytes += batch.input_bytes;
  result.blank_lines += batch.blank_lines;
  for (const DocumentSkip& skip : batch.skips) {
    switch (skip.kind) {
      case SkipKind::kBinary: ++result.skipped_binary; break;
      case SkipKind::kInvalidUtf8: ++result.skipped_invalid_utf8; break;
      case SkipKind::kChanged: ++result.skipped_changed; break;
      case SkipKind::kNoTokens: ++result.skipped_no_tokens; break;
    }
    if (named < kNamedSkips) {
      ++named;
      log()->warn("tokenize: skipping {} of {}: {}", result.jsonl ? skip.where : quote_value(skip.where), input_shown,
                  skip.why);
    }
  }
}

// Encodes the source's documents on result.threads threads and writes them in order; checks the
// stop flag about every 0.1 s.
void write_documents(DocumentSource& source, const TokenizeOptions& options, IndexedDatasetWriter& writer,
                     TokenizeResult& result, ProgressReports& reports) {
  const std::string input_shown = quote_value(options.input.string());
  std::uint64_t named = 0;
  OrderedPipeline pipeline(source, result.threads);
  EncodedBatch batch;
  for (;;) {
    if (options.stop != nullptr && options.stop->load()) throw Error("interrupted");
    bool timed_out = false;
    const auto wake = std::min(reports.deadline(), Clock::now() + std::chrono::milliseconds(100));
    if (!pipeline.next(batch, wake, timed_out)) {
      if (timed_out) {
        reports.maybe_report(result.totals);
        continue;
      }
      break;
    }
    if (batch.error) std::rethrow_exception(batch.error);
    write_batch(batch, writer, result, named, input_shown);
    reports.maybe_report(result.totals);
  }
}

}  // namespace

TokenizeResult tokenize_to_indexed(const TokenizeOptions& options,
                                   const std::function<void(const TokenizeProgress&)>& progress,
                                   double progress_interval_s) {
  const auto start = Clock::now();
  TokenizeResult result;
  // The checks, in the order of the contract: the tokenizer, the input, the output.
  const Tokenizer tokenizer(options.tokenizer);
  check_tokenizer(tokenizer, options.tokenizer, result);
  result.jsonl = is_jsonl_input(options);
  const DocumentEncoder encoder{tokenizer, result.eos_id, options.whole_documents};
  result.line_chunks = tokenizer.lines_independent() && !options.whole_documents;
  std::unique_ptr<JsonLinesSource> jsonl;
  if (result.jsonl) jsonl = std::make_unique<JsonLinesSource>(options.input, options.jsonl_key, encoder);
  IndexedDatasetWriter writer(options.output, result.vocab);
  result.dtype = writer.dtype();
  result.bin_path = writer.bin_path();
  result.idx_path = writer.idx_path();

  // The documents.
  std::unique_ptr<Corpus> corpus;
  std::unique_ptr<DirectorySource> directory;
  DocumentSource* source = jsonl.get();
  if (result.jsonl) {
    result.totals.total_bytes = jsonl->size();
  } else {
    corpus = walk_directory(options.input, result);
    directory = std::make_unique<DirectorySource>(*corpus, encoder);
    source = directory.get();
  }
  result.threads = options.threads > 0 ? options.threads
                                       : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  ProgressReports reports(start, progress_interval_s, progress);
  write_documents(*source, options, writer, result, reports);
  if (result.totals.documents == 0) {
    throw InvalidArgument("input " + quote_value(options.input.string()) + " holds no document with text (" +
                          std::to_string(result.skipped_binary + result.skipped_invalid_utf8 + result.skipped_changed +
                                         result.skipped_no_tokens) +
                          " skipped)");
  }
  writer.finish();
  result.totals.seconds = reports.elapsed();
  return result;
}

}  // namespace hdp::trainer::data
