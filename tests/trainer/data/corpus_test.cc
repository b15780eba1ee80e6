// Tests of trainer/data/corpus.h over temporary trees: path order, piece cutting, what indexing
// skips (empty files, symbolic links, FIFOs, unreadable entries), limits, the refusal of binary and
// changed documents at read time, and the time to index /usr/include.
#include "trainer/data/corpus.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/error.h"
#include "tests/support/temp_dir.h"
#include "tests/trainer/data/data_tree.h"

namespace hdp::trainer::data {
namespace {

namespace fs = std::filesystem;
using hdp::test::TempDir;
using hdp::test::text_bytes;
using hdp::test::write_file;
using ::testing::HasSubstr;

std::vector<std::string> paths_of(const Corpus& corpus) {
  std::vector<std::string> out;
  for (std::uint64_t d = 0; d < corpus.document_count(); ++d) out.push_back(corpus.document_path(d));
  return out;
}

std::string invalid_argument_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no InvalidArgument)";
}

std::vector<std::int32_t> as_tokens(std::string_view bytes) {
  std::vector<std::int32_t> out;
  for (char c : bytes) out.push_back(static_cast<unsigned char>(c));
  return out;
}

TEST(Corpus, OrdersDocumentsBytewiseByRelativePath) {
  TempDir dir("hdp-data");
  // A directory sorts as "name/": "a-" < "a.txt" < "a/..." < "a0", as whole paths compare bytewise.
  for (const char* name : {"b", "a.txt", "a/z", "A", "a/b/c", "\xc3\xa9", "a-", "a0"}) {
    write_file(dir.path() / name, "x");
  }
  const Corpus corpus(dir.path(), {.context = 8});
  EXPECT_THAT(paths_of(corpus),
              ::testing::ElementsAre("A", "a-", "a.txt", "a/b/c", "a/z", "a0", "b", "\xc3\xa9"));
  EXPECT_EQ(corpus.stats().documents, 8u);
  EXPECT_EQ(corpus.stats().pieces, 8u);
  EXPECT_EQ(corpus.stats().bytes, 8);
  EXPECT_FALSE(corpus.stats().truncated);
}

// The fingerprint saved in checkpoints (piece_source.h): of the paths and sizes, and the context.
TEST(Corpus, TheFingerprintFollowsPathsSizesAndTheContext) {
  TempDir dir("hdp-data");
  write_file(dir.path() / "a.txt", "hello");
  write_file(dir.path() / "b" / "c.txt", "world!");
  const std::string first = Corpus(dir.path(), {.context = 8}).fingerprint();
  EXPECT_EQ(first.size(), 16u);
  EXPECT_EQ(Corpus(dir.path(), {.context = 8}).fingerprint(), first);
  EXPECT_NE(Corpus(dir.path(), {.context = 4}).fingerprint(), first);
  write_file(dir.path() / "a.txt", "hello, longer");
  const std::string grown = Corpus(dir.path(), {.context = 8}).fingerprint();
  EXPECT_NE(grown, first);
  write_file(dir.path() / "d.txt", "x");
  EXPECT_NE(Corpus(dir.path(), {.context = 8}).fingerprint(), grown);
}

