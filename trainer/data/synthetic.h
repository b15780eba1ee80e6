// File: trainer/data/synthetic.h
//
// Synthetic documents for benchmarks: `documents` documents whose lengths are drawn from a named
// length distribution (mesh::named_distribution: "github", "byted", "file:PATH"), cut at the
// context length as mesh::draw_batch cuts them, so one document is one piece. The lengths come
// from one std::mt19937_64 seeded with `seed`, drawn in document order at construction; token j of
// document d is a fixed mix of (seed, d, j) (mix.h), so both are the same in every process and on
// every host, and reading a piece costs no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/data/piece_source.h"

namespace hdp::trainer::data {

struct SyntheticOptions {
  std::string distribution = "github";  // a mesh::named_distribution spec
  std::uint64_t seed = 0;
  std::uint64_t documents = 100'000;    // >= 1, <= kMaxSyntheticDocuments
  std::int64_t context = 0;             // longest document, >= 1
  std::int32_t vocab = 256;             // token ids in [0, vocab), >= 1
};

// Lengths are held in memory, 8 bytes a document.
inline constexpr std::uint64_t kMaxSyntheticDocuments = std::uint64_t{1} << 30;

class SyntheticDocuments final : public PieceSource {
 public:
  // Throws InvalidArgument naming the bad option (an unknown distribution included).
  explicit SyntheticDocuments(const SyntheticOptions& options);

  const SyntheticOptions& options() const { return options_; }

  // Token `position` of document `document` for `seed`: in [0, vocab).
  static std::int32_t token(std::uint64_t seed, std::uint64_t document, std::uint64_t position, std::int32_t vocab);

  std::uint64_t piece_count() const override { return lengths_.size(); }
  std::int64_t piece_length(std::uint64_t piece) const override { return lengths_.at(piece); }
  // Never refuses a piece.
  bool read(std::uint64_t piece, std::int64_t length, std::vector<std::int32_t>& tokens,
            std::string& why) const override;
  // Of the options: the documents are a function of them.
  std::string fingerprint() const override;

 private:
  SyntheticOptions options_;
  std::vector<std::int64_t> lengths_;
};

}  // namespace hdp::trainer::data
