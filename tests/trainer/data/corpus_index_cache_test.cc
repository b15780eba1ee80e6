// Tests of trainer/data/corpus_index_cache.h: a corpus indexed with CorpusOptions::index_cache_dir
// keeps its index there, and the next process reads it instead of walking and gets the same corpus
// (documents, pieces, fingerprint, bytes read); the kept index is the node's view of the tree until
// the directory goes; a file garbled in any part, or taken for another root or other options, is
// refused with its reason, the tree is walked and the file written again; a directory that cannot
// take the file costs only the keeping. And the time to read /usr/include's index against its walk.
#include "trainer/data/corpus_index_cache.h"

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "checkpoint/checksum.h"
#include "common/error.h"
#include "tests/support/temp_dir.h"
#include "tests/trainer/data/data_tree.h"
#include "trainer/data/corpus.h"

namespace hdp::trainer::data {
namespace {

namespace fs = std::filesystem;
using hdp::test::make_text_tree;
using hdp::test::TempDir;
using hdp::test::write_file;
using ::testing::HasSubstr;

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

CorpusOptions kept_in(const fs::path& dir, std::int64_t context = 64) {
  CorpusOptions options;
  options.context = context;
  options.index_cache_dir = dir;
  return options;
}

// Every document, piece and byte of `a` and `b` agree.
void expect_same_corpus(const Corpus& a, const Corpus& b) {
  ASSERT_EQ(a.document_count(), b.document_count());
  for (std::uint64_t d = 0; d < a.document_count(); ++d) {
    EXPECT_EQ(a.document_path(d), b.document_path(d)) << d;
    EXPECT_EQ(a.document_size(d), b.document_size(d)) << d;
  }
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  EXPECT_EQ(a.stats().documents, b.stats().documents);
  EXPECT_EQ(a.stats().bytes, b.stats().bytes);
  EXPECT_EQ(a.stats().empty_files, b.stats().empty_files);
  EXPECT_EQ(a.stats().symlinks, b.stats().symlinks);
  EXPECT_EQ(a.stats().special_files, b.stats().special_files);
  EXPECT_EQ(a.stats().unreadable, b.stats().unreadable);
  EXPECT_EQ(a.stats().truncated, b.stats().truncated);
  ASSERT_EQ(a.piece_count(), b.piece_count());
  std::vector<std::int32_t> ta, tb;
  std::string why;
  for (std::uint64_t p = 0; p < a.piece_count(); ++p) {
    ASSERT_EQ(a.piece_length(p), b.piece_length(p)) << p;
    ASSERT_EQ(a.read(p, a.piece_length(p), ta, why), b.read(p, b.piece_length(p), tb, why)) << p;
    EXPECT_EQ(ta, tb) << p;
  }
}

TEST(CorpusIndexCache, TheNextProcessReadsTheIndexKeptAndHasTheSameCorpus) {
  TempDir tree("hdp-data"), node("hdp-node");
  make_text_tree(tree.path(), 300, 200, 11);
  write_file(tree.path() / "empty", "");
  fs::create_symlink(tree.path() / "d0", tree.path() / "link");
  const Corpus walked(tree.path(), kept_in(node.path()));
  EXPECT_FALSE(walked.stats().from_cache);
  const fs::path file = corpus_index_file(node.path(), walked.root(), kept_in(node.path()));
  ASSERT_TRUE(fs::exists(file)) << file;
  const Corpus read(tree.path(), kept_in(node.path()));
  EXPECT_TRUE(read.stats().from_cache);
  expect_same_corpus(walked, read);
  EXPECT_EQ(read.stats().empty_files, 1u);
  EXPECT_EQ(read.stats().symlinks, 1u);
  EXPECT_EQ(read.fingerprint(), Corpus(tree.path(), {.context = 64}).fingerprint()) << "a walk without the cache";

  // Other options are another file: the first one's index is not taken for them.
  const Corpus shorter(tree.path(), kept_in(node.path(), 16));
  EXPECT_FALSE(shorter.stats().from_cache);
  EXPECT_NE(corpus_index_file(node.path(), walked.root(), kept_in(node.path(), 16)), file);
  EXPECT_TRUE(Corpus(tree.path(), kept_in(node.path(), 16)).stats().from_cache);
  CorpusOptions capped = kept_in(node.path());
  capped.max_documents = 10;
  const Corpus few(tree.path(), capped);
  EXPECT_FALSE(few.stats().from_cache);
  EXPECT_EQ(few.document_count(), 10u);
  EXPECT_TRUE(few.stats().truncated);
  const Corpus few_again(tree.path(), capped);
  EXPECT_TRUE(few_again.stats().from_cache);
  expect_same_corpus(few, few_again);
}

// While the index is kept, a process of the node sees the tree as the first one indexed it, as the
// ranks that indexed with it do: a file added is not seen, a file resized is refused at read time.
TEST(CorpusIndexCache, TheKeptIndexIsTheNodesViewOfTheTree) {
  TempDir tree("hdp-data"), node("hdp-node");
  write_file(tree.path() / "a.txt", "hello");
  write_file(tree.path() / "b.txt", "world");
  const Corpus first(tree.path(), kept_in(node.path()));
  write_file(tree.path() / "a.txt", "hello, longer");
  write_file(tree.path() / "c.txt", "new");
  const Corpus later(tree.path(), kept_in(node.path()));
  EXPECT_TRUE(later.stats().from_cache);
  EXPECT_EQ(later.fingerprint(), first.fingerprint());
  EXPECT_EQ(later.document_count(), 2u);
  std::vector<std::int32_t> tokens;
  std::string why;
  EXPECT_FALSE(later.read(0, 5, tokens, why));
  EXPECT_THAT(why, HasSubstr("size changed since indexing"));
  // A process without the node's directory (another node, a later agent) walks the tree as it is.
  const Corpus walked(tree.path(), {.context = 64});
  EXPECT_EQ(walked.document_count(), 3u);
  EXPECT_NE(walked.fingerprint(), first.fingerprint());
}

// Each way a kept file can be wrong: refused with its reason by read_corpus_index, and a Corpus over
// it walks the tree (the same corpus as a fresh walk) and writes the file again.
TEST(CorpusIndexCache, AGarbledOrForeignFileIsRefusedAndTheTreeWalked) {
  TempDir tree("hdp-data"), node("hdp-node"), other("hdp-data-other");
  make_text_tree(tree.path(), 40, 100, 3);
  write_file(other.path() / "x", "other tree");
  const CorpusOptions options = kept_in(node.path());
  const Corpus fresh(tree.path(), {.context = 64});
  const fs::path root = fresh.root();
  const fs::path file = corpus_index_file(node.path(), root, options);
  { const Corpus keep(tree.path(), options); }
  const std::string good = read_bytes(file);
  ASSERT_GT(good.size(), 100u);
  const std::size_t body = good.find('\n', good.find('\n') + 1) + 1;  // after the header's two lines

  // A valid file of a made-up index: its checksum is right, its content is not.
  auto crafted = [&](std::vector<std::string> paths, std::vector<std::int64_t> sizes) {
    CorpusIndex index;
    index.paths = std::move(paths);
    index.sizes = std::move(sizes);
    index.stats.documents = index.paths.size();
    for (auto s : index.sizes) index.stats.bytes += s;
    TempDir scratch("hdp-node-scratch");
    const fs::path at = scratch.path() / "index";
    write_corpus_index(at, root, options, index);
    return read_bytes(at);
  };
  auto other_options_file = [&] {
    TempDir scratch("hdp-node-scratch");
    { const Corpus keep(tree.path(), kept_in(scratch.path(), 32)); }
    return read_bytes(corpus_index_file(scratch.path(), root, kept_in(scratch.path(), 32)));
  };
  auto other_root_file = [&] {
    TempDir scratch("hdp-node-scratch");
    { const Corpus keep(other.path(), kept_in(scratch.path())); }
    return read_bytes(corpus_index_file(scratch.path(), fs::absolute(other.path()), kept_in(scratch.path())));
  };
  // The file with what follows its first line replaced, and sealed with that text's checksum: a
  // file only a writer with a defect would write.
  const std::size_t first_line = good.find('\n') + 1;
  auto resealed = [&](const std::string& rest) {
    return good.substr(0, 19) + checkpoint::to_hex(checkpoint::xxh3({reinterpret_cast<const std::uint8_t*>(rest.data()),
                                                                     rest.size()})) + "\n" + rest;
  };
  const std::string rest = good.substr(first_line);
  const std::size_t fields_at = rest.find('\0') + 1, fields_end = rest.find('\n');
  // The header's decimal fields, one replaced.
  auto with_field = [&](std::size_t field, const std::string& value) {
    std::vector<std::string> fields;
    std::string text = rest.substr(fields_at, fields_end - fields_at);
    for (std::size_t at = 0;;) {
      const std::size_t end = std::min(text.find(' ', at), text.size());
      fields.push_back(text.substr(at, end - at));
      if (end == text.size()) break;
      at = end + 1;
    }
    fields.at(field) = value;
    std::string joined;
    for (const auto& f : fields) joined += (joined.empty() ? "" : " ") + f;
    return resealed(rest.substr(0, fields_at) + joined + rest.substr(fields_end));
  };
  std::string flipped_body = good, flipped_header = good;
  flipped_body[body + 3] ^= 0x01;
  flipped_header[body - 4] ^= 0x01;  // a digit of the body's length
  const struct {
    std::string name, bytes, why;
  } cases[] = {
      {"empty", "", "first line"},
      {"other magic", "hdp corpus index 0 " + good.substr(19), "first line"},
      {"cut in its first line", good.substr(0, 25), "first line"},
      {"cut in the header", good.substr(0, body - 5), "checksum"},
      {"cut in the body", good.substr(0, good.size() - 7), "checksum"},
      {"a byte more", good + "x", "checksum"},
      {"a bit flipped in the body", flipped_body, "checksum"},
      {"a bit flipped in the header", flipped_header, "checksum"},
      {"other options", other_options_file(), "other options"},
      {"another root", other_root_file(), "another root"},
      {"truncated neither 0 nor 1", with_field(9, "2"), "malformed header"},
      {"a field that is no number", with_field(7, "x"), "malformed header"},
      {"the body's length wrong", with_field(10, "12"), "its header says"},
      {"no document", with_field(3, "0"), "no document"},
      {"fewer documents than the body", with_field(3, "1"), "more documents than its header says"},
      {"more documents than the body", with_field(3, std::to_string(fresh.document_count() + 1)), "disagree"},
      {"more bytes than the body", with_field(4, std::to_string(fresh.stats().bytes + 1)), "disagree"},
      {"a path out of the root", crafted({"../etc/passwd"}, {4}), "not a relative file path"},
      {"an absolute path", crafted({"/etc/passwd"}, {4}), "not a relative file path"},
      {"an empty component", crafted({"a//b"}, {4}), "not a relative file path"},
      {"a directory's path", crafted({"a/"}, {4}), "not a relative file path"},
      {"paths out of order", crafted({"b", "a"}, {1, 1}), "out of order"},
      {"a path twice", crafted({"a", "a"}, {1, 1}), "out of order"},
      {"a size of 0", crafted({"a"}, {0}), "malformed document size"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    write_file(file, c.bytes);
    std::string why;
    EXPECT_FALSE(read_corpus_index(file, root, options, why).has_value());
    EXPECT_THAT(why, HasSubstr(c.why));
    const Corpus walked(tree.path(), options);
    EXPECT_FALSE(walked.stats().from_cache);
    expect_same_corpus(fresh, walked);
    EXPECT_EQ(read_bytes(file), good) << "written again after the walk";
  }
  std::string why;
  fs::remove(file);
  EXPECT_FALSE(read_corpus_index(file, root, options, why).has_value());
  EXPECT_EQ(why, "absent");
  // A FIFO in the file's place neither blocks the reader nor is taken.
  ASSERT_EQ(::mkfifo(file.c_str(), 0600), 0);
  EXPECT_FALSE(read_corpus_index(file, root, options, why).has_value());
  EXPECT_EQ(why, "not a regular file");
  const Corpus walked(tree.path(), options);
  EXPECT_FALSE(walked.stats().from_cache);
  expect_same_corpus(fresh, walked);
}

// A kept index can name only paths a walk could give, and read() follows no link on the way to
// one: a path through a directory link (which the walk does not follow) is refused at read time.
TEST(CorpusIndexCache, APathThroughALinkInTheTreeIsNotFollowedWhenRead) {
  TempDir tree("hdp-data"), node("hdp-node"), outside("hdp-outside");
  write_file(tree.path() / "a.txt", "inside");
  write_file(outside.path() / "secret", "outside");
  fs::create_directory_symlink(outside.path(), tree.path() / "link");
  const CorpusOptions options = kept_in(node.path());
  const fs::path root = fs::absolute(tree.path());
  CorpusIndex index;
  index.paths = {"a.txt", "link/secret"};
  index.sizes = {6, 7};
  index.stats.documents = 2;
  index.stats.bytes = 13;
  ASSERT_TRUE(write_corpus_index(corpus_index_file(node.path(), root, options), root, options, index));
  const Corpus corpus(tree.path(), options);
  ASSERT_TRUE(corpus.stats().from_cache);
  std::vector<std::int32_t> tokens;
  std::string why;
  EXPECT_TRUE(corpus.read(0, 6, tokens, why)) << why;
  EXPECT_FALSE(corpus.read(1, 7, tokens, why));
  EXPECT_THAT(why, HasSubstr("cannot open"));
}

TEST(CorpusIndexCache, ADirectoryThatCannotTakeTheFileCostsOnlyTheKeeping) {
  TempDir tree("hdp-data"), node("hdp-node");
  write_file(tree.path() / "a.txt", "hello");
  const Corpus missing(tree.path(), kept_in(node.path() / "gone"));
  EXPECT_FALSE(missing.stats().from_cache);
  EXPECT_EQ(missing.document_count(), 1u);
  write_file(node.path() / "a-file", "not a directory");
  const Corpus not_a_dir(tree.path(), kept_in(node.path() / "a-file"));
  EXPECT_EQ(not_a_dir.document_count(), 1u);
  CorpusIndex one;
  one.paths = {"a.txt"};
  one.sizes = {5};
  one.stats.documents = 1;
  one.stats.bytes = 5;
  EXPECT_THROW(write_corpus_index(node.path() / "gone" / "index", not_a_dir.root(), kept_in(node.path()), one), Error);
}

// /usr/include's index read back against its walk, in one process: the read is what a worker
// restarted by its agent pays instead of the walk.
TEST(CorpusIndexCache, ReadingUsrIncludesIndexIsFasterThanWalkingIt) {
  if (!fs::is_directory("/usr/include")) GTEST_SKIP() << "no /usr/include";
  TempDir node("hdp-node");
  const CorpusOptions options = kept_in(node.path(), 4096);
  const Corpus walked("/usr/include", options);
  const Corpus read("/usr/include", options);
  ASSERT_TRUE(read.stats().from_cache);
  EXPECT_EQ(read.fingerprint(), walked.fingerprint());
  EXPECT_EQ(read.piece_count(), walked.piece_count());
  std::printf("/usr/include: %llu documents, walked in %.4f s, the kept index (%lld bytes) read in %.4f s\n",
              static_cast<unsigned long long>(walked.document_count()), walked.stats().seconds,
              static_cast<long long>(fs::file_size(corpus_index_file(node.path(), walked.root(), options))),
              read.stats().seconds);
  EXPECT_LT(read.stats().seconds, walked.stats().seconds);
}

}  // namespace
}  // namespace hdp::trainer::data