TEST(Corpus, CutsDocumentsIntoContextSizedPieces) {
  TempDir dir("hdp-data");
  const std::string ten = text_bytes(10, 1), four = text_bytes(4, 2), three = text_bytes(3, 3);
  write_file(dir.path() / "a", ten);
  write_file(dir.path() / "b", four);
  write_file(dir.path() / "c", three);
  const Corpus corpus(dir.path(), {.context = 4});
  ASSERT_EQ(corpus.piece_count(), 5u);  // a: 4 + 4 + 2, b: 4, c: 3
  const std::vector<std::pair<std::uint64_t, std::int64_t>> expected = {{0, 0}, {0, 4}, {0, 8}, {1, 0}, {2, 0}};
  const std::vector<std::int64_t> lengths = {4, 4, 2, 4, 3};
  const std::vector<std::string> contents = {ten.substr(0, 4), ten.substr(4, 4), ten.substr(8), four, three};
  for (std::uint64_t p = 0; p < 5; ++p) {
    const PieceLocation at = corpus.locate(p);
    EXPECT_EQ(at.document, expected[p].first) << p;
    EXPECT_EQ(at.offset, expected[p].second) << p;
    EXPECT_EQ(at.length, lengths[p]) << p;
    EXPECT_EQ(corpus.piece_length(p), lengths[p]) << p;
    std::vector<std::int32_t> tokens;
    std::string why;
    ASSERT_TRUE(corpus.read(p, lengths[p], tokens, why)) << why;
    EXPECT_EQ(tokens, as_tokens(contents[p])) << p;
    ASSERT_TRUE(corpus.read(p, 1, tokens, why)) << why;  // a prefix, as a cut piece is read
    EXPECT_EQ(tokens, as_tokens(contents[p].substr(0, 1))) << p;
  }
  // Bytes >= 0x80 are token ids 128..255, not negative.
  write_file(dir.path() / "high", "\xff\x80");
  const Corpus high(dir.path(), {.context = 4});
  std::vector<std::int32_t> tokens;
  std::string why;
  ASSERT_TRUE(high.read(5, 2, tokens, why)) << why;
  EXPECT_EQ(high.document_path(high.locate(5).document), "high");
  EXPECT_THAT(tokens, ::testing::ElementsAre(255, 128));
}

TEST(Corpus, RejectsBadRootsAndContexts) {
  TempDir dir("hdp-data");
  const fs::path missing = dir.path() / "missing";
  EXPECT_THAT(invalid_argument_of([&] { Corpus(missing, {.context = 8}); }),
              ::testing::AllOf(HasSubstr(missing.string()), HasSubstr("does not exist")));
  write_file(dir.path() / "file", "text");
  EXPECT_THAT(invalid_argument_of([&] { Corpus(dir.path() / "file", {.context = 8}); }),
              ::testing::AllOf(HasSubstr("file'"), HasSubstr("is not a directory")));
  fs::create_directories(dir.path() / "empty");
  EXPECT_THAT(invalid_argument_of([&] { Corpus(dir.path() / "empty", {.context = 8}); }),
              ::testing::AllOf(HasSubstr("empty'"), HasSubstr("holds no usable document")));
  // Only unusable entries: an empty file, a link, a FIFO.
  fs::create_directories(dir.path() / "useless");
  write_file(dir.path() / "useless" / "zero", "");
  fs::create_symlink(dir.path() / "file", dir.path() / "useless" / "link");
  ASSERT_EQ(::mkfifo((dir.path() / "useless" / "fifo").c_str(), 0644), 0);
  EXPECT_THAT(invalid_argument_of([&] { Corpus(dir.path() / "useless", {.context = 8}); }),
              ::testing::AllOf(HasSubstr("useless'"), HasSubstr("holds no usable document"),
                               HasSubstr("1 empty files"), HasSubstr("1 symbolic links"), HasSubstr("1 special")));
  EXPECT_THAT(invalid_argument_of([&] { Corpus(dir.path(), {.context = 0}); }),
              HasSubstr("context length must be >= 1, got 0"));
  EXPECT_THAT(invalid_argument_of([&] { Corpus(dir.path(), {.context = -3}); }), HasSubstr("got -3"));
  EXPECT_THAT(invalid_argument_of([&] { Corpus(dir.path(), {.context = 8, .max_documents = 0}); }),
              HasSubstr("max_documents"));
  EXPECT_THAT(invalid_argument_of([&] { Corpus(dir.path(), {.context = 8, .max_bytes = 0}); }),
              HasSubstr("max_bytes"));
}

