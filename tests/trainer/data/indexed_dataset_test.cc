// Megatron indexed datasets (trainer/data/indexed_dataset.h) written by an independent Python
// writer (write_indexed.py, from the format's description): hdp reads the same documents and
// tokens, cut into context-sized pieces, for every integer dtype; every malformed pair of files is
// refused naming the file and the first bad offset; a token id outside the vocabulary stops the
// read naming the byte.
#include "trainer/data/indexed_dataset.h"

#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tests/support/child_process.h"
#include "tests/support/temp_dir.h"

namespace hdp::trainer::data {
namespace {

namespace fs = std::filesystem;
using Documents = std::vector<std::vector<std::vector<std::int64_t>>>;  // documents of sequences of tokens

// Writes `docs` as PREFIX.{idx,bin} with the Python writer; the prefix.
fs::path write(const fs::path& dir, const std::string& name, const Documents& docs, int code) {
  const fs::path prefix = dir / name;
  const fs::path input = dir / (name + ".json");
  std::ofstream(input) << nlohmann::json(docs).dump();
  const auto r = hdp::test::run_command(
      {"/bin/sh", "-c", "/usr/bin/python3 '" + std::string(HDP_SOURCE_DIR) + "/tests/trainer/data/write_indexed.py' '" +
                            prefix.string() + "' " + std::to_string(code) + " < '" + input.string() + "'"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return prefix;
}

std::string open_error(const fs::path& prefix, std::int64_t context = 8, std::int64_t vocab = 1000) {
  try {
    IndexedDataset d(prefix, context, vocab);
    return "";
  } catch (const InvalidArgument& e) {
    return e.what();
  }
}

void patch(const fs::path& path, std::size_t offset, const std::string& bytes) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(IndexedDataset, AnIndependentWritersDocumentsReadBackAsTheSamePiecesForEveryDtype) {
  hdp::test::TempDir dir;
  const Documents docs = {{{1, 2, 3}}, {{4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}},
                          {{21}, {22, 23}}, {{120, 0, 127}}};
  for (const int code : {1, 2, 3, 4, 5, 8}) {
    const fs::path prefix = write(dir.path(), "d" + std::to_string(code), docs, code);
    ASSERT_TRUE(IndexedDataset::exists(prefix));
    const IndexedDataset d(prefix, 8, 128);
    EXPECT_EQ(d.document_count(), 4u) << code;
    EXPECT_EQ(d.sequence_count(), 5u);
    EXPECT_EQ(d.token_count(), 3 + 17 + 1 + 2 + 3);
    // Each sequence cut into pieces of at most 8 tokens, in order.
    std::vector<std::vector<std::int32_t>> expected;
    for (const auto& doc : docs) {
      for (const auto& seq : doc) {
        for (std::size_t at = 0; at < seq.size(); at += 8) {
          expected.emplace_back(seq.begin() + static_cast<std::ptrdiff_t>(at),
                                seq.begin() + static_cast<std::ptrdiff_t>(std::min(seq.size(), at + 8)));
        }
      }
    }
    ASSERT_EQ(d.piece_count(), expected.size()) << code;
    std::vector<std::int32_t> tokens;
    std::string why;
    for (std::uint64_t p = 0; p < d.piece_count(); ++p) {
      ASSERT_EQ(d.piece_length(p), static_cast<std::int64_t>(expected[p].size())) << "code " << code << " piece " << p;
      ASSERT_TRUE(d.read(p, d.piece_length(p), tokens, why)) << why;
      EXPECT_EQ(tokens, expected[p]) << "code " << code << " piece " << p;
    }
    ASSERT_TRUE(d.read(1, 3, tokens, why));
    EXPECT_EQ(tokens, (std::vector<std::int32_t>{4, 5, 6})) << "a prefix of a piece";
  }
}

// The fingerprint saved in checkpoints (piece_source.h): the same files opened twice give the same
// one; another context, a token changed near the start of the .bin, or other documents change it.
TEST(IndexedDataset, TheFingerprintFollowsTheFilesAndTheContext) {
  hdp::test::TempDir dir;
  const Documents docs = {{{1, 2, 3, 4, 5}}, {{6, 7}, {8, 9, 10}}};
  const fs::path a = write(dir.path(), "a", docs, 4);
  const std::string first = IndexedDataset(a, 8, 1000).fingerprint();
  EXPECT_EQ(first.size(), 16u);
  EXPECT_EQ(IndexedDataset(a, 8, 1000).fingerprint(), first);
  EXPECT_NE(IndexedDataset(a, 4, 1000).fingerprint(), first) << "other pieces";
  const fs::path b = write(dir.path(), "b", docs, 4);
  EXPECT_EQ(IndexedDataset(b, 8, 1000).fingerprint(), first) << "the same bytes under another name";
  patch(fs::path(b.string() + ".bin"), 0, std::string("\x09", 1));
  EXPECT_NE(IndexedDataset(b, 8, 1000).fingerprint(), first);
  const fs::path c = write(dir.path(), "c", {{{1, 2, 3, 4, 5}}}, 4);
  EXPECT_NE(IndexedDataset(c, 8, 1000).fingerprint(), first);
}

TEST(IndexedDataset, EveryMalformedPairOfFilesIsRefusedNamingTheFileAndTheOffset) {
  hdp::test::TempDir dir;
  const Documents docs = {{{1, 2, 3}}, {{4, 5}}};
  int n = 0;
  auto fresh = [&] { return write(dir.path(), "bad" + std::to_string(n++), docs, 8); };
  struct Case {
    std::function<void(const fs::path&)> damage;
    std::string file, reason;
  };
  const std::vector<Case> cases = {
      {[](const fs::path& p) { patch(p.string() + ".idx", 0, "X"); }, ".idx", "MMIDIDX magic (offset 0)"},
      {[](const fs::path& p) { patch(p.string() + ".idx", 9, std::string("\x02", 1)); }, ".idx", "version 2 at offset 9"},
      {[](const fs::path& p) { patch(p.string() + ".idx", 17, std::string("\x07", 1)); }, ".idx", "dtype code 7 at offset 17"},
      {[](const fs::path& p) { fs::resize_file(p.string() + ".idx", fs::file_size(p.string() + ".idx") - 1); }, ".idx",
       "the file is truncated or its counts are wrong"},
      {[](const fs::path& p) { fs::resize_file(p.string() + ".bin", 8); }, ".bin", "past the end of the 8-byte file"},
      // The second pointer (at 34 + 4*2 + 8) says 2 bytes instead of 6.
      {[](const fs::path& p) { patch(p.string() + ".idx", 50, std::string("\x02", 1)); }, ".idx",
       "sequence 1 starts at .bin byte 2, expected 6 (offset 50)"},
      // The first length (at 34) negative.
      {[](const fs::path& p) { patch(p.string() + ".idx", 34, std::string("\xff\xff\xff\xff", 4)); }, ".idx",
       "sequence 0 has length -1 (offset 34)"},
      // The document index's last entry (at 34 + 24 + 16) is 1, not 2.
      {[](const fs::path& p) { patch(p.string() + ".idx", 74, std::string("\x01", 1)); }, ".idx",
       "document index entry 2 is 1 (offset 74)"},
  };
  for (const auto& c : cases) {
    const fs::path prefix = fresh();
    c.damage(prefix);
    const std::string error = open_error(prefix);
    EXPECT_NE(error.find(prefix.string() + c.file), std::string::npos) << error;
    EXPECT_NE(error.find(c.reason), std::string::npos) << error;
  }
  // A token id outside the vocabulary: found when its piece is read, naming the byte.
  const fs::path prefix = fresh();
  const IndexedDataset d(prefix, 8, 5);
  std::vector<std::int32_t> tokens;
  std::string why;
  EXPECT_TRUE(d.read(0, 3, tokens, why));
  try {
    d.read(1, 2, tokens, why);
    ADD_FAILURE() << "token 5 in a vocabulary of 5 was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("token id 5 at byte 8 (sequence 1)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hdp::trainer::data
