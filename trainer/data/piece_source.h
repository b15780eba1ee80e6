// File: trainer/data/piece_source.h
//
// What the batch source (batch_source.h) draws from: a fixed, numbered set of pieces, each one
// training sequence of known length, whose token ids are read on demand. Implemented by Corpus (a
// directory tree of text files, corpus.h) and SyntheticDocuments (synthetic.h).
//
// Contract every implementation keeps, on which the determinism of the batches rests:
//   - piece_count() and piece_length() are fixed for the object's life and depend only on what it
//     was built from (the tree, or the options), never on the process or the host;
//   - read() is a function of (piece, length) and of that same input: two processes reading the
//     same tree get the same tokens, or the same refusal, for the same piece.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hdp::trainer::data {

class PieceSource {
 public:
  virtual ~PieceSource() = default;

  // Pieces in the set, >= 1.
  virtual std::uint64_t piece_count() const = 0;
  // Tokens of piece `piece` (< piece_count()), >= 1.
  virtual std::int64_t piece_length(std::uint64_t piece) const = 0;
  // Replaces `tokens` with the first `length` token ids of piece `piece` (1 <= length <=
  // piece_length(piece)) and returns true; or, when the piece cannot be used (its file vanished,
  // cannot be read, is binary), leaves `tokens` unspecified, sets `why` to a one-line reason that
  // names the piece, and returns false. Never throws for bad bytes on disk. Safe to call from
  // several threads at once.
  virtual bool read(std::uint64_t piece, std::int64_t length, std::vector<std::int32_t>& tokens,
                    std::string& why) const = 0;
  // 16 hex digits (xxh3-64) of what the pieces are built from, the context included: equal for the
  // same data, different when it changed in a way the pieces can show (a file added, removed,
  // resized or renamed; an index rewritten). Saved beside the data position in checkpoints, so that
  // a resume onto other data is noticed (trainer/recovery.cc). Each implementation says what it
  // does not see.
  virtual std::string fingerprint() const = 0;
};

// The fingerprint of `bytes` (xxh3-64, as 16 hex digits): what the implementations return.
std::string fingerprint_of(std::string_view bytes);

}  // namespace hdp::trainer::data