TEST(Corpus, FollowsNoSymbolicLinkButTheRoot) {
  TempDir dir("hdp-data"), outside("hdp-data-outside");
  write_file(dir.path() / "tree" / "real.txt", "real");
  write_file(outside.path() / "secret.txt", "outside the tree");
  fs::create_symlink(dir.path() / "tree" / "real.txt", dir.path() / "tree" / "link-to-file");
  fs::create_directory_symlink(outside.path(), dir.path() / "tree" / "link-to-dir");
  fs::create_symlink(dir.path() / "nowhere", dir.path() / "tree" / "dangling");
  fs::create_directory_symlink(dir.path() / "tree", dir.path() / "tree" / "cycle");
  write_file(dir.path() / "tree" / "empty.txt", "");
  ASSERT_EQ(::mkfifo((dir.path() / "tree" / "fifo").c_str(), 0644), 0);

  const Corpus corpus(dir.path() / "tree", {.context = 8});
  EXPECT_THAT(paths_of(corpus), ::testing::ElementsAre("real.txt"));
  EXPECT_EQ(corpus.stats().symlinks, 4u);
  EXPECT_EQ(corpus.stats().empty_files, 1u);
  EXPECT_EQ(corpus.stats().special_files, 1u);
  EXPECT_EQ(corpus.stats().unreadable, 0u);

  // The root itself may be a link: the user named it.
  fs::create_directory_symlink(dir.path() / "tree", dir.path() / "root-link");
  const Corpus via_link(dir.path() / "root-link", {.context = 8});
  EXPECT_THAT(paths_of(via_link), ::testing::ElementsAre("real.txt"));
}

TEST(Corpus, LimitsStopTheWalkInPathOrder) {
  TempDir dir("hdp-data");
  for (const char* name : {"c", "a/1", "a/2", "b"}) write_file(dir.path() / name, text_bytes(10, 0));
  const Corpus by_count(dir.path(), {.context = 4, .max_documents = 2});
  EXPECT_THAT(paths_of(by_count), ::testing::ElementsAre("a/1", "a/2"));
  EXPECT_TRUE(by_count.stats().truncated);
  const Corpus by_bytes(dir.path(), {.context = 4, .max_bytes = 35});
  EXPECT_THAT(paths_of(by_bytes), ::testing::ElementsAre("a/1", "a/2", "b"));
  EXPECT_EQ(by_bytes.stats().bytes, 30);
  EXPECT_TRUE(by_bytes.stats().truncated);
  const Corpus exact(dir.path(), {.context = 4, .max_documents = 4, .max_bytes = 40});
  EXPECT_EQ(exact.document_count(), 4u);
  EXPECT_FALSE(exact.stats().truncated);
}

TEST(Corpus, RefusesEveryPieceOfABinaryDocument) {
  TempDir dir("hdp-data");
  std::string binary = text_bytes(20000, 1);
  binary[7999] = '\0';  // the last byte checked
  std::string late = text_bytes(20000, 2);
  late[8000] = '\0';    // the first byte not checked: a text document with a NUL, kept as token 0
  write_file(dir.path() / "binary", binary);
  write_file(dir.path() / "late", late);
  const Corpus corpus(dir.path(), {.context = 4096});
  ASSERT_EQ(corpus.piece_count(), 10u);
  std::vector<std::int32_t> tokens;
  for (std::uint64_t p = 0; p < 5; ++p) {
    std::string why;
    EXPECT_FALSE(corpus.read(p, corpus.piece_length(p), tokens, why)) << p;
    EXPECT_FALSE(corpus.read(p, 1, tokens, why)) << p;  // however much of it is asked for
    EXPECT_THAT(why, ::testing::AllOf(HasSubstr("binary (NUL byte at offset 7999)"), HasSubstr("'binary'"),
                                      HasSubstr("piece " + std::to_string(p))));
  }
  for (std::uint64_t p = 5; p < 10; ++p) {
    std::string why;
    ASSERT_TRUE(corpus.read(p, corpus.piece_length(p), tokens, why)) << why;
    const PieceLocation at = corpus.locate(p);
    EXPECT_EQ(tokens, as_tokens(std::string_view(late).substr(static_cast<std::size_t>(at.offset),
                                                              static_cast<std::size_t>(at.length))));
  }
}

