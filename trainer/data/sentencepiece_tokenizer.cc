// File: trainer/data/sentencepiece_tokenizer.cc
//
// The one file of hdp that includes SentencePiece's headers: see sentencepiece_tokenizer.h.
#include "trainer/data/sentencepiece_tokenizer.h"

#include <algorithm>
#include <system_error>
#include <type_traits>

#include <sentencepiece_processor.h>

#include "common/error.h"
#include "common/text.h"

namespace hdp::trainer::data {

namespace fs = std::filesystem;

static_assert(std::is_same_v<int, std::int32_t>, "SentencePiece's ids are int");

struct Tokenizer::Impl {
  sentencepiece::SentencePieceProcessor processor;
};

Tokenizer::Tokenizer(const fs::path& model) : impl_(std::make_unique<Impl>()) {
  const std::string shown = quote_value(model.string());
  std::error_code ec;
  const fs::file_status status = fs::status(model, ec);
  if (status.type() == fs::file_type::not_found) throw InvalidArgument("tokenizer " + shown + " does not exist");
  if (status.type() == fs::file_type::directory) {
    throw InvalidArgument("tokenizer " + shown + " is a directory, not a SentencePiece .model file");
  }
  const sentencepiece::util::Status loaded = impl_->processor.Load(model.string());
  if (!loaded.ok()) {
    std::string why = loaded.ToString();
    std::replace(why.begin(), why.end(), '\n', ' ');
    while (!why.empty() && why.back() == ' ') why.pop_back();
    throw InvalidArgument("tokenizer " + shown + " does not load as a SentencePiece model: " + why);
  }
  lines_independent_ = check_lines_independent();
}

bool Tokenizer::check_lines_independent() const {
  const sentencepiece::SentencePieceProcessor& sp = impl_->processor;
  constexpr std::string_view kSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's whitespace mark
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    if (sp.IsControl(id) || sp.IsUnknown(id) || sp.IsByte(id) || sp.IsUnused(id)) continue;
    const std::string& piece = sp.IdToPiece(id);
    if (piece.find_first_of("\n\r") != std::string::npos) return false;
    const auto mark = piece.find(kSpace, 1);
    if (mark != std::string::npos) return false;
  }
  static const char* const kProbes[] = {
      "a\nb", "a \n b", "a\n\nb", "\na", "a\n", "\n", "\n\n", "a\r\nb", "a\r\n\r\nb", "a\t\n\tb",
      "hello world\nthe end", "x  \n  y", "1\n2", ".\n,", "\xe3\x80\x80\n\xe3\x80\x80" "a", "word\n word\n  word\n",
      "caf\xc3\xa9\nna\xc3\xafve", "a\n\n\n\nb\n"};
  std::vector<std::int32_t> whole, lines;
  for (const char* probe : kProbes) {
    const std::string_view text = probe;
    whole.clear();
    lines.clear();
    encode(text, whole);
    for (std::size_t begin = 0;;) {
      const std::size_t end = text.find('\n', begin);
      encode(text.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin), lines);
      if (end == std::string_view::npos) break;
      begin = end + 1;
    }
    if (whole != lines) return false;
  }
  return true;
}

Tokenizer::~Tokenizer() = default;

std::int64_t Tokenizer::vocab_size() const { return impl_->processor.GetPieceSize(); }

std::int32_t Tokenizer::eos_id() const { return impl_->processor.eos_id(); }

void Tokenizer::encode(std::string_view text, std::vector<std::int32_t>& ids) const {
  // Encode() replaces its output: straight into `ids` when that is empty, else through a scratch.
  thread_local std::vector<int> scratch;
  std::vector<int>& out = ids.empty() ? ids : scratch;
  const sentencepiece::util::Status status = impl_->processor.Encode(text, &out);
  if (!status.ok()) throw Error("SentencePiece could not encode a document: " + status.ToString());
  if (&out == &scratch) ids.insert(ids.end(), scratch.begin(), scratch.end());
}

std::string Tokenizer::decode(const std::vector<std::int32_t>& ids) const {
  const std::int64_t vocab = vocab_size();
  for (std::int32_t id : ids) {
    if (id < 0 || id >= vocab) {
      throw InvalidArgument("token " + std::to_string(id) + " is outside the tokenizer's vocabulary of " + std::to_string(vocab));
    }
  }
  std::string text;
  const std::vector<int> pieces(ids.begin(), ids.end());
  const sentencepiece::util::Status status = impl_->processor.Decode(pieces, &text);
  if (!status.ok()) throw Error("SentencePiece could not decode: " + status.ToString());
  return text;
}

void Tokenizer::encode_document(std::string_view text, std::vector<std::int32_t>& ids, bool whole) const {
  constexpr std::size_t kChunkBytes = 1024;  // measured: 1 KiB chunks 2.9x whole documents, 4 KiB 2.6x
  if (whole || !lines_independent_ || text.size() <= kChunkBytes) {
    encode(text, ids);
    return;
  }
  // Chunks end after the first newline at or past kChunkBytes from their start.
  std::size_t begin = 0;
  while (begin < text.size()) {
    std::size_t end = text.size();
    if (text.size() - begin > kChunkBytes) {
      const std::size_t nl = text.find('\n', begin + kChunkBytes);
      if (nl != std::string_view::npos) end = nl + 1;
    }
    encode(text.substr(begin, end - begin), ids);
    begin = end;
  }
}

}  // namespace hdp::trainer::data
