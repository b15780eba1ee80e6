// `hdp tokenize` end to end (trainer/data/tokenize.h, cli/tokenize_command.cc): a SentencePiece model
// trained here by spm_train, a directory tree and a JSON-lines file tokenized by the built `hdp`, read
// back by hdp's IndexedDataset and compared, document by document, with spm_encode's ids of the same
// text plus the eos id; 1 and 2 threads, and chunks of lines against whole documents, give
// byte-identical files; a model that keeps newlines encodes whole documents that decode back exactly;
// progress is plain lines in a log and a bar on a terminal; bad inputs exit 2 with one line naming
// the file; and the writer (indexed_writer.h) round-trips through IndexedDataset.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "tests/support/child_process.h"
#include "tests/support/temp_dir.h"
#include "trainer/data/indexed_dataset.h"
#include "trainer/data/indexed_writer.h"

namespace {

namespace fs = std::filesystem;
using hdp::trainer::data::IndexedDataset;
using hdp::trainer::data::IndexedDatasetWriter;

constexpr std::int64_t kVocab = 300;
constexpr std::int32_t kEos = 2;  // spm_train's default

std::string hdp_bin() {
  const char* dir = std::getenv("HDP_BIN_DIR");
  return std::string(dir ? dir : "bin") + "/hdp";
}

void write_file(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  ASSERT_TRUE(out.good()) << path;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Deterministic text: words (ASCII, accented, CJK) in sentences and lines.
class TextMaker {
 public:
  explicit TextMaker(std::uint64_t seed) : state_(seed * 2862933555777941757ULL + 3037000493ULL) {}
  std::uint64_t next() {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return state_ >> 33;
  }
  std::string text(int lines, int words_per_line) {
    static const char* kWords[] = {"the", "elastic", "trainer", "hybrid", "data", "parallel", "sequence",
                                   "token", "model", "gradient", "checkpoint", "rank", "node", "ring",
                                   "attention", "café", "naïve", "über", "日本", "語", "données", "x",
                                   "a", "of", "and", "to", "in", "is", "it", "42", "3.14", "hello,", "world!"};
    std::string out;
    for (int l = 0; l < lines; ++l) {
      const int n = 1 + static_cast<int>(next() % static_cast<std::uint64_t>(words_per_line));
      if (next() % 7 == 0) out += "  ";  // leading spaces
      for (int w = 0; w < n; ++w) {
        if (w > 0) out += next() % 11 == 0 ? "\t" : " ";
        out += kWords[next() % std::size(kWords)];
      }
      out += next() % 5 == 0 ? ".\n\n" : "\n";
    }
    return out;
  }

 private:
  std::uint64_t state_;
};

// A model and the tools, shared by the cases of one process.
class Tokenize : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new hdp::test::TempDir("hdp-tokenize");
    TextMaker maker(1);
    write_file(root() / "train.txt", maker.text(600, 12));
    for (const char* tool : {"/usr/bin/spm_train", "/usr/bin/spm_encode"}) {
      ASSERT_TRUE(fs::exists(tool)) << tool << " is missing: install Debian's package sentencepiece (scripts/install-deps.sh)";
    }
    const auto trained = hdp::test::run_command(
        {"spm_train", "--input=" + (root() / "train.txt").string(), "--model_prefix=" + (root() / "m").string(),
         "--vocab_size=" + std::to_string(kVocab), "--model_type=bpe", "--minloglevel=2", "--random_seed=1"});
    ASSERT_EQ(trained.exit_code, 0) << trained.err;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  static fs::path root() { return dir_->path(); }
  static fs::path model() { return root() / "m.model"; }

  // spm_encode's ids of the file's text (every line's, in order) plus the eos id.
  static std::vector<std::int32_t> expected_ids(const fs::path& text_file) {
    const auto encoded = hdp::test::run_command(
        {"spm_encode", "--model=" + model().string(), "--output_format=id", "--input=" + text_file.string()});
    EXPECT_EQ(encoded.exit_code, 0) << encoded.err;
    std::vector<std::int32_t> ids;
    std::istringstream in(encoded.out);
    std::int32_t id;
    while (in >> id) ids.push_back(id);
    ids.push_back(kEos);
    return ids;
  }

  static std::vector<std::vector<std::int32_t>> read_back(const fs::path& prefix) {
    const IndexedDataset dataset(prefix, std::int64_t{1} << 30, kVocab);
    std::vector<std::vector<std::int32_t>> docs;
    EXPECT_EQ(dataset.sequence_count(), dataset.document_count());
    for (std::uint64_t p = 0; p < dataset.piece_count(); ++p) {
      std::vector<std::int32_t> tokens;
      std::string why;
      EXPECT_TRUE(dataset.read(p, dataset.piece_length(p), tokens, why)) << why;
      docs.push_back(std::move(tokens));
    }
    return docs;
  }

  static hdp::test::CommandResult tokenize(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {hdp_bin(), "tokenize"};
    argv.insert(argv.end(), args.begin(), args.end());
    return hdp::test::run_command(argv, {}, std::chrono::seconds(60));
  }

  // The documents of the tree test: path -> text.
  static std::vector<std::pair<std::string, std::string>> documents(int count, int lines) {
    TextMaker maker(7);
    std::vector<std::pair<std::string, std::string>> docs;
    for (int i = 0; i < count; ++i) {
      char name[64];
      std::snprintf(name, sizeof name, "%s/doc%03d.txt", i % 3 == 0 ? "a" : (i % 3 == 1 ? "b/c" : "b"), i);
      std::string text = maker.text(1 + static_cast<int>(maker.next() % static_cast<std::uint64_t>(lines)), 14);
      if (i == 4) text = "x";                                     // one token and eos
      if (i == 5) text.pop_back();                                // no final newline
      if (i == 6) text = "\xef\xbb\xbf" + text;                   // a byte-order mark
      docs.emplace_back(name, text);
    }
    std::sort(docs.begin(), docs.end());  // the walk's order: bytewise by relative path ("b/" < "b/c/")
    return docs;
  }

  static hdp::test::TempDir* dir_;
};

hdp::test::TempDir* Tokenize::dir_ = nullptr;

TEST_F(Tokenize, DirectoryMatchesSpmEncodeAndSkipsWhatTheCorpusSkips) {
  const fs::path tree = root() / "tree";
  const auto docs = documents(40, 30);
  for (const auto& [path, text] : docs) write_file(tree / path, text);
  // Skipped, as the training corpus skips them: empty, binary, a link; and text that is not UTF-8.
  write_file(tree / "a/empty.txt", "");
  write_file(tree / "a/binary.bin", std::string("ELF\0\1\2 data", 12));
  write_file(tree / "b/latin1.txt", "caf\xe9 au lait\n");
  fs::create_symlink(tree / "a/doc000.txt", tree / "a/link.txt");

  const fs::path out = root() / "tree_out";
  const auto run = tokenize({"--tokenizer", model().string(), "--input", tree.string(), "--output", out.string()});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("documents 40,"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("1 binary file,"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("1 file not valid UTF-8"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("1 empty file,"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("1 symbolic link "), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("document lengths"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("encoded in chunks of whole lines"), std::string::npos) << run.out;

  const auto got = read_back(out);
  ASSERT_EQ(got.size(), docs.size());
  for (std::size_t d = 0; d < docs.size(); ++d) {
    EXPECT_EQ(got[d], expected_ids(tree / docs[d].first)) << "document " << d << " " << docs[d].first;
  }
  // uint16 ids for a vocabulary of 300 (dtype code 8 at offset 17).
  EXPECT_EQ(static_cast<unsigned char>(read_file(out.string() + ".idx").at(17)), 8);
  // Nothing temporary is left beside the dataset.
  for (const auto& entry : fs::directory_iterator(root())) {
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << entry.path();
  }
}

TEST_F(Tokenize, JsonLinesMatchSpmEncodeInLineOrder) {
  const auto docs = documents(25, 20);
  const fs::path texts = root() / "jsonl_texts";
  std::string jsonl;
  for (std::size_t d = 0; d < docs.size(); ++d) {
    write_file(texts / (std::to_string(d) + ".txt"), docs[d].second);
    // Another key before the text; a blank line in the middle; CRLF on one line.
    jsonl += nlohmann::json{{"id", d}, {"body", docs[d].second}}.dump() + (d == 3 ? "\r\n" : "\n");
    if (d == 10) jsonl += "\n";
  }
  const fs::path input = root() / "docs.jsonl";
  write_file(input, jsonl);
  const fs::path out = root() / "jsonl_out";
  const auto run = tokenize({"--tokenizer", model().string(), "--input", input.string(), "--jsonl-key", "body",
                             "--output", out.string(), "--threads", "2"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("1 blank line\n"), std::string::npos) << run.out;
  const auto got = read_back(out);
  ASSERT_EQ(got.size(), docs.size());
  for (std::size_t d = 0; d < docs.size(); ++d) {
    EXPECT_EQ(got[d], expected_ids(texts / (std::to_string(d) + ".txt"))) << "line " << d + 1;
  }
}

// Several batches of each kind of input (a batch is about 1 MiB), so that two threads interleave.
TEST_F(Tokenize, OneAndTwoThreadsWriteIdenticalFiles) {
  TextMaker maker(11);
  const fs::path tree = root() / "big_tree";
  std::string jsonl;
  std::int64_t bytes = 0;
  for (int i = 0; bytes < (std::int64_t{5} << 19); ++i) {  // 2.5 MiB
    const std::string text = maker.text(20 + static_cast<int>(maker.next() % 200), 14);
    bytes += static_cast<std::int64_t>(text.size());
    write_file(tree / ("d" + std::to_string(i % 7)) / (std::to_string(i) + ".txt"), text);
    jsonl += nlohmann::json{{"text", text}}.dump() + "\n";
  }
  write_file(root() / "big.jsonl", jsonl);
  ASSERT_GT(jsonl.size(), std::size_t{2} << 20);  // three batches at least
  // 1 thread, 2 threads, and 2 threads encoding every document whole (the model's lines are
  // independent, so long documents are otherwise encoded in chunks of lines: the same ids).
  const std::vector<std::vector<std::string>> variants = {{"--threads", "1"}, {"--threads", "2"},
                                                          {"--threads", "2", "--whole-documents"}};
  std::string first_bin;
  for (const fs::path& input : {tree, root() / "big.jsonl"}) {
    std::vector<std::pair<std::string, std::string>> files;
    for (std::size_t v = 0; v < variants.size(); ++v) {
      const fs::path out = root() / ("variant" + std::to_string(v));
      std::vector<std::string> args = {"--tokenizer", model().string(), "--input", input.string(), "--output", out.string()};
      args.insert(args.end(), variants[v].begin(), variants[v].end());
      const auto run = tokenize(args);
      ASSERT_EQ(run.exit_code, 0) << run.err;
      EXPECT_NE(run.out.find(v == 2 ? "encoded as whole documents" : "encoded in chunks of whole lines"), std::string::npos)
          << run.out;
      files.emplace_back(read_file(out.string() + ".bin"), read_file(out.string() + ".idx"));
    }
    EXPECT_GT(files[0].first.size(), std::size_t{100000}) << input;
    for (std::size_t v = 1; v < variants.size(); ++v) {
      EXPECT_TRUE(files[0].first == files[v].first) << input << ": .bin differs with " << variants[v].back();
      EXPECT_TRUE(files[0].second == files[v].second) << input << ": .idx differs with " << variants[v].back();
    }
    // The same documents from the tree and from the JSON lines (the tree's order is its paths').
    if (first_bin.empty()) {
      first_bin = files[0].first;
    } else {
      EXPECT_EQ(first_bin.size(), files[0].first.size());
    }
  }
}

// A model that keeps newlines (identity normaliser, byte fallback, as LLaMA's): documents are
// encoded whole, and their ids decode back to the exact text, newlines and indentation included.
TEST_F(Tokenize, ModelThatKeepsNewlinesEncodesWholeDocuments) {
  const auto trained = hdp::test::run_command(
      {"spm_train", "--input=" + (root() / "train.txt").string(), "--model_prefix=" + (root() / "identity").string(),
       "--vocab_size=400", "--model_type=bpe", "--normalization_rule_name=identity", "--remove_extra_whitespaces=false",
       "--byte_fallback=true", "--minloglevel=2", "--random_seed=1"});
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  TextMaker maker(5);
  std::vector<std::string> texts;
  std::string jsonl;
  for (int d = 0; d < 6; ++d) {
    texts.push_back(maker.text(3 + d * 40, 10));  // up to ~10 KB: longer than a chunk
    jsonl += nlohmann::json{{"text", texts.back()}}.dump() + "\n";
  }
  write_file(root() / "identity.jsonl", jsonl);
  const fs::path out = root() / "identity_out";
  const auto run = tokenize({"--tokenizer", (root() / "identity.model").string(), "--input",
                             (root() / "identity.jsonl").string(), "--output", out.string()});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("encoded as whole documents"), std::string::npos) << run.out;
  const IndexedDataset dataset(out, std::int64_t{1} << 30, 400);
  ASSERT_EQ(dataset.document_count(), texts.size());
  std::string id_lines, expected;
  for (std::uint64_t d = 0; d < texts.size(); ++d) {
    std::vector<std::int32_t> ids;
    std::string why;
    ASSERT_TRUE(dataset.read(d, dataset.piece_length(d), ids, why)) << why;
    ASSERT_EQ(ids.back(), kEos);
    ids.pop_back();
    for (std::size_t i = 0; i < ids.size(); ++i) id_lines += (i ? " " : "") + std::to_string(ids[i]);
    id_lines += "\n";
    expected += texts[d] + "\n";  // spm_decode ends each decoded line with a newline
  }
  write_file(root() / "identity_ids.txt", id_lines);
  const auto decoded = hdp::test::run_command({"spm_decode", "--model=" + (root() / "identity.model").string(),
                                               "--input_format=id", "--input=" + (root() / "identity_ids.txt").string()});
  ASSERT_EQ(decoded.exit_code, 0) << decoded.err;
  EXPECT_EQ(decoded.out, expected);
}

// Progress on stderr. In a log (not a terminal): plain lines "tokenize: 42.0%, ..." every
// --progress-every seconds, the last the run's totals at 100%; no bar, carriage return or escape.
// On a terminal (a pseudo-terminal from util-linux's `script`): a bar "[####....] 42%  ... tok/s"
// rewritten in place, ending at 100%.
TEST_F(Tokenize, ProgressIsPlainLinesInALogAndABarOnATerminal) {
  TextMaker maker(11);
  std::string jsonl;
  while (jsonl.size() < (std::size_t{3} << 20)) jsonl += nlohmann::json{{"text", maker.text(100, 12)}}.dump() + "\n";
  const fs::path input = root() / "progress.jsonl";
  write_file(input, jsonl);
  const std::vector<std::string> args = {"--tokenizer", model().string(), "--input",   input.string(), "--output",
                                         (root() / "progress_out").string(), "--threads", "1", "--progress-every", "0.05"};
  const auto run = tokenize(args);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err.find_first_of("\r\033["), std::string::npos) << run.err;
  std::istringstream lines(run.err);
  std::vector<double> percents;
  for (std::string line; std::getline(lines, line);) {
    ASSERT_EQ(line.rfind("tokenize: ", 0), 0u) << line;
    percents.push_back(std::stod(line.substr(10)));
    EXPECT_NE(line.find(" tokens/s, "), std::string::npos) << line;
  }
  std::printf("%zu progress lines over %zu bytes\n", percents.size(), jsonl.size());
  ASSERT_GE(percents.size(), 2u) << "no periodic line before the totals:\n" << run.err;
  EXPECT_TRUE(std::is_sorted(percents.begin(), percents.end())) << run.err;
  EXPECT_EQ(percents.back(), 100.0) << run.err;

  if (!fs::exists("/usr/bin/script")) GTEST_SKIP() << "util-linux's script is missing: the terminal's bar is not checked";
  std::string command = "'" + hdp_bin() + "' tokenize";
  for (const std::string& arg : args) command += " '" + arg + "'";
  const auto terminal = hdp::test::run_command({"/usr/bin/script", "-q", "-e", "-c", command, "/dev/null"}, {},
                                               std::chrono::seconds(60));
  ASSERT_EQ(terminal.exit_code, 0) << terminal.out << terminal.err;
  EXPECT_NE(terminal.out.find("\r\033[K[#"), std::string::npos) << terminal.out;
  EXPECT_NE(terminal.out.find("] 100%  "), std::string::npos) << terminal.out;
  EXPECT_NE(terminal.out.find(" tok/s  "), std::string::npos) << terminal.out;
  EXPECT_EQ(terminal.out.find("tokenize: "), std::string::npos) << "a log's line on a terminal:\n" << terminal.out;
}

// Each bad input: exit 2, exactly one line "hdp: error: ..." naming the file (and the line), and
// nothing under the output's names.
// hdp-tokenize's encode and decode (what `hdp sample --tokenizer` runs): the ids of a text are
// spm_encode's, led by the eos id, and decode gives the text back (words of the training text and
// single spaces, which the model's normaliser keeps).
TEST_F(Tokenize, EncodeAndDecodeForSampleRoundTrip) {
  // Words of the model's own training text (a letter it never saw would decode as <unk>).
  std::string text;
  {
    std::ifstream train(root() / "train.txt");
    std::string word;
    for (int i = 0; i < 8 && train >> word; ++i) text += (text.empty() ? "" : " ") + word;
  }
  ASSERT_FALSE(text.empty());
  const fs::path in = root() / "codec.txt", ids = root() / "codec.ids", back = root() / "codec.back";
  std::ofstream(in) << text;
  const std::string helper = std::string(std::getenv("HDP_BIN_DIR")) + "/hdp-tokenize";
  auto r = hdp::test::run_command({helper, "encode", "--tokenizer", model().string(), "--in", in.string(), "--out", ids.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream id_file(ids);
  std::vector<std::int32_t> got;
  for (std::int32_t id; id_file >> id;) got.push_back(id);
  std::vector<std::int32_t> want = expected_ids(in);  // spm_encode's, then the eos
  want.insert(want.begin(), want.back());
  want.pop_back();
  EXPECT_EQ(got, want);
  std::ofstream(ids, std::ios::trunc) << [&] {
    std::string list;
    for (std::size_t i = 1; i < got.size(); ++i) list += std::to_string(got[i]) + " ";
    return list;
  }();
  r = hdp::test::run_command({helper, "decode", "--tokenizer", model().string(), "--in", ids.string(), "--out", back.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream back_file(back);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(back_file), {}), text);
  std::ofstream(ids, std::ios::trunc) << "999999";
  r = hdp::test::run_command({helper, "decode", "--tokenizer", model().string(), "--in", ids.string(), "--out", back.string()});
  EXPECT_EQ(r.exit_code, 2) << "an id outside the vocabulary: " << r.err;
}

TEST_F(Tokenize, BadInputsExitTwoWithOneLineNamingTheFile) {
  write_file(root() / "ok.jsonl", "{\"text\": \"hello world\"}\n");
  write_file(root() / "malformed.jsonl", "{\"text\": \"one\"}\n{\"text\": \"two\"}\n{\"text\": tree}\n{\"text\": \"four\"}\n");
  write_file(root() / "nokey.jsonl", "{\"text\": \"one\"}\n{\"body\": \"two\"}\n");
  write_file(root() / "nostring.jsonl", "{\"text\": 42}\n");
  write_file(root() / "notamodel.model", "this is not a SentencePiece model\n");
  const auto noeos = hdp::test::run_command(
      {"spm_train", "--input=" + (root() / "train.txt").string(), "--model_prefix=" + (root() / "noeos").string(),
       "--vocab_size=" + std::to_string(kVocab), "--model_type=bpe", "--minloglevel=2", "--eos_id=-1"});
  ASSERT_EQ(noeos.exit_code, 0) << noeos.err;

  struct Case {
    std::string name, tokenizer, input, output, must_contain;
  };
  const std::string m = model().string(), ok = (root() / "ok.jsonl").string(), out = (root() / "bad_out").string();
  const std::vector<Case> cases = {
      {"missing input", m, (root() / "nosuch.jsonl").string(), out, "nosuch.jsonl' does not exist"},
      {"malformed line", m, (root() / "malformed.jsonl").string(), out, "malformed.jsonl' line 3 (byte offset 32): not JSON"},
      {"missing key", m, (root() / "nokey.jsonl").string(), out, "nokey.jsonl' line 2 (byte offset 16): no key 'text'"},
      {"not a string", m, (root() / "nostring.jsonl").string(), out, "nostring.jsonl' line 1 (byte offset 0): the value of 'text' is a JSON number, not a string"},
      {"bad tokenizer", (root() / "notamodel.model").string(), ok, out, "notamodel.model' does not load as a SentencePiece model"},
      {"missing tokenizer", (root() / "nosuch.model").string(), ok, out, "nosuch.model' does not exist"},
      {"tokenizer without eos", (root() / "noeos.model").string(), ok, out, "noeos.model' has no end-of-sequence piece"},
      {"missing output directory", m, ok, (root() / "nosuchdir" / "out").string(), "directory '" + (root() / "nosuchdir").string() + "' does not exist"},
  };
  for (const Case& c : cases) {
    const auto run = tokenize({"--tokenizer", c.tokenizer, "--input", c.input, "--output", c.output});
    EXPECT_EQ(run.exit_code, 2) << c.name << ": " << run.err;
    EXPECT_EQ(run.err.rfind("hdp: error: ", 0), 0u) << c.name << ": " << run.err;
    EXPECT_EQ(hdp::test::line_count(run.err), 1) << c.name << ": " << run.err;
    EXPECT_NE(run.err.find(c.must_contain), std::string::npos) << c.name << ": " << run.err;
    EXPECT_FALSE(fs::exists(out + ".bin") || fs::exists(out + ".idx")) << c.name;
  }
  for (const auto& entry : fs::directory_iterator(root())) {
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << entry.path();
  }
  // A usage mistake is exit 2 too, and --help is the helper's.
  const auto missing_flag = tokenize({"--input", ok});
  EXPECT_EQ(missing_flag.exit_code, 2) << missing_flag.err;
  const auto help = tokenize({"--help"});
  EXPECT_EQ(help.exit_code, 0) << help.err;
  EXPECT_NE(help.out.find("--jsonl-key"), std::string::npos) << help.out;
}

// The writer alone: documents in, the same documents out through IndexedDataset, in both dtypes;
// the layout of formats.md §1; an unfinished writer leaves nothing; a second run replaces the first.
TEST(IndexedDatasetWriter, RoundTripsThroughTheReader) {
  hdp::test::TempDir dir("hdp-indexed-writer");
  TextMaker random(3);
  for (const std::int64_t vocab : {std::int64_t{65536}, std::int64_t{70000}}) {
    const fs::path prefix = dir.path() / ("v" + std::to_string(vocab));
    std::vector<std::vector<std::int32_t>> docs;
    for (int d = 0; d < 300; ++d) {
      // Document 7 crosses the writer's 4 MiB buffer several times.
      std::vector<std::int32_t> doc(d == 7 ? 3000000 : 1 + random.next() % 700);
      for (auto& id : doc) id = static_cast<std::int32_t>(random.next() % static_cast<std::uint64_t>(vocab));
      doc.back() = static_cast<std::int32_t>(vocab - 1);
      docs.push_back(std::move(doc));
    }
    {
      IndexedDatasetWriter writer(prefix, vocab);
      for (const auto& doc : docs) writer.add_document(doc);
      EXPECT_FALSE(IndexedDataset::exists(prefix));  // nothing under the final names before finish()
      writer.finish();
      EXPECT_EQ(writer.documents(), docs.size());
    }
    const std::string idx = read_file(prefix.string() + ".idx");
    const std::size_t item = vocab <= 65536 ? 2 : 4;
    EXPECT_EQ(static_cast<unsigned char>(idx.at(17)), vocab <= 65536 ? 8 : 4);
    EXPECT_EQ(idx.size(), 34 + 12 * docs.size() + 8 * (docs.size() + 1));
    std::size_t tokens = 0;
    for (const auto& doc : docs) tokens += doc.size();
    EXPECT_EQ(fs::file_size(prefix.string() + ".bin"), tokens * item);

    const IndexedDataset dataset(prefix, std::int64_t{1} << 30, vocab);
    ASSERT_EQ(dataset.document_count(), docs.size());
    ASSERT_EQ(dataset.piece_count(), docs.size());
    for (std::uint64_t p = 0; p < dataset.piece_count(); ++p) {
      std::vector<std::int32_t> got;
      std::string why;
      ASSERT_TRUE(dataset.read(p, dataset.piece_length(p), got, why)) << why;
      ASSERT_EQ(got, docs[p]) << "document " << p;
    }
  }
  // Unfinished: no file at all, final or temporary.
  const fs::path unfinished = dir.path() / "unfinished";
  {
    IndexedDatasetWriter writer(unfinished, 100);
    writer.add_document(std::vector<std::int32_t>{1, 2, 3});
  }
  EXPECT_FALSE(fs::exists(unfinished.string() + ".bin") || fs::exists(unfinished.string() + ".idx"));
  // Replacing: the second dataset's documents under the same prefix.
  const fs::path again = dir.path() / "v65536";
  {
    IndexedDatasetWriter writer(again, 65536);
    writer.add_document(std::vector<std::int32_t>{5, 6});
    writer.finish();
  }
  const IndexedDataset replaced(again, 16, 65536);
  EXPECT_EQ(replaced.document_count(), 1u);
  EXPECT_EQ(replaced.token_count(), 2);
  std::size_t left = 0;
  for (const auto& entry : fs::directory_iterator(dir.path())) left += entry.path().string().find(".tmp.") != std::string::npos;
  EXPECT_EQ(left, 0u);
  // Bad uses: no token, an id outside the vocabulary, a prefix that names a directory.
  IndexedDatasetWriter writer(dir.path() / "bad", 10);
  EXPECT_THROW(writer.add_document(std::vector<std::int32_t>{}), hdp::InvalidArgument);
  EXPECT_THROW(writer.add_document(std::vector<std::int32_t>{10}), hdp::InvalidArgument);
  EXPECT_THROW(IndexedDatasetWriter(dir.path().string() + "/", 10), hdp::InvalidArgument);
}

}  // namespace
