// File: trainer/data/corpus_index_cache.h
//
// A corpus's index (trainer/data/corpus.h) kept in a file, so that the node's other workers read it
// instead of walking the tree again: a worker restarted after a crash indexes its data before it
// can train, and the walk was 0.15 s of its 0.22 s start on /usr/include (docs/performance.md,
// "A worker's data index, read from its node's directory"). The file lives in the directory the
// agent keeps for its life (HDP_NODE_DIR, elastic/worker_env.h), so an index is reused only while
// the agent that saw it taken runs: a worker started by a later agent walks the tree.
//
// What reusing it means: a restarted worker gets the documents its node's first workers saw (the
// index the last of them to finish wrote), as the running ranks (which indexed at about the same
// time) hold them, even if the tree changed since. A document resized or removed since is refused
// at read time, as for every worker (corpus.h).
//
// The file, one per root and options (its name is a digest of them):
//   "hdp corpus index 1 " and the xxh3-64 (16 hex digits) of everything after this line, '\n'
//   the absolute root, '\0', then decimal fields separated by ' ': context, max_documents,
//   max_bytes, documents, bytes, empty_files, symlinks, special_files, unreadable, truncated (0/1),
//   the body's length; '\n'
//   the body: each document's relative path, '\0', its size in decimal, '\n', in the index's order.
// A file that does not match in every respect (the first line, the checksum, the root and options
// it was taken for, the body's length, a path that is not relative, has an empty, "." or ".."
// component or is not in ascending order, a size < 1, no document, counts that disagree with the
// body, a file that is not a regular one or is larger than 2 GiB) is refused with a reason, and the
// caller walks. Written under a name of the writer's own (mkstemp) beside it and renamed, so a
// reader sees a whole file or none; a worker killed while writing leaves that name behind until
// the directory goes. The path checks keep a wrong file from naming what no walk gives; read()
// itself follows no link beneath the root (corpus.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "trainer/data/corpus.h"

namespace hdp::trainer::data {

// The file in `dir` for the corpus at `root` (absolute) under `options`.
std::filesystem::path corpus_index_file(const std::filesystem::path& dir, const std::filesystem::path& root,
                                        const CorpusOptions& options);

// The index in `file`, or nullopt with `why` set: the file is absent ("absent"), unreadable, or
// refused (see above).
std::optional<CorpusIndex> read_corpus_index(const std::filesystem::path& file, const std::filesystem::path& root,
                                             const CorpusOptions& options, std::string& why);

// Writes `index` (its stats' pieces and seconds are not kept: the reader computes them) to `file`
// (a temporary name beside it, then a rename). False, writing nothing, when the file would be
// larger than the reader takes (2 GiB). Throws hdp::Error naming the file when it cannot write.
bool write_corpus_index(const std::filesystem::path& file, const std::filesystem::path& root,
                        const CorpusOptions& options, const CorpusIndex& index);

}  // namespace hdp::trainer::data
