// File: trainer/data/indexed_writer.h
//
// Writes a Megatron-LM indexed dataset (`PREFIX.bin` + `PREFIX.idx`, "MMIDIDX" version 1; ../shared
// references, formats.md §1), the format IndexedDataset (indexed_dataset.h) reads: one sequence per
// document (document index [0, 1, ..., S], no multimodal modes), tokens as uint16 (dtype code 8)
// when every id of the vocabulary fits, else int32 (code 4).
//
// Atomic: the tokens and the index are written to temporary files beside the final ones
// (`PREFIX.bin.tmp.XXXXXX`, `PREFIX.idx.tmp.XXXXXX`), and only finish() puts them in place: both
// are flushed to disk, an existing `PREFIX.idx` is removed, `.bin` is renamed, then `.idx`, then the
// directory is synced. A reader needs both files (IndexedDataset::exists), so at every instant the
// final names hold either no dataset or the complete new one (never a new .bin with an old .idx).
// A writer destroyed without finish() (an error, an exception) removes its temporary files; a
// crash leaves them under their .tmp names, never under the final ones.
//
// Errors: the prefix's directory missing or not writable -> InvalidArgument naming it (at
// construction, before any work); a document with no token or more than INT32_MAX tokens, a token
// outside [0, vocab) -> InvalidArgument; an I/O error while writing (a full disk) -> Error naming the
// file. Not thread-safe: one thread adds documents.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace hdp::trainer::data {

// The token dtypes the writer uses (Megatron's codes).
enum class TokenDtype : std::uint8_t { kUInt16 = 8, kInt32 = 4 };

// uint16 when every id of a vocabulary of `vocab` fits (vocab <= 65536), else int32.
TokenDtype token_dtype_for_vocab(std::int64_t vocab);
int token_dtype_bytes(TokenDtype dtype);
const char* token_dtype_name(TokenDtype dtype);

class IndexedDatasetWriter {
 public:
  // Creates the temporary files under `prefix`'s directory. `vocab` >= 1 bounds the token ids (and
  // chooses the dtype: token_dtype_for_vocab).
  IndexedDatasetWriter(std::filesystem::path prefix, std::int64_t vocab);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // Appends one document (one sequence) of tokens.size() >= 1 tokens.
  void add_document(std::span<const std::int32_t> tokens);
  // Writes the index and moves both files into place (see the header comment). Once only.
  void finish();

  TokenDtype dtype() const { return dtype_; }
  std::uint64_t documents() const { return lengths_.size(); }
  std::int64_t tokens() const { return tokens_; }
  const std::filesystem::path& bin_path() const { return bin_path_; }
  const std::filesystem::path& idx_path() const { return idx_path_; }

 private:
  void flush_buffer();
  void remove_temporaries() noexcept;

  std::filesystem::path bin_path_, idx_path_;  // final names
  std::filesystem::path bin_tmp_, idx_tmp_;    // temporary names while writing
  int bin_fd_ = -1, idx_fd_ = -1;
  std::int64_t vocab_ = 0;
  TokenDtype dtype_ = TokenDtype::kInt32;
  std::vector<unsigned char> buffer_;  // tokens not yet written to bin_fd_
  std::vector<std::int32_t> lengths_;
  std::int64_t tokens_ = 0;
  bool finished_ = false;
};

}  // namespace hdp::trainer::data
