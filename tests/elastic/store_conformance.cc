// The Store conformance suite: the semantics documented in elastic/store.h, checked the same way
// for every implementation. The suite is instantiated per backend in *_store_test.cc files, which
// carry their own CTest labels (unit for memory, integration for Redis).
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <functional>
#include <random>
#include <thread>

#include "common/error.h"
#include "tests/elastic/store_conformance.h"

namespace hdp::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;



TEST_P(StoreConformance, GetOfMissingKeyIsNullopt) { EXPECT_EQ(store_->get("absent"), std::nullopt); }

TEST_P(StoreConformance, SetThenGetRoundTrips) {
  store_->set("k", "v");
  EXPECT_EQ(store_->get("k"), "v");
}

TEST_P(StoreConformance, SetOverwrites) {
  store_->set("k", "first");
  store_->set("k", "second");
  EXPECT_EQ(store_->get("k"), "second");
}

TEST_P(StoreConformance, EmptyValueIsStoredAndDistinctFromMissing) {
  store_->set("empty", "");
  EXPECT_EQ(store_->get("empty"), "");
}

TEST_P(StoreConformance, EraseReportsWhetherTheKeyExisted) {
  store_->set("k", "v");
  EXPECT_TRUE(store_->erase("k"));
  EXPECT_FALSE(store_->erase("k"));
  EXPECT_EQ(store_->get("k"), std::nullopt);
}

TEST_P(StoreConformance, AddTreatsMissingAsZeroAndReturnsTheSum) {
  EXPECT_EQ(store_->add("counter", 5), 5);
  EXPECT_EQ(store_->add("counter", -7), -2);
  EXPECT_EQ(store_->get("counter"), "-2");
}

TEST_P(StoreConformance, AddOnNonIntegerValueThrowsInvalidArgument) {
  store_->set("text", "twelve");
  EXPECT_THROW(store_->add("text", 1), InvalidArgument);
  EXPECT_EQ(store_->get("text"), "twelve");
}

TEST_P(StoreConformance, AddFromSixteenThreadsSumsExactly) {
  constexpr int kThreads = 16, kAddsPerThread = 250;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this, t] {
      auto client = backend_->client();
      for (int i = 0; i < kAddsPerThread; ++i) client->add("sum", t + 1);
    });
  }
  for (auto& thread : threads) thread.join();
  // 250 * (1 + 2 + ... + 16)
  EXPECT_EQ(store_->get("sum"), std::to_string(kAddsPerThread * kThreads * (kThreads + 1) / 2));
}

TEST_P(StoreConformance, CompareAndSetWithNoExpectedValueCreatesOnlyWhenAbsent) {
  EXPECT_TRUE(store_->compare_and_set("k", std::nullopt, "mine"));
  EXPECT_FALSE(store_->compare_and_set("k", std::nullopt, "theirs"));
  EXPECT_EQ(store_->get("k"), "mine");
}

TEST_P(StoreConformance, CompareAndSetSwapsOnlyOnMatch) {
  store_->set("k", "1");
  EXPECT_FALSE(store_->compare_and_set("k", std::string_view("0"), "2"));
  EXPECT_EQ(store_->get("k"), "1");
  EXPECT_TRUE(store_->compare_and_set("k", std::string_view("1"), "2"));
  EXPECT_EQ(store_->get("k"), "2");
  EXPECT_FALSE(store_->compare_and_set("missing", std::string_view("1"), "2"));
  EXPECT_EQ(store_->get("missing"), std::nullopt);
}

