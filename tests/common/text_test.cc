// quote_value(): the one way bytes from outside (Redis values, keys named after them) reach a log
// line or an error message; is_valid_utf8().
#include "common/text.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "common/warn_once.h"

namespace hdp {
namespace {

TEST(QuoteValue, PrintableAsciiIsShownAsIs) {
  EXPECT_EQ(quote_value("gen"), "'gen'");
  EXPECT_EQ(quote_value(""), "''");
  EXPECT_EQ(quote_value("a b/c:1"), "'a b/c:1'");
}

TEST(QuoteValue, EveryOtherByteIsEscapedAndNulDoesNotCutTheText) {
  const std::string bytes("ba\0na\n'\\\x1b[2J\xff\xc3\xa9", 15);
  EXPECT_EQ(quote_value(bytes), "'ba\\0na\\n\\'\\\\\\x1b[2J\\xff\\xc3\\xa9'");
  const std::string quoted = quote_value(bytes);
  EXPECT_EQ(quoted.find('\0'), std::string::npos);
  EXPECT_TRUE(is_valid_utf8(quoted));
}

TEST(QuoteValue, LongValuesAreTruncatedWithTheirLength) {
  const std::string big(16u << 20, 'x');
  const std::string quoted = quote_value(big);
  EXPECT_EQ(quoted, "'" + std::string(200, 'x') + "...' (16777216 bytes)");
  EXPECT_EQ(quote_value("abcdef", 3), "'abc...' (6 bytes)");
  EXPECT_EQ(quote_value("abc", 3), "'abc'");
  // Escaping never makes the shown part exceed 4 characters per input byte.
  EXPECT_LE(quote_value(std::string(1000, '\xff')).size(), 4u * kQuotedBytes + 32);
}

TEST(Utf8, WellFormedAndMalformed) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain"));
  EXPECT_TRUE(is_valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  for (const char* bad : {"\xff", "\xc3", "\x80", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                          "ok\xc3(", "\xf0\x9f\x98"}) {
    EXPECT_FALSE(is_valid_utf8(bad)) << quote_value(bad);
  }
}

TEST(Join, SeparatesTheItemsAndLeavesAnEmptyRangeEmpty) {
  EXPECT_EQ(join(std::vector<std::string>{"n1", "n2", "n3"}), "n1,n2,n3");
  EXPECT_EQ(join(std::set<std::string>{"b", "a"}, ", "), "a, b");
  EXPECT_EQ(join(std::vector<std::string>{}), "");
  EXPECT_EQ(join(std::vector<std::string>{"only"}), "only");
  EXPECT_EQ(join(std::vector<int>{1, 22}, "x", [](int v) { return std::to_string(v); }), "1x22");
}

TEST(WarnOnce, WarnsOncePerDistinctBadValueAndAgainAfterAGoodOne) {
  WarnOnce once;
  int warnings = 0;
  const auto read = [&](const std::string& value) {
    return once.decode(value, [&] {
      if (value != "good") throw InvalidArgument("bad " + value);
      return 7;
    }, [&](const InvalidArgument&) { ++warnings; });
  };
  EXPECT_FALSE(read("x").has_value());
  EXPECT_FALSE(read("x").has_value());
  EXPECT_EQ(warnings, 1);  // the same bad value again: not logged
  EXPECT_FALSE(read("y").has_value());
  EXPECT_EQ(warnings, 2);  // another bad value: logged
  EXPECT_EQ(read("good"), 7);
  EXPECT_FALSE(read("y").has_value());
  EXPECT_EQ(warnings, 3);  // after a good value the same bad one is news again
}

}  // namespace
}  // namespace hdp
