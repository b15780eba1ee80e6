// `hdp tokenize --tokenizer M.model --input DIR|FILE.jsonl [--jsonl-key text] --output PREFIX
// [--threads N] [--progress-every S]`: text to a Megatron-LM indexed dataset (PREFIX.bin +
// PREFIX.idx) with a SentencePiece model (trainer/data/tokenize.h), progress on stderr (a bar on a
// terminal, plain lines otherwise), a summary on stdout.
//
// This file is linked into the helper binary `hdp-tokenize` (cli/tokenize_main.cc), not into `hdp`:
// Debian's libsentencepiece carries its own copy of protobuf-lite 3.14 with exported symbols, and
// `hdp` links libprotobuf 3.21 (TensorBoard's event files); in one process the two abort or crash at
// the first model load. `hdp tokenize` (cli/tokenize_forward.cc) executes the helper beside `hdp`
// with its own arguments, so the command line, the output and the exit codes are the same.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "common/error.h"
#include "common/text.h"
#include "trainer/data/tokenize.h"

namespace hdp::cli {
namespace {

// SIGINT/SIGTERM during a run: the run stops and removes its temporary files (tokenize.h).
std::atomic<bool> g_stop{false};
volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_stop_signal(int signo) {
  g_signal = signo;
  g_stop.store(true);
}

using trainer::data::TokenizeProgress;
using trainer::data::TokenizeResult;

std::string fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

// 1234567 -> "1.23M"; below 10,000 as is.
std::string count_text(double value) {
  if (value < 1e4) return fixed(value, 0);
  if (value < 1e6) return fixed(value / 1e3, 1) + "k";
  if (value < 1e9) return fixed(value / 1e6, 2) + "M";
  return fixed(value / 1e9, 2) + "G";
}

std::string megabytes(double bytes) { return fixed(bytes / 1e6, 1) + " MB"; }

// Where a log (stderr not a terminal) reads the run: one plain line a report.
std::string progress_line(const TokenizeProgress& p) {
  const double seconds = std::max(p.seconds, 1e-9);
  std::string line = "tokenize: ";
  if (p.total_bytes > 0) line += fixed(100.0 * static_cast<double>(p.input_bytes) / static_cast<double>(p.total_bytes), 1) + "%, ";
  line += count_text(static_cast<double>(p.documents)) + " documents, " + count_text(static_cast<double>(p.tokens)) +
          " tokens, " + megabytes(static_cast<double>(p.input_bytes)) + " of " + megabytes(static_cast<double>(p.total_bytes)) +
          ", " + fixed(static_cast<double>(p.input_bytes) / 1e6 / seconds, 1) + " MB/s, " +
          count_text(static_cast<double>(p.tokens) / seconds) + " tokens/s, " + fixed(p.seconds, 0) + " s";
  return line;
}

// On a terminal, one line rewritten in place:
//   [#########.....................]  30%  1.23M tokens  815.2k tok/s  12.3 of 41.0 MB  8 s
std::string progress_bar(const TokenizeProgress& p) {
  constexpr int kWidth = 30;
  const double seconds = std::max(p.seconds, 1e-9);
  const double done = p.total_bytes > 0 ? std::clamp(static_cast<double>(p.input_bytes) / static_cast<double>(p.total_bytes), 0.0, 1.0) : 0.0;
  const auto filled = static_cast<std::size_t>(done * kWidth);
  return "[" + std::string(filled, '#') + std::string(kWidth - filled, '.') + "] " + fixed(std::floor(100 * done), 0) +
         "%  " + count_text(static_cast<double>(p.tokens)) + " tokens  " +
         count_text(static_cast<double>(p.tokens) / seconds) + " tok/s  " + fixed(static_cast<double>(p.input_bytes) / 1e6, 1) +
         " of " + megabytes(static_cast<double>(p.total_bytes)) + "  " + fixed(p.seconds, 0) + " s";
}

void print_summary(const TokenizeResult& r, const std::string& input, std::ostream& out) {
  const TokenizeProgress& t = r.totals;
  const double seconds = std::max(t.seconds, 1e-9);
  out << "tokenized " << input << (r.jsonl ? " (JSON lines)" : " (directory)") << " -> " << r.bin_path.string() << ", "
      << r.idx_path.string() << "\n";
  out << "  documents " << t.documents << ", tokens " << t.tokens << " (eos " << r.eos_id << " included, "
      << fixed(static_cast<double>(t.tokens) / static_cast<double>(std::max<std::uint64_t>(t.documents, 1)), 1)
      << " per document), " << trainer::data::token_dtype_name(r.dtype) << " ids of a vocabulary of " << r.vocab << "\n";
  out << "  " << fixed(t.seconds, 2) << " s on " << r.threads << " thread" << (r.threads == 1 ? "" : "s") << ": "
      << fixed(static_cast<double>(t.tokens) / seconds, 0) << " tokens/s, "
      << fixed(static_cast<double>(t.input_bytes) / 1e6 / seconds, 2) << " MB/s of " << megabytes(static_cast<double>(t.input_bytes))
      << " input\n";
  out << "  encoded " << (r.line_chunks ? "in chunks of whole lines (the model's lines are independent: the same ids as whole documents)"
                                        : "as whole documents") << "\n";
  std::string skipped;
  auto add = [&](std::uint64_t n, const char* one, const char* many) {
    if (n == 0) return;
    skipped += (skipped.empty() ? "" : ", ") + std::to_string(n) + " " + (n == 1 ? one : many);
  };
  add(r.skipped_binary, "binary file", "binary files");
  add(r.skipped_invalid_utf8, "file not valid UTF-8", "files not valid UTF-8");
  add(r.skipped_changed, "file changed or unreadable since the walk", "files changed or unreadable since the walk");
  add(r.skipped_no_tokens, "document without a token", "documents without a token");
  add(r.blank_lines, "blank line", "blank lines");
  add(r.walk_empty_files, "empty file", "empty files");
  add(r.walk_symlinks, "symbolic link (not followed)", "symbolic links (not followed)");
  add(r.walk_special_files, "special file", "special files");
  add(r.walk_unreadable, "unreadable entry", "unreadable entries");
  out << "  skipped: " << (skipped.empty() ? "nothing" : skipped) << "\n";
  out << "  document lengths (tokens, eos included):\n";
  std::uint64_t most = 1;
  std::size_t first = r.length_histogram.size();
  for (std::size_t b = 0; b < r.length_histogram.size(); ++b) {
    most = std::max(most, r.length_histogram[b]);
    if (r.length_histogram[b] > 0) first = std::min(first, b);
  }
  for (std::size_t b = first; b < r.length_histogram.size(); ++b) {
    const std::uint64_t low = std::uint64_t{1} << b, high = (std::uint64_t{1} << (b + 1)) - 1;
    const std::uint64_t n = r.length_histogram[b];
    char row[96];
    std::snprintf(row, sizeof row, "  %10llu - %-10llu %10llu", static_cast<unsigned long long>(low),
                  static_cast<unsigned long long>(high), static_cast<unsigned long long>(n));
    const auto bar = static_cast<std::size_t>((40 * n + most - 1) / most);
    out << row << (bar > 0 ? "  " + std::string(bar, '#') : "") << "\n";
  }
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto options = std::make_shared<trainer::data::TokenizeOptions>();
  struct Paths {
    std::string tokenizer, input, output;  // as typed
  };
  auto paths = std::make_shared<Paths>();
  auto progress_every = std::make_shared<double>(0);  // 0: 1 s on a terminal, 10 s otherwise
  CLI::App* command = app.add_subcommand(
      "tokenize", "Tokenize text with a SentencePiece model into a Megatron indexed dataset (PREFIX.bin + PREFIX.idx)");
  command->add_option("--tokenizer", paths->tokenizer, "A SentencePiece model (.model), e.g. from spm_train")->required();
  command->add_option("--input", paths->input,
                      "A directory tree of UTF-8 text files (one file one document, sorted by path) "
                      "or a JSON-lines file (one object a line)")
      ->required();
  command->add_option("--jsonl-key", options->jsonl_key, "The key of a JSON line's text")->capture_default_str();
  command->add_option("--output", paths->output,
                      "Output prefix: PREFIX.bin and PREFIX.idx are written (existing ones replaced only at the end)")
      ->required();
  command->add_option("--threads", options->threads, "Encoding threads (default: every core)")->check(CLI::Range(1, 4096));
  command->add_flag("--whole-documents", options->whole_documents,
                    "Encode every document as one string, never in chunks of lines (the same ids, slower on long documents)");
  command->add_option("--progress-every", *progress_every,
                      "Seconds between progress reports on stderr (default: 1 on a terminal, 10 otherwise)")
      ->check(CLI::Range(0.05, 86400.0));
  command->callback([options, paths, progress_every] {
    options->tokenizer = paths->tokenizer;
    options->input = paths->input;
    options->output = paths->output;
    // On a terminal a bar rewritten in place every second; in a log a plain line every 10 s. Both
    // end with the run's totals.
    const bool tty = ::isatty(STDERR_FILENO) == 1;
    const double interval = *progress_every > 0 ? *progress_every : (tty ? 1.0 : 10.0);
    bool printed = false;  // a bar is on the terminal's line, not ended yet
    auto progress = [&](const TokenizeProgress& p) {
      if (tty) {
        std::cerr << "\r\033[K" << progress_bar(p) << std::flush;
        printed = true;
      } else {
        std::cerr << progress_line(p) << "\n";
      }
    };
    struct EndLine {
      const bool& printed;
      ~EndLine() {
        if (printed) std::cerr << "\n";
      }
    } end_line{printed};
    struct sigaction action {};
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGINT, &action, nullptr);
    ::sigaction(SIGTERM, &action, nullptr);
    options->stop = &g_stop;
    TokenizeResult result;
    try {
      result = trainer::data::tokenize_to_indexed(*options, progress, interval);
    } catch (const Error&) {
      if (!g_stop.load()) throw;
      if (printed) std::cerr << "\n";
      printed = false;
      std::cerr << "hdp: error: interrupted by signal " << static_cast<int>(g_signal) << "; nothing written under "
                << options->output.string() << "\n";
      throw CLI::RuntimeError(128 + static_cast<int>(g_signal));
    }
    if (tty) {
      std::cerr << "\r\033[K" << progress_bar(result.totals) << "\n";
      printed = false;
    } else {
      std::cerr << progress_line(result.totals) << "\n";
    }
    print_summary(result, paths->input, std::cout);
  });
}

// `hdp sample --tokenizer` (cli/sample_command.cc) runs these in hdp-tokenize, as SentencePiece
// cannot be loaded into hdp: `encode` reads UTF-8 text from --in and writes "EOS ID..." (the model's
// eos id, then the text's ids, space-separated) to --out; `decode` reads space-separated ids from
// --in and writes their text to --out.
void add_codec_commands(CLI::App& app) {
  struct Flags {
    std::string tokenizer, in, out;
  };
  for (const bool encode : {true, false}) {
    auto f = std::make_shared<Flags>();
    CLI::App* command = app.add_subcommand(encode ? "encode" : "decode",
                                           encode ? "Text to ids (for hdp sample)" : "Ids to text (for hdp sample)");
    command->group("");  // not listed: hdp sample's plumbing
    command->add_option("--tokenizer", f->tokenizer, "A SentencePiece model")->required();
    command->add_option("--in", f->in, "The input file")->required();
    command->add_option("--out", f->out, "The output file")->required();
    command->callback([f, encode] {
      const trainer::data::Tokenizer tokenizer(f->tokenizer);
      std::ifstream in(f->in, std::ios::binary);
      if (!in) throw InvalidArgument("cannot read " + quote_value(f->in));
      std::ofstream out(f->out, std::ios::binary | std::ios::trunc);
      if (!out) throw InvalidArgument("cannot write " + quote_value(f->out));
      if (encode) {
        const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::vector<std::int32_t> ids;
        tokenizer.encode(text, ids);
        out << tokenizer.eos_id();
        for (std::int32_t id : ids) out << ' ' << id;
        out << '\n';
      } else {
        std::vector<std::int32_t> ids;
        for (long long id; in >> id;) ids.push_back(static_cast<std::int32_t>(id));
        out << tokenizer.decode(ids);
      }
      if (!out.flush()) throw Error("cannot write " + quote_value(f->out));
    });
  }
}

}  // namespace hdp::cli