TEST_P(StoreConformance, CompareAndSetRaceHasExactlyOneWinnerPerRound) {
  constexpr int kThreads = 8, kRounds = 40;
  std::atomic<int> winners[kRounds] = {};
  std::barrier sync(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto client = backend_->client();
      for (int round = 0; round < kRounds; ++round) {
        sync.arrive_and_wait();
        std::optional<std::string> expected;
        if (round > 0) expected = "round" + std::to_string(round - 1);
        std::optional<std::string_view> expected_view;
        if (expected) expected_view = *expected;
        if (client->compare_and_set("gen", expected_view, "round" + std::to_string(round))) ++winners[round];
        sync.arrive_and_wait();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int round = 0; round < kRounds; ++round) EXPECT_EQ(winners[round].load(), 1) << "round " << round;
}

TEST_P(StoreConformance, CompareAndSetLoopsFromManyThreadsLoseNoUpdate) {
  constexpr int kThreads = 8, kIncrements = 50;
  store_->set("value", "0");
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this] {
      auto client = backend_->client();
      for (int i = 0; i < kIncrements; ++i) {
        for (;;) {
          std::string current = *client->get("value");
          if (client->compare_and_set("value", std::string_view(current), std::to_string(std::stoi(current) + 1))) break;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(store_->get("value"), std::to_string(kThreads * kIncrements));
}

TEST_P(StoreConformance, KeyWithTtlExpires) {
  store_->set_with_ttl("lease", "alive", 150ms);
  EXPECT_EQ(store_->get("lease"), "alive");
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(store_->get("lease"), std::nullopt);
  EXPECT_FALSE(store_->erase("lease"));
}

TEST_P(StoreConformance, RefreshTtlKeepsAKeyAlive) {
  store_->set_with_ttl("lease", "alive", 300ms);
  for (int i = 0; i < 6; ++i) {
    std::this_thread::sleep_for(100ms);
    ASSERT_TRUE(store_->refresh_ttl("lease", 300ms, std::nullopt, {}).alive) << "refresh " << i;
  }
  // 600 ms after the first write, twice the TTL: alive only because of the refreshes.
  EXPECT_EQ(store_->get("lease"), "alive");
}

TEST_P(StoreConformance, RefreshTtlOfMissingOrExpiredKeyReturnsFalseAndCreatesNothing) {
  EXPECT_FALSE(store_->refresh_ttl("never", 1s, std::nullopt, {}).alive);
  EXPECT_FALSE(store_->refresh_ttl("never", 1s, std::string_view("revived?"), {}).alive);
  EXPECT_EQ(store_->get("never"), std::nullopt);
  store_->set_with_ttl("short", "x", 50ms);
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(store_->refresh_ttl("short", 1s, std::string_view("y"), {}).alive);
  EXPECT_EQ(store_->get("short"), std::nullopt);
}

TEST_P(StoreConformance, RefreshTtlRewritesTheValueAndReadsOtherKeys) {
  store_->set_with_ttl("lease", "v1", 300ms);
  store_->set("leader", "n1/abc");
  const std::string hostile("a\0b\r\n*3", 7);
  elastic::Refresh refresh = store_->refresh_ttl("lease", 300ms, std::string_view(hostile), {"leader", "missing", "lease"});
  EXPECT_TRUE(refresh.alive);
  ASSERT_EQ(refresh.values.size(), 3u);
  EXPECT_EQ(refresh.values[0], "n1/abc");
  EXPECT_EQ(refresh.values[1], std::nullopt);
  EXPECT_EQ(refresh.values[2], hostile);  // the reads see the refresh
  std::this_thread::sleep_for(200ms);
  ASSERT_TRUE(store_->refresh_ttl("lease", 300ms, std::nullopt, {}).alive);
  std::this_thread::sleep_for(200ms);  // 400 ms after the rewrite: alive only because of the refresh
  EXPECT_EQ(store_->get("lease"), hostile);
  // The reads are taken even when the key is gone.
  elastic::Refresh gone = store_->refresh_ttl("nothing", 1s, std::nullopt, {"leader"});
  EXPECT_FALSE(gone.alive);
  EXPECT_EQ(gone.values, (std::vector<std::optional<std::string>>{"n1/abc"}));
}

TEST_P(StoreConformance, RemainingTtlOfLeasedPermanentMissingAndExpiredKeys) {
  store_->set_with_ttl("lease", "v", 10s);
  store_->set("permanent", "v");
  store_->set_with_ttl("short", "v", 50ms);
  store_->commit(elastic::Transaction{}.add(elastic::Write::hash_set("hash", {{"a", "1"}})));
  std::this_thread::sleep_for(200ms);
  const auto ttls = store_->remaining_ttl({"lease", "permanent", "missing", "short", "hash"});
  ASSERT_EQ(ttls.size(), 5u);
  ASSERT_TRUE(ttls[0].has_value());
  // At most the TTL; at least the TTL less the 200 ms slept and a loaded machine's slack.
  EXPECT_LE(*ttls[0], 10s);
  EXPECT_GE(*ttls[0], 7s);
  EXPECT_EQ(ttls[1], std::nullopt) << "no TTL";
  EXPECT_EQ(ttls[2], std::nullopt) << "missing";
  EXPECT_EQ(ttls[3], std::nullopt) << "expired";
  EXPECT_EQ(ttls[4], std::nullopt) << "a hash without a TTL";
  ASSERT_TRUE(store_->refresh_ttl("lease", 20s, std::nullopt, {}).alive);
  EXPECT_GT(*store_->remaining_ttl({"lease"})[0], 10s) << "a refresh extends it";
  EXPECT_TRUE(store_->remaining_ttl({}).empty());
}

TEST_P(StoreConformance, PlainSetRemovesTheTtl) {
  store_->set_with_ttl("k", "leased", 150ms);
  store_->set("k", "permanent");
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(store_->get("k"), "permanent");
}

TEST_P(StoreConformance, AddAndCompareAndSetKeepTheTtl) {
  store_->set_with_ttl("counter", "1", 200ms);
  EXPECT_EQ(store_->add("counter", 1), 2);
  store_->set_with_ttl("cas", "a", 200ms);
  EXPECT_TRUE(store_->compare_and_set("cas", std::string_view("a"), "b"));
  std::this_thread::sleep_for(450ms);
  EXPECT_EQ(store_->get("counter"), std::nullopt);
  EXPECT_EQ(store_->get("cas"), std::nullopt);
}

TEST_P(StoreConformance, NonPositiveTtlIsRejected) {
  EXPECT_THROW(store_->set_with_ttl("k", "v", 0ms), InvalidArgument);
  EXPECT_THROW(store_->refresh_ttl("k", -5ms, std::nullopt, {}), InvalidArgument);
}

TEST_P(StoreConformance, WaitReturnsOnceAllKeysExist) {
  std::thread writer([this] {
    auto client = backend_->client();
    std::this_thread::sleep_for(100ms);
    client->set("a", "1");
    std::this_thread::sleep_for(100ms);
    client->set("b", "2");
  });
  const auto start = Clock::now();
  store_->wait({"a", "b"}, 5s);
  const auto elapsed = Clock::now() - start;
  writer.join();
  EXPECT_GE(elapsed, 190ms);
  EXPECT_LT(elapsed, 2s);
}

TEST_P(StoreConformance, WaitOnPresentKeysReturnsAtOnce) {
  store_->set("a", "1");
  const auto start = Clock::now();
  store_->wait({"a", "a"}, 5s);
  EXPECT_LT(Clock::now() - start, 100ms);
}

TEST_P(StoreConformance, WaitTimesOutWithinItsBound) {
  store_->set("a", "1");
  const auto start = Clock::now();
  EXPECT_THROW(store_->wait({"a", "never"}, 300ms), TimeoutError);
  const auto elapsed = Clock::now() - start;
  // The deadline is honoured to within one poll interval (50 ms) plus scheduling noise.
  EXPECT_GE(elapsed, 300ms);
  EXPECT_LT(elapsed, 450ms);
}

TEST_P(StoreConformance, HostileBytesInKeysAndValuesRoundTrip) {
  const std::vector<std::string> hostile = {
      "with space", "new\nline", "crlf\r\n*3\r\n$3\r\nSET\r\n", "star*", "question?", "[bracket]", "back\\slash",
      std::string("nul\0inside", 10), std::string("\0", 1), "\xff\xfe\x80 not utf-8", "$-1\r\n", "%s%n%b"};
  for (const auto& key : hostile) {
    for (const auto& value : hostile) store_->set(key, value + key);
    EXPECT_EQ(store_->get(key), hostile.back() + key) << "key of " << key.size() << " bytes";
  }
  std::vector<std::string> sorted = hostile;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(store_->keys(""), sorted);
}

TEST_P(StoreConformance, KeysListsOnlyThePrefixLiterallySorted) {
  for (const char* key : {"job:b", "job:a", "job*", "job*x", "jobs", "other"}) store_->set(key, "1");
  EXPECT_EQ(store_->keys("job:"), (std::vector<std::string>{"job:a", "job:b"}));
  // '*' in a prefix is a character, not a glob.
  EXPECT_EQ(store_->keys("job*"), (std::vector<std::string>{"job*", "job*x"}));
  EXPECT_EQ(store_->keys("nothing"), std::vector<std::string>{});
  EXPECT_EQ(store_->keys("").size(), 6u);
}

TEST_P(StoreConformance, KeysOmitsExpiredKeys) {
  store_->set_with_ttl("node:1", "x", 100ms);
  store_->set("node:2", "x");
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(store_->keys("node:"), std::vector<std::string>{"node:2"});
}

TEST_P(StoreConformance, SixteenMebibyteValuesRoundTripExactly) {
  std::string big(16u << 20, '\0');
  std::mt19937_64 rng(42);
  for (auto& byte : big) byte = static_cast<char>(rng());
  store_->set("big", big);
  auto back = store_->get("big");
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->size(), big.size());
  EXPECT_TRUE(*back == big);
}

}  // namespace
}  // namespace hdp::test

