// File: trainer/data/document_sources.h
//
// The input of `hdp tokenize` (tokenize.h) as batches of documents, and how a batch is encoded:
//   - DirectorySource: a directory tree, one regular file a document, walked by the training
//     corpus (corpus.h). Reading a file applies the corpus's rules: opened without following a
//     link, its size the walk's (else skipped as changed), binary (a NUL byte in its first
//     kBinaryProbeBytes bytes) and invalid UTF-8 skipped; each skip recorded with the file's
//     relative path and why;
//   - JsonLinesSource: a JSON-lines file, one object per line holding the document's text under a
//     key. A line that is not JSON, not an object, without the key or whose value is not a string
//     throws InvalidArgument naming the file, the line number (1-based), its byte offset and what
//     is wrong; blank lines are counted.
// A batch is cut from the input alone (about kTokenizeBatchBytes of input; a directory batch at
// most kTokenizeBatchDocuments files, a JSON-lines batch whole lines), never from timing or a
// thread count, so the output does not depend on them. A document that encodes to no token is
// skipped and recorded; every other gets the eos id appended (encode_document below).
// next() is called by one thread at a time, in batch order (the pipeline's lock, ordered_pipeline.h);
// process() is const and may run on several threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "trainer/data/corpus.h"
#include "trainer/data/sentencepiece_tokenizer.h"

namespace hdp::trainer::data {

inline constexpr std::size_t kTokenizeBatchBytes = std::size_t{1} << 20;  // input bytes a batch holds (about)
inline constexpr std::uint64_t kTokenizeBatchDocuments = 4096;            // files a directory batch holds at most

enum class SkipKind { kBinary, kInvalidUtf8, kChanged, kNoTokens };

struct DocumentSkip {
  SkipKind kind;
  std::string where;  // the file (relative path) or "line N"
  std::string why;
};

// A unit of work, cut from the input alone.
struct DocumentBatch {
  std::uint64_t first_document = 0, end_document = 0;  // directory: documents [first, end)
  std::string text;                                    // JSON lines: whole lines
  std::uint64_t first_line = 0;                        // its first line's number (1-based)
  std::int64_t offset = 0;                             // its first byte's offset in the file
};

// What a worker made of a batch.
struct EncodedBatch {
  std::vector<std::int32_t> tokens;   // every document's, eos included, back to back
  std::vector<std::int64_t> lengths;  // tokens per document
  std::int64_t input_bytes = 0;
  std::vector<DocumentSkip> skips;
  std::uint64_t blank_lines = 0;
  std::exception_ptr error;           // thrown when the batch's turn to be written comes
};

// How documents are encoded.
struct DocumentEncoder {
  const Tokenizer& tokenizer;
  std::int32_t eos;
  bool whole;  // never in chunks of lines
};

class DocumentSource {
 public:
  virtual ~DocumentSource() = default;
  // The next batch; false at the end. Called by one thread at a time, in batch order.
  virtual bool next(DocumentBatch& batch) = 0;
  virtual void process(const DocumentBatch& batch, EncodedBatch& result) const = 0;
};

class DirectorySource final : public DocumentSource {
 public:
  // Both must outlive the source.
  DirectorySource(const Corpus& corpus, const DocumentEncoder& encoder) : corpus_(corpus), encoder_(encoder) {}

  bool next(DocumentBatch& batch) override;
  void process(const DocumentBatch& batch, EncodedBatch& result) const override;

 private:
  const Corpus& corpus_;
  const DocumentEncoder& encoder_;
  std::uint64_t next_ = 0;
};

class JsonLinesSource final : public DocumentSource {
 public:
  // Opens the file: InvalidArgument when it cannot be opened or examined. `encoder` must outlive
  // the source.
  JsonLinesSource(const std::filesystem::path& path, std::string key, const DocumentEncoder& encoder);
  ~JsonLinesSource() override;
  JsonLinesSource(const JsonLinesSource&) = delete;
  JsonLinesSource& operator=(const JsonLinesSource&) = delete;

  std::int64_t size() const { return size_; }  // of the file, at open

  bool next(DocumentBatch& batch) override;
  void process(const DocumentBatch& batch, EncodedBatch& result) const override;

 private:
  [[noreturn]] void bad_line(std::uint64_t line, std::int64_t offset, const std::string& what) const;
  void process_line(std::string_view content, std::uint64_t line, std::int64_t offset, EncodedBatch& result) const;

  std::string shown_;
  std::string key_;
  const DocumentEncoder& encoder_;
  int fd_ = -1;
  std::int64_t size_ = 0;
  // The reading position (next(), one thread at a time).
  std::string carry_;  // a partial last line, read but not yet in a batch
  std::int64_t offset_ = 0;
  std::uint64_t next_line_ = 1;
  bool eof_ = false;
};

}  // namespace hdp::trainer::data