TEST(Corpus, RefusesDocumentsThatChangedAfterIndexing) {
  TempDir dir("hdp-data");
  for (const char* name : {"gone", "fifo", "grown", "link", "same"}) write_file(dir.path() / name, text_bytes(10, 0));
  write_file(dir.path() / "elsewhere" / "x", text_bytes(10, 0));
  const Corpus corpus(dir.path(), {.context = 16});
  ASSERT_THAT(paths_of(corpus), ::testing::ElementsAre("elsewhere/x", "fifo", "gone", "grown", "link", "same"));
  fs::remove(dir.path() / "gone");
  fs::remove(dir.path() / "fifo");
  ASSERT_EQ(::mkfifo((dir.path() / "fifo").c_str(), 0644), 0);  // would block an open without O_NONBLOCK
  write_file(dir.path() / "grown", text_bytes(11, 0));
  fs::remove(dir.path() / "link");
  fs::create_symlink(dir.path() / "same", dir.path() / "link");  // same size, but a link now
  // The same file, reached through a directory link now.
  fs::rename(dir.path() / "elsewhere", dir.path() / "moved");
  fs::create_directory_symlink(dir.path() / "moved", dir.path() / "elsewhere");
  const std::vector<std::string> reasons = {"cannot open", "no longer a regular file", "cannot open: No such file",
                                            "size changed since indexing (10 -> 11 bytes)", "cannot open", ""};
  for (std::uint64_t p = 0; p < corpus.piece_count(); ++p) {
    std::vector<std::int32_t> tokens;
    std::string why;
    EXPECT_EQ(corpus.read(p, 10, tokens, why), reasons[p].empty()) << p << ": " << why;
    if (!reasons[p].empty()) {
      EXPECT_THAT(why, HasSubstr(reasons[p])) << p;
    }
  }
}