namespace hdp::test {
namespace {

using elastic::Transaction;
using elastic::Write;

TEST_P(StoreConformance, MultiGetReadsManyKeysInOrder) {
  store_->set("a", "1");
  store_->set("c", "3");
  auto values = store_->multi_get({"a", "b", "c", "a"});
  ASSERT_EQ(values.size(), 4u);
  EXPECT_EQ(values[0], "1");
  EXPECT_EQ(values[1], std::nullopt);
  EXPECT_EQ(values[2], "3");
  EXPECT_EQ(values[3], "1");
  EXPECT_TRUE(store_->multi_get({}).empty());
}

TEST_P(StoreConformance, CommitAppliesEveryWriteWhenAllConditionsHold) {
  store_->set("gen", "7");
  store_->set("old", "x");
  Transaction txn;
  txn.require("gen", "7").require_absent("leader");
  txn.add(Write::set("gen", "8"))
      .add(Write::set("gen:8", "members"))
      .add(Write::erase("old"))
      .add(Write::hash_set("state", {{"generation", "8"}, {"status", "running"}}))
      .add(Write::stream_append("events", {{"type", "resize"}}, 100));
  EXPECT_TRUE(store_->commit(txn));
  EXPECT_EQ(store_->get("gen"), "8");
  EXPECT_EQ(store_->get("gen:8"), "members");
  EXPECT_EQ(store_->get("old"), std::nullopt);
  EXPECT_EQ(store_->hash_get_all("state"),
            (std::map<std::string, std::string>{{"generation", "8"}, {"status", "running"}}));
  auto events = store_->stream_tail("events", 10);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].fields, (elastic::Fields{{"type", "resize"}}));
}

