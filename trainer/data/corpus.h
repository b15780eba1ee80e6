// File: trainer/data/corpus.h
//
// A training corpus read from a directory tree: one regular file is one document, and its tokens
// are its bytes (vocabulary 256, token id = byte value). A document longer than the context length
// is cut into context-sized pieces, the last one shorter, and each piece is one training sequence,
// so the sequence lengths follow the corpus's own long tail.
//
// Indexing (the constructor) walks the tree and records each document's path and size from its
// metadata, without opening it: tens of thousands of files take a fraction of a second (the test
// Corpus.IndexesUsrIncludeQuickly prints the figures for /usr/include). The rules, all decided by
// the tree (and, for permissions, the user reading it: run every rank as the same user) so that
// every process indexing the same tree gets the same documents in the same order:
//   - order: documents are numbered in bytewise order of their paths relative to the root (the
//     walk visits each directory's entries sorted, a directory as "name/", which gives that order
//     without holding the whole list before the limits apply);
//   - symbolic links are never followed, neither to files nor to directories, so nothing outside
//     the tree is read, no cycle is possible and no document is counted twice; only the root itself
//     may be a link (it is the user's choice of directory); read() follows none either, whatever
//     took a document's or a directory's place after indexing (on Linux 5.6 and later: openat2);
//   - skipped, counted in CorpusStats and summed up in one log line (the first few also named in a
//     warning): empty files, symbolic links, anything not a regular file or a directory (FIFOs,
//     sockets, devices), and entries the process may not read (a directory it cannot list, a file
//     without read permission, an entry whose metadata cannot be read);
//   - limits: the walk stops, in path order, before the document that would pass max_documents or
//     max_bytes (a warning says so; CorpusStats::truncated is set).
// Binary documents cannot be told from metadata, so read() decides: a document whose first
// kBinaryProbeBytes bytes hold a NUL byte is binary (git's rule), and every piece of it is refused.
// A document that changed after indexing (size differs, gone, replaced by a link or by something
// not a regular file, cannot be opened) is refused the same way. A NUL byte further into a text
// document is kept as token 0. The verdict on a piece depends only on its document's bytes and
// metadata, not on the piece's neighbours nor on how much of it is read (short of an I/O error
// inside the piece), so every process refuses the same pieces; batch_source.h passes over them.
//
// Errors: a root that does not exist, is not a directory or cannot be listed, a tree with no
// usable document, or a context < 1 -> InvalidArgument naming the path (or the value) and why.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "trainer/data/piece_source.h"

namespace hdp::trainer::data {

// How many leading bytes of a document read() checks for a NUL byte.
inline constexpr std::int64_t kBinaryProbeBytes = 8000;

struct CorpusOptions {
  std::int64_t context = 0;                         // tokens per piece at most, >= 1
  std::uint64_t max_documents = 10'000'000;         // documents indexed at most, >= 1
  std::int64_t max_bytes = std::int64_t{1} << 40;   // bytes indexed at most (1 TiB), >= 1
  // Where the index is kept for the node's other processes (the agent's directory, HDP_NODE_DIR):
  // read from there when a file for this root and these options is there and whole, written there
  // after a walk otherwise (trainer/data/corpus_index_cache.h). Empty: every process walks.
  std::filesystem::path index_cache_dir;
};

// What indexing found.
struct CorpusStats {
  std::uint64_t documents = 0;      // indexed: non-empty regular files within the limits
  std::uint64_t pieces = 0;
  std::int64_t bytes = 0;           // of the indexed documents
  std::uint64_t empty_files = 0;
  std::uint64_t symlinks = 0;       // not followed
  std::uint64_t special_files = 0;  // FIFOs, sockets, devices
  std::uint64_t unreadable = 0;     // directories that cannot be listed, files without read permission
  bool truncated = false;           // a limit stopped the walk
  double seconds = 0;               // wall time of the walk, or of reading the index kept
  bool from_cache = false;          // read from CorpusOptions::index_cache_dir, not walked
};

// What indexing found, document by document: what CorpusOptions::index_cache_dir keeps.
struct CorpusIndex {
  CorpusStats stats;
  std::vector<std::string> paths;   // relative, bytewise ascending
  std::vector<std::int64_t> sizes;  // bytes, >= 1
};

// Where a piece lies.
struct PieceLocation {
  std::uint64_t document = 0;
  std::int64_t offset = 0;  // byte offset in the document
  std::int64_t length = 0;  // tokens (bytes)
};

class Corpus final : public PieceSource {
 public:
  // Indexes the tree under `root` (or reads the index kept in options.index_cache_dir); see the
  // header comment. Throws InvalidArgument.
  Corpus(std::filesystem::path root, const CorpusOptions& options);

  // The root made absolute (reads do not depend on the working directory).
  const std::filesystem::path& root() const { return root_; }
  std::int64_t context() const { return context_; }
  const CorpusStats& stats() const { return index_.stats; }

  std::uint64_t document_count() const { return index_.paths.size(); }
  // Path of document `document` relative to the root (generic format, '/' separated).
  const std::string& document_path(std::uint64_t document) const { return index_.paths.at(document); }
  std::int64_t document_size(std::uint64_t document) const { return index_.sizes.at(document); }
  PieceLocation locate(std::uint64_t piece) const;

  std::uint64_t piece_count() const override { return index_.stats.pieces; }
  std::int64_t piece_length(std::uint64_t piece) const override { return locate(piece).length; }
  bool read(std::uint64_t piece, std::int64_t length, std::vector<std::int32_t>& tokens,
            std::string& why) const override;
  // Of every document's relative path and size, and the context: an edit that keeps a file's size
  // is not seen (reading every byte at each start would cost more than the walk). Computed once,
  // with the index.
  std::string fingerprint() const override { return fingerprint_; }

 private:
  std::filesystem::path root_;
  std::int64_t context_ = 0;
  CorpusIndex index_;
  std::vector<std::uint64_t> first_piece_;  // first piece of each document; ascending
  std::string fingerprint_;
};

}  // namespace hdp::trainer::data