// Runs `body` in a forked child and returns what it printed. When this process is root, the child
// first becomes user and group nobody (65534), so that permission bits apply to it; the test
// environment runs as root, where they would not. Returns "SKIP: ..." when that is not possible.
std::string run_unprivileged(const std::function<std::string()>& body) {
  int fds[2];
  if (::pipe(fds) != 0) return "SKIP: pipe failed";
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return "SKIP: fork failed";
  if (pid == 0) {
    ::close(fds[0]);
    std::string out;
    if (::geteuid() == 0 && (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
                             ::setresuid(65534, 65534, 65534) != 0)) {
      out = "SKIP: cannot become user nobody";
    } else {
      try {
        out = body();
      } catch (const std::exception& e) {
        out = std::string("exception: ") + e.what();
      }
    }
    for (std::size_t done = 0; done < out.size();) {
      const ssize_t n = ::write(fds[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;) out.append(buffer, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return out;
}

TEST(Corpus, SkipsWhatPermissionsForbid) {
  TempDir dir("hdp-data");
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);  // mkdtemp made it 0700: let nobody in
  write_file(dir.path() / "a.txt", "readable");
  write_file(dir.path() / "secret.txt", "no read permission");
  write_file(dir.path() / "locked" / "inside.txt", "in a directory that cannot be listed");
  write_file(dir.path() / "open" / "b.txt", "readable too");
  ASSERT_EQ(::chmod((dir.path() / "secret.txt").c_str(), 0), 0);
  ASSERT_EQ(::chmod((dir.path() / "locked").c_str(), 0), 0);

  const std::string seen = run_unprivileged([&] {
    const Corpus corpus(dir.path(), {.context = 8});
    std::string out = std::to_string(corpus.stats().unreadable) + " unreadable:";
    for (std::uint64_t d = 0; d < corpus.document_count(); ++d) out += " " + corpus.document_path(d);
    return out;
  });
  ::chmod((dir.path() / "locked").c_str(), 0755);  // so that a non-root TempDir can remove it
  if (seen.starts_with("SKIP")) GTEST_SKIP() << seen;
  EXPECT_EQ(seen, "2 unreadable: a.txt open/b.txt");

  // A root that cannot be listed is the caller's error, not a skip.
  ASSERT_EQ(::chmod((dir.path() / "locked").c_str(), 0), 0);
  const std::string root_error = run_unprivileged([&] {
    try {
      Corpus(dir.path() / "locked", {.context = 8});
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("indexed");
  });
  ::chmod((dir.path() / "locked").c_str(), 0755);
  EXPECT_THAT(root_error, ::testing::AllOf(HasSubstr("cannot list data root"), HasSubstr("locked'"),
                                           HasSubstr("Permission denied")));
}

TEST(Corpus, IndexesUsrIncludeQuickly) {
  const fs::path root = "/usr/include";
  if (!fs::is_directory(root)) GTEST_SKIP() << "no /usr/include here";
  const Corpus corpus(root, {.context = 4096});
  const CorpusStats& s = corpus.stats();
  std::vector<std::int64_t> lengths;
  lengths.reserve(corpus.piece_count());
  for (std::uint64_t p = 0; p < corpus.piece_count(); ++p) lengths.push_back(corpus.piece_length(p));
  std::sort(lengths.begin(), lengths.end());
  auto quantile = [&](double q) {
    return lengths[static_cast<std::size_t>(q * static_cast<double>(lengths.size() - 1))];
  };
  std::printf("/usr/include: %llu documents, %lld bytes, %llu pieces, indexed in %.3f s; skipped %llu empty, "
              "%llu symlinks, %llu special, %llu unreadable\n",
              static_cast<unsigned long long>(s.documents), static_cast<long long>(s.bytes),
              static_cast<unsigned long long>(s.pieces), s.seconds, static_cast<unsigned long long>(s.empty_files),
              static_cast<unsigned long long>(s.symlinks), static_cast<unsigned long long>(s.special_files),
              static_cast<unsigned long long>(s.unreadable));
  std::printf("piece lengths at context 4096: min %lld p10 %lld p50 %lld p90 %lld p99 %lld max %lld; %.1f%% full\n",
              static_cast<long long>(lengths.front()), static_cast<long long>(quantile(0.1)),
              static_cast<long long>(quantile(0.5)), static_cast<long long>(quantile(0.9)),
              static_cast<long long>(quantile(0.99)), static_cast<long long>(lengths.back()),
              100.0 * static_cast<double>(std::count(lengths.begin(), lengths.end(), 4096)) /
                  static_cast<double>(lengths.size()));
  std::vector<std::int64_t> sizes;
  for (std::uint64_t d = 0; d < corpus.document_count(); ++d) sizes.push_back(corpus.document_size(d));
  std::sort(sizes.begin(), sizes.end());
  auto size_at = [&](double q) {
    return static_cast<long long>(sizes[static_cast<std::size_t>(q * static_cast<double>(sizes.size() - 1))]);
  };
  std::printf("document sizes: p10 %lld p50 %lld p90 %lld p99 %lld max %lld bytes\n", size_at(0.1), size_at(0.5),
              size_at(0.9), size_at(0.99), size_at(1.0));
  EXPECT_GT(s.documents, 0u);
  EXPECT_LT(s.seconds, 5.0);
  // Reading a few pieces works (headers are text).
  std::vector<std::int32_t> tokens;
  std::string why;
  for (std::uint64_t p = 0; p < corpus.piece_count(); p += corpus.piece_count() / 10 + 1) {
    EXPECT_TRUE(corpus.read(p, corpus.piece_length(p), tokens, why)) << why;
  }
}

}  // namespace
}  // namespace hdp::trainer::data