TEST_P(StoreConformance, CommitChangesNothingWhenAConditionFails) {
  store_->set("gen", "8");
  Transaction stale;
  stale.require("gen", "7").add(Write::set("gen", "8-from-a-stale-writer")).add(Write::hash_set("state", {{"step", "99"}}));
  EXPECT_FALSE(store_->commit(stale));
  Transaction present;
  present.require_absent("gen").add(Write::set("x", "1"));
  EXPECT_FALSE(store_->commit(present));
  EXPECT_EQ(store_->get("gen"), "8");
  EXPECT_EQ(store_->get("x"), std::nullopt);
  EXPECT_TRUE(store_->hash_get_all("state").empty());
}

TEST_P(StoreConformance, CommitRacesFenceEveryStaleWriter) {
  // 8 writers race to advance a generation 30 times; each round exactly one wins, and the state
  // hash written in the same commit always agrees with the generation.
  constexpr int kThreads = 8, kRounds = 30;
  std::atomic<int> wins{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto client = backend_->client();
      for (int round = 0; round < kRounds; ++round) {
        Transaction txn;
        if (round == 0) txn.require_absent("gen"); else txn.require("gen", std::to_string(round));
        txn.add(Write::set("gen", std::to_string(round + 1)))
            .add(Write::hash_set("state", {{"generation", std::to_string(round + 1)}, {"writer", std::to_string(t)}}));
        if (client->commit(txn)) ++wins;
        // Wait until someone has advanced this round before trying the next one.
        for (;;) {
          auto gen = client->get("gen");
          if (gen && std::stoi(*gen) > round) break;
          std::this_thread::yield();
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wins.load(), kRounds);
  EXPECT_EQ(store_->get("gen"), std::to_string(kRounds));
  EXPECT_EQ(store_->hash_get_all("state")["generation"], std::to_string(kRounds));
}

TEST_P(StoreConformance, CommitSetsTtlsAndRefreshesThemConditionally) {
  Transaction lease;
  lease.require_absent("leader").add(Write::set("leader", "me", std::chrono::milliseconds(200)));
  ASSERT_TRUE(store_->commit(lease));
  for (int i = 0; i < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    Transaction renew;
    renew.require("leader", "me").add(Write::expire("leader", std::chrono::milliseconds(200)));
    ASSERT_TRUE(store_->commit(renew)) << "renewal " << i;
  }
  Transaction foreign;
  foreign.require("leader", "someone-else").add(Write::expire("leader", std::chrono::milliseconds(60000)));
  EXPECT_FALSE(store_->commit(foreign));
  std::this_thread::sleep_for(std::chrono::milliseconds(450));
  EXPECT_EQ(store_->get("leader"), std::nullopt);
}

TEST_P(StoreConformance, HashSetMergesFields) {
  Transaction first, second;
  first.add(Write::hash_set("h", {{"a", "1"}, {"b", "2"}}));
  second.add(Write::hash_set("h", {{"b", "3"}, {"c", std::string("\0\r\n", 3)}}));
  ASSERT_TRUE(store_->commit(first));
  ASSERT_TRUE(store_->commit(second));
  EXPECT_EQ(store_->hash_get_all("h"),
            (std::map<std::string, std::string>{{"a", "1"}, {"b", "3"}, {"c", std::string("\0\r\n", 3)}}));
  EXPECT_TRUE(store_->hash_get_all("missing").empty());
}

TEST_P(StoreConformance, StreamKeepsTheNewestEntriesInOrderWithIncreasingIds) {
  for (int i = 0; i < 25; ++i) {
    Transaction txn;
    txn.add(Write::stream_append("events", {{"seq", std::to_string(i)}}, 10));
    ASSERT_TRUE(store_->commit(txn));
  }
  auto all = store_->stream_tail("events", 1000);
  ASSERT_EQ(all.size(), 10u);  // capped exactly
  for (int i = 0; i < 10; ++i) EXPECT_EQ(all[i].fields[0].second, std::to_string(15 + i));
  auto id_less = [](const std::string& a, const std::string& b) {
    auto split = [](const std::string& id) {
      auto dash = id.find('-');
      return std::pair(std::stoull(id.substr(0, dash)), std::stoull(id.substr(dash + 1)));
    };
    return split(a) < split(b);
  };
  for (int i = 1; i < 10; ++i) EXPECT_TRUE(id_less(all[i - 1].id, all[i].id)) << all[i - 1].id << " !< " << all[i].id;
  auto last3 = store_->stream_tail("events", 3);
  ASSERT_EQ(last3.size(), 3u);
  EXPECT_EQ(last3.back().fields[0].second, "24");
  EXPECT_TRUE(store_->stream_tail("nothing", 5).empty());
}

TEST_P(StoreConformance, StreamReadReturnsTheEntriesAfterAnIdOldestFirst) {
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(store_->commit(Transaction{}.add(Write::stream_append("s", {{"seq", std::to_string(i)}}, 100))));
  }
  auto all = store_->stream_read("s", "0", 100, 0ms);
  ASSERT_EQ(all.size(), 5u);
  EXPECT_EQ(all.front().fields, (elastic::Fields{{"seq", "0"}}));
  auto after_second = store_->stream_read("s", all[1].id, 2, 0ms);  // capped at `count`
  ASSERT_EQ(after_second.size(), 2u);
  EXPECT_EQ(after_second[0].id, all[2].id);
  EXPECT_EQ(after_second[1].id, all[3].id);
  EXPECT_TRUE(store_->stream_read("s", all.back().id, 10, 0ms).empty());
  EXPECT_TRUE(store_->stream_read("missing", "0", 10, 0ms).empty());
  EXPECT_THROW(store_->stream_read("s", "not-an-id", 10, 0ms), InvalidArgument);
  EXPECT_THROW(store_->stream_read("s", "0", 0, 0ms), InvalidArgument);
}

// The read blocks until another client appends (not until `block` runs out), and gives up after
// `block` when nobody does. Bounds: the append comes 300 ms in, the read must end well before its
// 10 s block (5 s allows for a loaded machine); an unanswered 300 ms block ends within 3 s.
TEST_P(StoreConformance, StreamReadWaitsForAnAppendByAnotherClient) {
  ASSERT_TRUE(store_->commit(Transaction{}.add(Write::stream_append("s", {{"n", "1"}}, 10))));
  const std::string last = store_->stream_tail("s", 1).at(0).id;
  auto writer = backend_->client();
  std::thread append([&] {
    std::this_thread::sleep_for(300ms);
    writer->commit(Transaction{}.add(Write::stream_append("s", {{"n", "2"}}, 10)));
  });
  const auto start = Clock::now();
  auto entries = store_->stream_read("s", last, 10, 10s);
  const auto waited = Clock::now() - start;
  append.join();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].fields, (elastic::Fields{{"n", "2"}}));
  EXPECT_GE(waited, 250ms);
  EXPECT_LT(waited, 5s);

  const auto idle = Clock::now();
  EXPECT_TRUE(store_->stream_read("s", entries[0].id, 10, 300ms).empty());
  EXPECT_GE(Clock::now() - idle, 250ms);
  EXPECT_LT(Clock::now() - idle, 3s);
  // A stream that does not exist yet is waited on too.
  std::thread create([&] {
    std::this_thread::sleep_for(200ms);
    writer->commit(Transaction{}.add(Write::stream_append("new", {{"n", "1"}}, 10)));
  });
  EXPECT_EQ(store_->stream_read("new", "0", 10, 10s).size(), 1u);
  create.join();
}

