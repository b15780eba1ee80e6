// Libraries opened on first use (common/shared_library.h): the first candidate that opens, its
// symbols; a library or a symbol that is not there is an hdp::Error naming what was tried.
#include "common/shared_library.h"

#include <gtest/gtest.h>

#include <cstring>

#include "common/error.h"

namespace hdp {
namespace {

TEST(SharedLibrary, TheFirstCandidateThatOpensGivesItsSymbols) {
  const SharedLibrary libc = SharedLibrary::open("libc", {"libhdp-no-such-library.so.1", "libc.so.6"});
  EXPECT_EQ(libc.path(), "libc.so.6");
  const auto length = libc.symbol<std::size_t (*)(const char*)>("strlen");
  ASSERT_NE(length, nullptr);
  EXPECT_EQ(length("four"), 4u);
}

TEST(SharedLibrary, NoCandidateOpeningNamesEveryCandidateAndTheLoadersReason) {
  try {
    SharedLibrary::open("the test library", {"libhdp-no-such-library.so.1", "/nonexistent/libhdp.so"});
    FAIL() << "opened a library that does not exist";
  } catch (const Error& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("the test library cannot be loaded"), std::string::npos) << text;
    EXPECT_NE(text.find("libhdp-no-such-library.so.1, /nonexistent/libhdp.so"), std::string::npos) << text;
    EXPECT_NE(text.find("No such file or directory"), std::string::npos) << text;
  }
}

TEST(SharedLibrary, AMissingSymbolNamesTheLibraryAndTheSymbol) {
  const SharedLibrary libc = SharedLibrary::open("libc", {"libc.so.6"});
  try {
    libc.address("hdp_no_such_symbol");
    FAIL() << "found a symbol that does not exist";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "libc (libc.so.6) has no symbol hdp_no_such_symbol");
  }
}

}  // namespace
}  // namespace hdp
