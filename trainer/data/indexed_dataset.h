// File: trainer/data/indexed_dataset.h
//
// A Megatron-LM indexed dataset (`PREFIX.idx` + `PREFIX.bin`, "MMIDIDX" version 1; ../shared
// references, formats.md §1) as a PieceSource: already tokenized documents, each sequence one
// document, cut into context-sized pieces as the text corpus's are (corpus.h), the last one shorter.
// Both files are memory-mapped; the index's arrays are not naturally aligned (the header is 34
// bytes), so every value is read with memcpy.
//
// Checked at open, each failure an InvalidArgument naming the file and the first bad offset: the
// magic, the version, the dtype code (integer codes 1-5 and 8; the float codes 6 and 7 are not
// token ids), the index's size for its counts (with or without multimodal sequence modes), every
// length non-negative, every pointer the running sum of the lengths before it, the last sequence
// ending inside the .bin (a truncated .bin), and the document index (0 first, ascending, S last).
// A token id outside [0, vocab) is found when its piece is read: read() throws InvalidArgument
// naming the file, the sequence and the byte offset (a dataset for another vocabulary is a
// configuration error: every rank reads the same pieces, so every rank stops on it alike).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "trainer/data/piece_source.h"

namespace hdp::trainer::data {

class IndexedDataset final : public PieceSource {
 public:
  // `prefix`: the path without `.idx`/`.bin`. `context` >= 1; `vocab` >= 1.
  IndexedDataset(std::filesystem::path prefix, std::int64_t context, std::int64_t vocab);
  ~IndexedDataset() override;
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  // Whether `prefix` names an indexed dataset (both files exist).
  static bool exists(const std::filesystem::path& prefix);

  std::uint64_t piece_count() const override { return piece_start_.back(); }
  std::int64_t piece_length(std::uint64_t piece) const override;
  bool read(std::uint64_t piece, std::int64_t length, std::vector<std::int32_t>& tokens,
            std::string& why) const override;
  // Of the whole .idx (every length and pointer), the .bin's size and its first and last MiB, and
  // the context: tokens rewritten in the middle of the .bin with the same lengths are not seen.
  std::string fingerprint() const override { return fingerprint_; }

  std::uint64_t sequence_count() const { return lengths_.size(); }
  std::uint64_t document_count() const { return documents_; }
  std::int64_t token_count() const { return tokens_; }

 private:
  struct Mapped {
    const unsigned char* data = nullptr;
    std::size_t size = 0;
  };
  static Mapped map(const std::filesystem::path& path);
  // The steps of the constructor, each checking what it reads (InvalidArgument naming the file
  // and the offset): the header (magic, version, dtype, the index's size for its counts), which
  // sets the dtype and returns the counts (sequences, document index entries); every sequence's
  // length and pointer into lengths_, pointers_ and piece_start_; the document index.
  std::pair<std::uint64_t, std::uint64_t> read_header(const Mapped& idx);
  void read_sequences(const unsigned char* lengths, const unsigned char* pointers, std::uint64_t sequences);
  void check_document_index(const unsigned char* documents, std::uint64_t sequences, std::uint64_t entries) const;
  std::string fingerprint_of_files(const Mapped& idx) const;

  std::filesystem::path idx_path_, bin_path_;
  std::int64_t context_ = 0, vocab_ = 0;
  int item_size_ = 0;
  std::uint8_t dtype_code_ = 0;
  Mapped bin_;
  std::vector<std::int32_t> lengths_;
  std::vector<std::int64_t> pointers_;
  std::vector<std::uint64_t> piece_start_;  // by sequence: the first piece of it; last: piece count
  std::uint64_t documents_ = 0;
  std::int64_t tokens_ = 0;
  std::string fingerprint_;
};

}  // namespace hdp::trainer::data