// A read of stream "s" blocked for 10 s on `store` returns nothing within 2 s (a loaded machine)
// once `wake` ran, 200 ms into it.
void expect_woken(elastic::Store& store, const std::function<void()>& wake) {
  std::atomic<bool> returned{false};
  std::vector<elastic::StreamEntry> got{{"x", {}}};
  const auto start = Clock::now();
  std::thread reader([&] {
    got = store.stream_read("s", "0", 10, 10s);
    returned = true;
  });
  std::this_thread::sleep_for(200ms);  // the read is blocked by now
  EXPECT_FALSE(returned);
  wake();
  reader.join();
  EXPECT_TRUE(got.empty());
  EXPECT_LT(Clock::now() - start, 2s);
}

// stop_stream_reads() wakes a read blocked for 10 s (bound: 2 s, for a loaded machine) and makes
// every later one return at once; the store's other calls go on working.
TEST_P(StoreConformance, StopStreamReadsWakesABlockedReadAndLaterOnes) {
  expect_woken(*store_, [&] { store_->stop_stream_reads(); });
  const auto later = Clock::now();
  EXPECT_TRUE(store_->stream_read("s", "0", 10, 10s).empty());
  EXPECT_LT(Clock::now() - later, 1s);
  store_->set("k", "v");
  EXPECT_EQ(store_->get("k"), "v");
}

