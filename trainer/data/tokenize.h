// File: trainer/data/tokenize.h
//
// Text to a Megatron-LM indexed dataset with a SentencePiece model (`hdp tokenize`, cli/):
// tokenize_to_indexed(), which reads documents (document_sources.h), encodes them with the Tokenizer
// (sentencepiece_tokenizer.h: Debian's libsentencepiece behind hdp's own interface, no SentencePiece
// header outside sentencepiece_tokenizer.cc) on several threads (ordered_pipeline.h) and writes them
// in input order with IndexedDatasetWriter (indexed_writer.h).
//
// Documents:
//   - a directory: one regular file is one document, walked exactly as the training corpus walks
//     its root (corpus.h: bytewise order of relative paths, symbolic links never followed, empty,
//     special and unreadable entries skipped and counted). Reading a file applies the corpus's rule
//     too: a file with a NUL byte in its first kBinaryProbeBytes bytes is binary, and a file that
//     changed since the walk is refused; both are skipped, counted and the first few named in a
//     warning, as the corpus passes over such documents instead of stopping. A file that is not
//     valid UTF-8 is skipped the same way (SentencePiece would encode its bad bytes as <unk>);
//   - a regular file: JSON lines, one object per line holding the document's text under `jsonl_key`
//     (a string). A line that is not JSON (invalid UTF-8 included), not an object, without the key,
//     or whose value is not a string stops the run: InvalidArgument naming the file, the line number
//     (1-based), its byte offset in the file and what is wrong. Blank lines are skipped and counted.
// Each document gets the ids of its whole text as one string, as Megatron's preprocess_data.py encodes
// it, and the model's end-of-sequence id is appended (Megatron's `--append-eod`). A model without an
// eos piece is refused. A document that encodes to no token (only whitespace) is skipped and counted.
// A long document is encoded in chunks of whole lines when the model's lines are independent
// (Tokenizer::encode_document, sentencepiece_tokenizer.h), which gives the same ids faster;
// TokenizeOptions::whole_documents turns that off.
//
// Deterministic: the batches are cut from the input alone (never from the thread count or timing) and
// written in input order, so any number of threads writes byte-identical files; with several bad
// lines in a JSON-lines file, the error names the first.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "trainer/data/indexed_writer.h"
#include "trainer/data/sentencepiece_tokenizer.h"

namespace hdp::trainer::data {

struct TokenizeOptions {
  std::filesystem::path tokenizer;  // a SentencePiece .model
  std::filesystem::path input;      // a directory tree, or a JSON-lines file
  std::string jsonl_key = "text";
  std::filesystem::path output;     // prefix: output.bin and output.idx are written
  int threads = 0;                  // encoding threads; 0: std::thread::hardware_concurrency()
  bool whole_documents = false;     // never encode in chunks of lines (same ids, slower)
  // When set (by a signal handler, say) the run stops within about 0.1 s: the temporary files are
  // removed and Error("interrupted") is thrown.
  const std::atomic<bool>* stop = nullptr;
};

// Where a run stands; handed to the progress callback.
struct TokenizeProgress {
  std::uint64_t documents = 0;   // written
  std::int64_t tokens = 0;       // written, eos included
  std::int64_t input_bytes = 0;  // of the input consumed (text files read, JSON-lines bytes)
  std::int64_t total_bytes = 0;  // of the whole input (files indexed, the JSON-lines file's size)
  double seconds = 0;            // since the run started
};

struct TokenizeResult {
  TokenizeProgress totals;
  bool jsonl = false;
  int threads = 0;
  std::int64_t vocab = 0;
  std::int32_t eos_id = -1;
  TokenDtype dtype = TokenDtype::kUInt16;
  bool line_chunks = false;  // long documents were encoded in chunks of lines (same ids)
  std::filesystem::path bin_path, idx_path;
  // length_histogram[b]: documents of [2^b, 2^(b+1)) tokens, eos included.
  std::vector<std::uint64_t> length_histogram;
  // Skipped documents: at read time (directory) or by content.
  std::uint64_t skipped_binary = 0, skipped_invalid_utf8 = 0, skipped_changed = 0, skipped_no_tokens = 0;
  std::uint64_t blank_lines = 0;  // JSON lines
  // The directory walk's own skips (corpus.h's CorpusStats).
  std::uint64_t walk_empty_files = 0, walk_symlinks = 0, walk_special_files = 0, walk_unreadable = 0;
};

// Runs the whole conversion; see the header comment. Checks, in this order and before any work:
// the tokenizer (loads, has an eos), the input (exists, a directory or a regular file), the output
// (its directory exists and takes files). `progress` (may be empty) is called from the calling
// thread about every `progress_interval_s` seconds. Throws InvalidArgument for bad input, Error
// for I/O failures; no output file exists under the final names unless the run succeeded.
TokenizeResult tokenize_to_indexed(const TokenizeOptions& options,
                                   const std::function<void(const TokenizeProgress&)>& progress,
                                   double progress_interval_s = 1.0);

}  // namespace hdp::trainer::data
