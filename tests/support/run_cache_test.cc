// RunCacheEntry (tests/support/run_cache.h): the directory the build's test processes share for a
// deterministic run. A stale or partial entry must never be read as a result.
#include "tests/support/run_cache.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/temp_dir.h"

namespace hdp::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Points HDP_TEST_CACHE and HDP_BIN_DIR at fresh directories (a fake hdp binary in the second)
// and restores both afterwards.
class RunCache : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"HDP_TEST_CACHE", "HDP_BIN_DIR"}) {
      const char* value = std::getenv(name);
      saved_.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
    }
    setenv("HDP_TEST_CACHE", (root_.path() / "cache").c_str(), 1);
    setenv("HDP_BIN_DIR", bin_.path().c_str(), 1);
    write_binary("build one");
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      if (value) setenv(name.c_str(), value->c_str(), 1);
      else unsetenv(name.c_str());
    }
  }
  void write_binary(const std::string& content) { std::ofstream(bin_.path() / "hdp") << content; }
  static void write_result(const fs::path& dir) { std::ofstream(dir / "result") << "42\n"; }

  TempDir root_, bin_;
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST_F(RunCache, ACommittedRunIsFoundByTheNextProcessWithTheSameRecipeAndBinary) {
  fs::path first;
  {
    RunCacheEntry entry("suite", "recipe a", 1s);
    EXPECT_FALSE(entry.complete());
    EXPECT_TRUE(fs::is_empty(entry.dir()));
    write_result(entry.dir());
    entry.commit();
    EXPECT_TRUE(entry.complete());
    first = entry.dir();
  }
  RunCacheEntry again("suite", "recipe a", 1s);
  EXPECT_TRUE(again.complete());
  EXPECT_EQ(again.dir(), first);
  EXPECT_TRUE(fs::exists(again.dir() / "result"));
}

TEST_F(RunCache, AnotherRecipeOrAnotherBinaryIsAnotherEntryAndTheCommitRemovesTheOlder) {
  fs::path first;
  {
    RunCacheEntry entry("suite", "recipe a", 1s);
    entry.commit();
    first = entry.dir();
  }
  {
    RunCacheEntry other_recipe("suite", "recipe b", 1s);
    EXPECT_FALSE(other_recipe.complete());
    EXPECT_NE(other_recipe.dir(), first);
  }
  write_binary("build two");  // hdp rebuilt: the same recipe no longer matches
  RunCacheEntry rebuilt("suite", "recipe a", 1s);
  EXPECT_FALSE(rebuilt.complete());
  EXPECT_NE(rebuilt.dir(), first);
  EXPECT_TRUE(fs::exists(first));
  rebuilt.commit();
  EXPECT_FALSE(fs::exists(first)) << "the older build's entry of the same name stays";
}

TEST_F(RunCache, ARunThatDidNotCommitIsStartedAgainInAnEmptyDirectory) {
  {
    RunCacheEntry crashed("suite", "recipe a", 1s);
    write_result(crashed.dir());  // and no commit: the run failed or its process died
  }
  RunCacheEntry next("suite", "recipe a", 1s);
  EXPECT_FALSE(next.complete());
  EXPECT_TRUE(fs::is_empty(next.dir()));
}

TEST_F(RunCache, ASecondHolderWaitsForTheFirstAndGivesUpAtItsDeadline) {
  RunCacheEntry holder("suite", "recipe a", 1s);
  const auto began = std::chrono::steady_clock::now();
  try {
    RunCacheEntry waiter("suite", "recipe a", 300ms);
    FAIL() << "a second holder got the lock";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("suite.lock"), std::string::npos) << e.what();
  }
  const auto waited = std::chrono::steady_clock::now() - began;
  EXPECT_GE(waited, 300ms);
  EXPECT_LT(waited, 5s);
  RunCacheEntry other_name("other", "recipe a", 300ms);  // a lock per name
  EXPECT_FALSE(other_name.complete());
}

TEST_F(RunCache, WithoutACacheFolderEveryRunIsFreshAndTemporary) {
  unsetenv("HDP_TEST_CACHE");
  fs::path dir;
  {
    RunCacheEntry entry("suite", "recipe a", 1s);
    EXPECT_FALSE(entry.complete());
    dir = entry.dir();
    write_result(dir);
    entry.commit();
    EXPECT_FALSE(entry.complete()) << "nothing is cached without HDP_TEST_CACHE";
  }
  EXPECT_FALSE(fs::exists(dir));
  RunCacheEntry unnamed("", "recipe a", 1s);
  EXPECT_FALSE(unnamed.complete());
}

}  // namespace
}  // namespace hdp::test