// interrupt_stream_reads() wakes the read blocked now (bound: 2 s of its 10, for a loaded machine)
// and no later one: the next read waits for, and returns, an entry appended meanwhile. With none
// under way it wakes the next one to start, and only that one.
TEST_P(StoreConformance, InterruptStreamReadsWakesTheBlockedReadOnly) {
  expect_woken(*store_, [&] { store_->interrupt_stream_reads(); });
  auto client = backend_->client();  // a blocked read holds a Redis store's one connection
  std::thread writer([&] {
    std::this_thread::sleep_for(300ms);
    client->commit(Transaction{}.add(Write::stream_append("s", {{"k", "v"}}, 10)));
  });
  const auto later = Clock::now();
  const auto entries = store_->stream_read("s", "0", 10, 10s);
  writer.join();
  ASSERT_EQ(entries.size(), 1u) << "a read after the interruption blocks as usual until an entry comes";
  EXPECT_GE(Clock::now() - later, 250ms);
  // With no read under way, the next one to start is the one woken, and only it.
  store_->interrupt_stream_reads();
  const auto next = Clock::now();
  EXPECT_TRUE(store_->stream_read("s", entries[0].id, 10, 10s).empty());
  EXPECT_LT(Clock::now() - next, 2s);
  const auto after = Clock::now();
  EXPECT_TRUE(store_->stream_read("s", entries[0].id, 10, 300ms).empty());
  EXPECT_GE(Clock::now() - after, 250ms);
  store_->set("k", "v");
  EXPECT_EQ(store_->get("k"), "v");
}

