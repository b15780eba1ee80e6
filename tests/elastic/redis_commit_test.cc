// The commit script's encoding and the decoding of its reply (elastic/redis_commit.h), without a
// server: the KEYS and ARGV a Transaction becomes, and the CommitResult or error its reply gives.
#include "elastic/redis_commit.h"

#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

#include "elastic/store.h"

namespace hdp::elastic {
namespace {

using std::chrono::milliseconds;

RedisReply reply(RedisReply::Type type) {
  RedisReply out;
  out.type = type;
  return out;
}
RedisReply integer(long long value) {
  RedisReply out = reply(RedisReply::Type::kInteger);
  out.integer = value;
  return out;
}
RedisReply text(std::string value) {
  RedisReply out = reply(RedisReply::Type::kString);
  out.str = std::move(value);
  return out;
}
RedisReply array(std::vector<RedisReply> elements) {
  RedisReply out = reply(RedisReply::Type::kArray);
  out.elements = std::move(elements);
  return out;
}

Transaction every_kind() {
  Transaction txn;
  txn.require("c1", "v1").require_absent("c2");
  txn.add(Write::set("s", "value", milliseconds(1500)))
      .add(Write::set("s0", "forever"))
      .add(Write::erase("d"))
      .add(Write::expire("e", milliseconds(20)))
      .add(Write::hash_set("h", {{"f1", "a"}, {"f2", "b"}}))
      .add(Write::stream_append("x", {{"k", "v"}}, 7));
  txn.read("r1").read("r2");
  return txn;
}

TEST(RedisCommit, EncodesKeysThenArgumentsInTheScriptsOrder) {
  const Transaction txn = every_kind();
  std::deque<std::string> owned;
  const std::vector<std::string_view> encoded = encode_commit(txn, owned);
  const std::vector<std::string_view> expected{
      // KEYS: conditions, one per write, reads
      "c1", "c2", "s", "s0", "d", "e", "h", "x", "r1", "r2",
      // ARGV: counts, conditions, writes
      "2", "2", "1", "v1", "0", "",                      //
      "set", "value", "1500", "set", "forever", "0",     //
      "del", "pexpire", "20",                            //
      "hset", "2", "f1", "a", "f2", "b",                 //
      "xadd", "7", "1", "k", "v"};
  EXPECT_EQ(encoded, expected);
  EXPECT_EQ(commit_key_count(txn), 10u);
}

TEST(RedisCommit, DecodesAppliedAndTheReads) {
  const Transaction txn = every_kind();
  std::deque<std::string> owned;
  const auto encoded = encode_commit(txn, owned);
  const CommitResult result = decode_commit(array({integer(1), text("one"), RedisReply{}}), txn, encoded, "h:1");
  EXPECT_TRUE(result.applied);
  EXPECT_EQ(result.values, (std::vector<std::optional<std::string>>{"one", std::nullopt}));
  EXPECT_FALSE(decode_commit(array({integer(0), RedisReply{}, RedisReply{}}), txn, encoded, "h:1").applied);
}

TEST(RedisCommit, AWrongTypeNamesTheKey) {
  const Transaction txn = every_kind();
  std::deque<std::string> owned;
  const auto encoded = encode_commit(txn, owned);
  try {
    decode_commit(array({integer(-1), integer(7), text("string"), text("hash")}), txn, encoded, "h:1");
    FAIL() << "no WrongType";
  } catch (const WrongType& e) {
    EXPECT_EQ(e.key(), "h");
    EXPECT_NE(std::string(e.what()).find("holds a string, not a hash; nothing was written"), std::string::npos)
        << e.what();
  }
}

TEST(RedisCommit, AnotherReplyIsUnexpected) {
  const Transaction txn = every_kind();
  std::deque<std::string> owned;
  const auto encoded = encode_commit(txn, owned);
  EXPECT_THROW(decode_commit(integer(1), txn, encoded, "h:1"), InvalidArgument);
  EXPECT_THROW(decode_commit(array({integer(1)}), txn, encoded, "h:1"), InvalidArgument);
}

}  // namespace
}  // namespace hdp::elastic
