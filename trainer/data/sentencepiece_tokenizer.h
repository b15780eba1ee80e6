// File: trainer/data/sentencepiece_tokenizer.h
//
// A SentencePiece model behind hdp's own interface: Debian's libsentencepiece is included by
// sentencepiece_tokenizer.cc alone, never by a header, so no other file of hdp sees its types (nor
// the protobuf-lite it carries; trainer/CMakeLists.txt says why no target may link it beside
// libprotobuf). Used by `hdp tokenize` (tokenize.h) and by cli/ to decode ids.
//
// SentencePiece's time per string grows faster than its length (a 2 MB document takes 4x longer
// whole than line by line), so when the model's lines are independent (lines_independent(), true
// for spm_train's defaults) encode_document() encodes a long document in chunks of whole lines,
// which gives the same ids.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace hdp::trainer::data {

// A SentencePiece model. Loading throws InvalidArgument naming the file (missing, unreadable, not a
// model). encode() is const and may be called from several threads at once.
class Tokenizer {
 public:
  explicit Tokenizer(const std::filesystem::path& model);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  std::int64_t vocab_size() const;
  // The end-of-sequence id, -1 when the model has none.
  std::int32_t eos_id() const;
  // Appends the ids of `text` as one string (no BOS/EOS added). Throws Error if SentencePiece fails.
  void encode(std::string_view text, std::vector<std::int32_t>& ids) const;
  // The text of `ids` (SentencePiece's decoding: pieces joined, the whitespace mark a space).
  // InvalidArgument for an id outside the vocabulary.
  std::string decode(const std::vector<std::int32_t>& ids) const;

  // Whether a text's ids are the concatenation of its lines' ids (lines split at '\n'), decided at
  // load: no piece holds '\n' or '\r', none holds the whitespace mark U+2581 but as its first
  // character (pieces never span a word boundary: spm_train's --split_by_whitespace, the default),
  // and probe texts with newlines in every position (blank lines, CRLF, spaces and tabs around them,
  // a leading and a trailing newline) encode to their lines' ids: the normaliser turns a newline into
  // whitespace that it collapses (spm_train's default nmt_nfkc does; an identity normaliser that keeps
  // newlines, as LLaMA's model, does not).
  bool lines_independent() const { return lines_independent_; }
  // The ids of encode(text); for a long text with lines_independent(), computed in chunks of whole
  // lines of about 1 KiB (and `whole` false).
  void encode_document(std::string_view text, std::vector<std::int32_t>& ids, bool whole = false) const;

 private:
  bool check_lines_independent() const;

  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool lines_independent_ = false;
};

}  // namespace hdp::trainer::data
