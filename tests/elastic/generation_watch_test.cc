// GenerationWatch (elastic/generation_watch.h) over a MemoryStore and a real redis-server: it
// starts after the stream's newest entry, returns the newest generation appended since its last
// call (woken by the append, not by its block running out), skips entries that do not decode,
// and a leader's publication appends the entry it waits for, whose delta gives the next record
// to an agent that holds the one before. Bounds: an append 200 ms into a 10 s
// block ends the wait within 5 s (a loaded 2-core machine); an idle 300 ms block within 3 s.
#include "elastic/generation_watch.h"

#include <gtest/gtest.h>

#include <thread>

#include "elastic/job_keys.h"
#include "elastic/membership_controller.h"
#include "elastic/memory_store.h"
#include "elastic/redis_store.h"
#include "tests/elastic/controller_fixture.h"
#include "tests/support/redis_server.h"

namespace hdp::elastic {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

void append(Store& store, const std::string& value) {
  store.commit(Transaction{}.add(Write::stream_append(keys::kGenerationLog, {{"gen", value}}, keys::kGenerationLogLength)));
}

void check_watch(const std::shared_ptr<Store>& store, const std::shared_ptr<Store>& writer) {
  append(*writer, "4");  // before the watch: not news
  GenerationWatch watch(store);
  auto start = Clock::now();
  EXPECT_EQ(watch.wait(300ms), std::nullopt);
  EXPECT_GE(Clock::now() - start, 250ms);
  EXPECT_LT(Clock::now() - start, 3s);

  append(*writer, "5");
  append(*writer, "not a number");  // skipped, logged
  append(*writer, "6");
  EXPECT_EQ(watch.wait(0ms), 6);
  EXPECT_EQ(watch.wait(0ms), std::nullopt);  // nothing since

  std::thread later([&] {
    std::this_thread::sleep_for(200ms);
    append(*writer, "7");
  });
  start = Clock::now();
  EXPECT_EQ(watch.wait(10s), 7);
  EXPECT_LT(Clock::now() - start, 5s);
  later.join();
}

TEST(GenerationWatch, FollowsTheStreamInMemory) {
  auto store = std::make_shared<MemoryStore>();
  check_watch(store, store);
}

TEST(GenerationWatch, FollowsTheStreamInRedis) {
  hdp::test::RedisServer server;
  auto connect = [&] { return std::make_shared<RedisStore>(parse_redis_url(server.url())); };
  check_watch(connect(), connect());  // two clients: a blocked read holds its connection
}

class GenerationWatchPublication : public test::ControllerFixture {};

TEST_F(GenerationWatchPublication, TheLeadersPublicationWakesIt) {
  GenerationWatch watch(store_);
  EXPECT_EQ(watch.wait(0ms), std::nullopt);
  auto leader = controller();
  join("n1");
  std::optional<std::int64_t> published;
  for (int tick = 0; tick < 5 && !published; ++tick) published = leader.tick(0);
  ASSERT_TRUE(published);
  EXPECT_EQ(watch.wait(1s), *published);
  join("n2");
  std::optional<std::int64_t> second;
  for (int tick = 0; tick < 5 && !second; ++tick) second = leader.tick(*published);
  ASSERT_TRUE(second);
  EXPECT_EQ(watch.wait(1s), *second);
}

// The stream entry carries the record's change: an agent holding generation g's record knows
// g+1's without reading gen:<g+1> (byte for byte what the leader stored), for a node lost and a
// node joined; one without a base learns the number only and reads the record.
TEST_F(GenerationWatchPublication, AnAgentHoldingTheRecordDerivesTheNextOneFromTheStream) {
  auto records = std::make_shared<GenerationRecords>();
  GenerationWatch watch(store_, records);
  EXPECT_EQ(watch.wait(0ms), std::nullopt);
  auto leader = controller();
  auto publish = [&](std::int64_t after) {
    std::optional<std::int64_t> g;
    for (int tick = 0; tick < 5 && !g; ++tick) g = leader.tick(after);
    return g;
  };
  for (const char* node : {"n1", "n2", "n3"}) join(node);
  const auto first = publish(0);
  ASSERT_TRUE(first);
  EXPECT_EQ(watch.wait(1s), *first);
  EXPECT_EQ(records->get(*first), nullptr);  // no record before the first: read it, as the agent does
  const auto stored = store_->get(keys::generation(*first));
  ASSERT_TRUE(stored);
  records->put(decode_generation(*stored, "gen"), *stored);

  expire("n2");
  const auto second = publish(*first);
  ASSERT_TRUE(second);
  EXPECT_EQ(watch.wait(1s), *second);
  ASSERT_NE(records->get(*second), nullptr);
  EXPECT_EQ(records->get(*second)->encoded, store_->get(keys::generation(*second)));
  EXPECT_EQ(records->get(*second)->generation.members.size(), 2u);

  join("n4");
  const auto third = publish(*second);
  ASSERT_TRUE(third);
  EXPECT_EQ(watch.wait(1s), *third);
  ASSERT_NE(records->get(*third), nullptr);
  EXPECT_EQ(records->get(*third)->encoded, store_->get(keys::generation(*third)));
  EXPECT_EQ(records->applied(), 2);
  EXPECT_EQ(records->missed(), 0);

  // An agent that held the first record and learned of the third from `gen` (no watch): the
  // stream's last entries carry it there, two deltas in order.
  GenerationRecords late;
  late.put(decode_generation(*stored, "gen"), *stored);
  const auto caught = catch_up(*store_, late, *third);
  ASSERT_NE(caught, nullptr);
  EXPECT_EQ(caught->encoded, store_->get(keys::generation(*third)));
  GenerationRecords none;  // holding nothing, there is nothing to apply deltas to
  EXPECT_EQ(catch_up(*store_, none, *third), nullptr);
}

}  // namespace
}  // namespace hdp::elastic