TEST_P(StoreConformance, CommitWithAWrongTypeWritesNothingAndSaysWhy) {
  Transaction make_hash;
  make_hash.add(Write::hash_set("h", {{"f", "v"}}));
  ASSERT_TRUE(store_->commit(make_hash));
  Transaction bad;
  bad.add(Write::set("a", "1")).add(Write::stream_append("h", {{"x", "y"}}, 5));
  EXPECT_THROW(store_->commit(bad), InvalidArgument);
  EXPECT_EQ(store_->get("a"), std::nullopt);
  EXPECT_THROW(store_->get("h"), InvalidArgument);
}

// Issue 13, defect 5: "GET failed: WRONGTYPE..." and "key holds a string, not a hash" named no key.
TEST_P(StoreConformance, WrongTypeErrorsNameTheKey) {
  Transaction make_hash;
  make_hash.add(Write::hash_set("the-hash", {{"f", "v"}}));
  ASSERT_TRUE(store_->commit(make_hash));
  store_->set("the-string", "x");
  store_->set("ok", "1");
  auto expect_named = [](const std::string& what, const std::string& key, const std::function<void()>& call) {
    try {
      call();
      ADD_FAILURE() << what << ": no error";
    } catch (const elastic::WrongType& e) {
      EXPECT_EQ(e.key(), key) << what;
      // The message names the key as the store holds it (a PrefixStore's prefix included), quoted.
      EXPECT_NE(std::string(e.what()).find(key + "'"), std::string::npos) << what << ": " << e.what();
    }
  };
  expect_named("get", "the-hash", [&] { store_->get("the-hash"); });
  expect_named("add", "the-hash", [&] { store_->add("the-hash", 1); });
  expect_named("hash_get_all", "the-string", [&] { store_->hash_get_all("the-string"); });
  expect_named("stream_tail", "the-hash", [&] { store_->stream_tail("the-hash", 1); });
  expect_named("commit condition", "the-hash", [&] {
    store_->commit(Transaction{}.require("ok", "1").require_absent("the-hash").add(Write::set("written", "1")));
  });
  expect_named("commit write", "the-string",
               [&] { store_->commit(Transaction{}.add(Write::set("written", "1")).add(Write::hash_set("the-string", {{"a", "b"}}))); });
  EXPECT_EQ(store_->get("written"), std::nullopt);  // a commit that throws wrote nothing
  // Reads of another type, like multi_get, read as missing.
  auto result = store_->commit(Transaction{}.read("the-hash").read("the-string"));
  ASSERT_EQ(result.values.size(), 2u);
  EXPECT_EQ(result.values[0], std::nullopt);
  EXPECT_EQ(result.values[1], "x");
  EXPECT_EQ(store_->refresh_ttl("the-string", 1s, std::nullopt, {"the-hash"}).values[0], std::nullopt);
}

TEST_P(StoreConformance, CommitRejectsMalformedWrites) {
  Transaction no_ttl, no_fields, no_cap;
  no_ttl.add(Write::expire("k", std::chrono::milliseconds(0)));
  no_fields.add(Write::hash_set("h", {}));
  no_cap.add(Write::stream_append("s", {{"a", "b"}}, 0));
  EXPECT_THROW(store_->commit(no_ttl), InvalidArgument);
  EXPECT_THROW(store_->commit(no_fields), InvalidArgument);
  EXPECT_THROW(store_->commit(no_cap), InvalidArgument);
}

}  // namespace
}  // namespace hdp::test
