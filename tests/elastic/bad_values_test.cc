// Values in Redis that hdp did not write (issue 13, defects 3-7), on a MemoryStore: numbers out of
// range are refused and never wrap, a bad read is an error about its key that a worker rides out
// up to a stated bound, a garbage `leader` is logged and replaced, values reach logs and errors
// only quoted and truncated, and `hdp status` data is validated as UTF-8.
#include <gtest/gtest.h>

#include <limits>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "elastic/elastic_context.h"
#include "elastic/forwarding_store.h"
#include "elastic/job_keys.h"
#include "elastic/job_state.h"
#include "elastic/leader_lease.h"
#include "elastic/membership_controller.h"
#include "elastic/memory_store.h"
#include "elastic/node_registration.h"
#include "elastic/prefix_store.h"
#include "tests/elastic/controller_fixture.h"
#include "tests/support/log_capture.h"

namespace hdp::elastic {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

using hdp::test::LogCapture;

std::string message_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InvalidArgument";
  return "";
}

// The bad-value tests give their nodes one slot each.
class BadValues : public test::ControllerFixture {};

// ---- defect 3: every number read from Redis is range-checked; the leader never wraps ----

TEST(GenerationNumbers, AreBoundedBelowInt64Overflow) {
  EXPECT_EQ(decode_generation_number(std::to_string(kMaxGeneration), "gen"), kMaxGeneration);
  for (const std::string& bad : {std::to_string(kMaxGeneration + 1), std::to_string(kInt64Max), std::string("-1"),
                                 std::string("99999999999999999999")}) {
    const std::string message = message_of([&] { decode_generation_number(bad, "gen"); });
    EXPECT_NE(message.find("'gen'"), std::string::npos) << message;
    EXPECT_NE(message.find("[0, 9007199254740991]"), std::string::npos) << message;
  }
}

TEST(GenerationNumbers, JsonIntegersAreCheckedBeforeTheyAreNarrowed) {
  // get<int>() of 2^32 + 2 is 2, of 2^32 is 0: the values must be refused, not truncated.
  const std::string lease = R"({"node":"x","incarnation":"1","host":"h","pid":1,"version":"v","slots":4294967298,
                                "healthy":[0],"last_generation":0})";
  EXPECT_NE(message_of([&] { decode_node_lease(lease, "lease:x/1"); }).find("'slots'"), std::string::npos);
  const std::string healthy = R"({"node":"x","incarnation":"1","host":"h","pid":1,"version":"v","slots":2,
                                  "healthy":[4294967296],"last_generation":0})";
  EXPECT_NE(message_of([&] { decode_node_lease(healthy, "lease:x/1"); }).find("'healthy'"), std::string::npos);
  const std::string pid = R"({"node":"x","incarnation":"1","host":"h","pid":18446744073709551615,"version":"v",
                              "slots":1,"healthy":[0],"last_generation":0})";
  EXPECT_NE(message_of([&] { decode_node_lease(pid, "lease:x/1"); }).find("'pid'"), std::string::npos);
  const std::string last = R"({"node":"x","incarnation":"1","host":"h","pid":1,"version":"v","slots":1,
                               "healthy":[0],"last_generation":9223372036854775807})";
  EXPECT_NE(message_of([&] { decode_node_lease(last, "lease:x/1"); }).find("'last_generation'"), std::string::npos);
  const std::string record = R"({"generation":9223372036854775807,"status":"running","world_size":0,"members":[],
                                 "joins_seen":0,"created_ms":0})";
  EXPECT_NE(message_of([&] { decode_generation(record, "gen:1"); }).find("'generation'"), std::string::npos);
  const std::string zero = R"({"generation":0,"status":"running","world_size":0,"members":[],"joins_seen":0,
                               "created_ms":0})";
  EXPECT_NE(message_of([&] { decode_generation(zero, "gen:1"); }).find("'generation'"), std::string::npos);
}

TEST_F(BadValues, AGenAtInt64MaxIsRefusedAndNothingIsWritten) {
  join("a", 1);
  auto leader = controller();
  ASSERT_EQ(leader.tick(), 1);
  store_->set(keys::kGeneration, std::to_string(kInt64Max));
  const std::string message = message_of([&] { leader.tick(); });
  EXPECT_NE(message.find("'gen'"), std::string::npos) << message;
  EXPECT_NE(message.find("9223372036854775807' is not an integer in [0, 9007199254740991]"), std::string::npos)
      << message;
  EXPECT_EQ(store_->get(keys::kGeneration), std::to_string(kInt64Max));
}

TEST_F(BadValues, TheLeaderRefusesToPublishAboveTheLargestGenerationInsteadOfWrapping) {
  auto& a = join("a", 1);
  join("b", 1);
  auto leader = controller();
  ASSERT_EQ(leader.tick(), 1);
  // An agent reports the largest generation there can be (it saw it in `gen`); then b dies.
  ASSERT_TRUE(a.heartbeat({0}, kMaxGeneration).alive);
  expire("b");
  LogCapture log;
  EXPECT_EQ(leader.tick(), std::nullopt);
  EXPECT_EQ(store_->get(keys::kGeneration), "1");  // nothing published, nothing wrapped
  EXPECT_NE(log.text().find("refusing to publish"), std::string::npos) << log.text();
}

TEST_F(BadValues, AJoinCounterFarAheadCostsBoundedWorkPerTick) {
  join("a", 1);
  auto leader = controller();
  ASSERT_EQ(leader.tick(), 1);
  store_->set(keys::kJoinCount, "1000000000000");  // in range, but no announcement behind it
  const auto start = Clock::now();
  EXPECT_EQ(leader.tick(), std::nullopt);
  // Reading 10^12 announcement keys would take hours; 1024 per tick take milliseconds. 2 s leaves
  // room for 4 tests on 2 cores.
  EXPECT_LT(Clock::now() - start, 2s);
  store_->set(keys::kJoinCount, std::to_string(kInt64Max));
  EXPECT_NE(message_of([&] { leader.tick(); }).find("'joins'"), std::string::npos);
}

TEST_F(BadValues, AGenerationRecordDescribingAnotherGenerationIsNamed) {
  join("a", 1);
  auto leader = controller();
  ASSERT_EQ(leader.tick(), 1);
  store_->set(keys::generation(5), *store_->get(keys::generation(1)));  // says "generation": 1
  store_->set(keys::kGeneration, "5");
  const std::string message = message_of([&] { leader.tick(); });
  EXPECT_NE(message.find("'gen:5'"), std::string::npos) << message;
  EXPECT_NE(message.find("describes generation 1"), std::string::npos) << message;
}

// ---- defect 4: a bad read is an error about its key, retried, fatal only beyond a bound ----

class WorkerBadReads : public ::testing::Test {
 protected:
  void publish(std::int64_t g) {
    Generation generation{.number = g};
    generation.members.push_back({"a", "inc-a", "127.0.0.1", {0}, 0});
    generation.assign_ranks();
    store_->set(keys::generation(g), encode(generation));
    store_->set(keys::kGeneration, std::to_string(g));
  }
  std::shared_ptr<MemoryStore> store_ = std::make_shared<MemoryStore>();
};

TEST_F(WorkerBadReads, GarbageInGenDuringTrainingIsRiddenOut) {
  publish(1);
  ElasticContext ctx(store_, {"job", "a", "inc-a", 0});
  const Membership m = ctx.wait_for_next(0, 1s);
  for (const char* garbage : {"banana", "9223372036854775807", "-4", ""}) {
    store_->set(keys::kGeneration, garbage);
    std::this_thread::sleep_for(110ms);  // changed() reads at most every 100 ms
    EXPECT_FALSE(ctx.changed(m)) << garbage;
  }
  // A key of another type (a hash where the number should be) is the same kind of error.
  store_->erase(keys::kGeneration);
  store_->commit(Transaction{}.add(Write::hash_set(keys::kGeneration, {{"f", "v"}})));
  std::this_thread::sleep_for(110ms);
  EXPECT_FALSE(ctx.changed(m));
  EXPECT_EQ(ctx.bad_value_reads(), 5);
  store_->erase(keys::kGeneration);
  publish(2);
  std::this_thread::sleep_for(110ms);
  EXPECT_TRUE(ctx.changed(m));
}

// changed() keeps the number it read for 100 ms. A number read before the worker's generation was
// published is that generation's past, not a change: asked about the new generation within the
// 100 ms, it reads again (it once said "changed", and the new generation's bootstrap gave up as
// superseded before its neighbours connected).
TEST_F(WorkerBadReads, ANumberReadBeforeTheGenerationWasPublishedIsNotAChange) {
  publish(1);
  ElasticContext ctx(store_, {"job", "a", "inc-a", 0});
  const Membership first = ctx.wait_for_next(0, 1s);
  EXPECT_FALSE(ctx.changed(first));  // reads 1
  publish(2);
  const Membership second = ctx.wait_for_next(first.generation, 1s);
  ASSERT_EQ(second.generation, 2);
  EXPECT_FALSE(ctx.changed(second));
  EXPECT_TRUE(ctx.changed(first));
}

TEST_F(WorkerBadReads, WaitingRidesOutBadValuesUntilAGoodGenerationAppears) {
  store_->set(keys::kGeneration, "banana");
  ElasticContext ctx(store_, {"job", "a", "inc-a", 0});
  std::jthread repair([&] {  // joined on the way out, even when wait_for_next throws
    std::this_thread::sleep_for(300ms);
    store_->set(keys::generation(1), "{not json");  // a bad record: also ridden out
    store_->set(keys::kGeneration, "1");
    std::this_thread::sleep_for(300ms);
    publish(1);
  });
  const Membership m = ctx.wait_for_next(0, 10s);
  repair.join();
  EXPECT_EQ(m.generation, 1);
  EXPECT_GE(ctx.bad_value_reads(), 2);
}

TEST_F(WorkerBadReads, BadValuesThatPersistBeyondTheLimitAreFatalNamingTheKey) {
  publish(1);
  ElasticContext ctx(store_, {"job", "a", "inc-a", 0}, 300ms);
  const Membership m = ctx.wait_for_next(0, 1s);
  store_->set(keys::kGeneration, "banana");
  const auto start = Clock::now();
  std::string message;
  try {
    while (Clock::now() - start < 10s) {
      ctx.changed(m);
      std::this_thread::sleep_for(20ms);
    }
  } catch (const InvalidArgument& e) {
    message = e.what();
  }
  const auto lasted = Clock::now() - start;
  EXPECT_NE(message.find("'gen'"), std::string::npos) << message;
  EXPECT_NE(message.find("beyond the limit of 300 ms"), std::string::npos) << message;
  // Fatal after the limit, not before; within the limit plus 1 s of scheduling slack.
  EXPECT_GE(lasted, 300ms);
  EXPECT_LT(lasted, 1300ms);
  // wait_for_next applies the same limit to a streak that continues.
  EXPECT_THROW(ctx.wait_for_next(1, 5s), InvalidArgument);
}

// ---- defect 5: store errors name the key; a garbage `leader` is logged and replaced ----

TEST(LeaderId, Form) {
  EXPECT_TRUE(is_leader_id("n1/3a718a0c77865d82"));
  EXPECT_TRUE(is_leader_id("rack/1/n1/3a718a0c77865d82"));
  for (const char* bad : {"", "banana", "n1/", "/3a718a0c77865d82", "n1/3A718A0C77865D82", "n1/3a718a0c77865d8"}) {
    EXPECT_FALSE(is_leader_id(bad)) << bad;
  }
}

class LeaderGarbage : public ::testing::Test {
 protected:
  std::shared_ptr<MemoryStore> memory_ = std::make_shared<MemoryStore>();
  std::shared_ptr<Store> store_ = std::make_shared<PrefixStore>(memory_, "hdp:j:");
  const std::string id_ = "n1/0123456789abcdef";
};

TEST_F(LeaderGarbage, AStringNoAgentWritesIsLoggedAndReplacedAfterTheTtl) {
  store_->set(keys::kLeader, std::string("ban\0ana", 7));  // no TTL: it would block leadership forever
  LeaderLease lease(store_, id_, 200ms);
  LogCapture log;
  EXPECT_FALSE(lease.try_acquire_or_renew());
  EXPECT_NE(log.text().find("'ban\\0ana'"), std::string::npos) << log.text();
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(lease.try_acquire_or_renew());  // a value with a TTL would have had the chance to expire
  std::this_thread::sleep_for(150ms);
  EXPECT_TRUE(lease.try_acquire_or_renew());
  EXPECT_EQ(store_->get(keys::kLeader), id_);
  EXPECT_TRUE(lease.try_acquire_or_renew());  // and renews it as usual
}

TEST_F(LeaderGarbage, AKeyOfAnotherTypeIsNamedAndReplaced) {
  store_->commit(Transaction{}.add(Write::hash_set(keys::kLeader, {{"x", "y"}})));
  LeaderLease lease(store_, id_, 200ms);
  LogCapture log;
  // As the agent calls it: the holder comes from a multi_get, which reads a hash as missing.
  EXPECT_FALSE(lease.try_acquire_or_renew(store_->multi_get({keys::kLeader})[0]));
  EXPECT_NE(log.text().find("hdp:j:leader' holds a hash, not a string"), std::string::npos) << log.text();
  std::this_thread::sleep_for(250ms);
  EXPECT_TRUE(lease.try_acquire_or_renew(store_->multi_get({keys::kLeader})[0]));
  EXPECT_EQ(store_->get(keys::kLeader), id_);
}

TEST_F(LeaderGarbage, ALeaderIdOfTheRightFormIsLeftToItsTtl) {
  store_->set_with_ttl(keys::kLeader, "n2/fedcba9876543210", 400ms);
  LeaderLease lease(store_, id_, 100ms);
  EXPECT_FALSE(lease.try_acquire_or_renew());
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(lease.try_acquire_or_renew());  // longer than our TTL, but a live leader's value
  std::this_thread::sleep_for(250ms);
  EXPECT_TRUE(lease.try_acquire_or_renew());  // expired
}

TEST_F(LeaderGarbage, AGarbageValueReplacedMeanwhileIsNotOverwritten) {
  store_->set(keys::kLeader, "banana");
  LeaderLease lease(store_, id_, 100ms);
  EXPECT_FALSE(lease.try_acquire_or_renew());
  std::this_thread::sleep_for(150ms);
  store_->set_with_ttl(keys::kLeader, "n3/00000000000000ff", 1s);  // another candidate won
  // Our caller read "banana" before that: the replacement requires it and changes nothing.
  EXPECT_FALSE(lease.try_acquire_or_renew(std::optional<std::string>("banana")));
  EXPECT_EQ(store_->get(keys::kLeader), "n3/00000000000000ff");
}

// ---- defect 6: stored values reach logs and errors quoted and truncated ----

TEST_F(BadValues, ASixteenMebibyteBrokenReasonIsLoggedTruncated) {
  join("a", 1);
  auto leader = controller();
  ASSERT_EQ(leader.tick(), 1);
  std::string reason(16u << 20, 'r');
  reason[3] = '\0';
  store_->set(keys::broken(1), reason);
  LogCapture log;
  ASSERT_EQ(leader.tick(), 2);
  const std::string text = log.text();
  EXPECT_LT(text.size(), 4096u) << "the value went whole into the log";
  EXPECT_NE(text.find("'rrr\\0rrr"), std::string::npos) << text.substr(0, 1000);
  EXPECT_NE(text.find("...' (16777216 bytes)"), std::string::npos) << text.substr(0, 1000);
}

TEST(QuotedErrors, ANulInAValueDoesNotCutTheMessage) {
  const std::string message = message_of([] { decode_generation_number(std::string("12\0tail", 7), "gen"); });
  EXPECT_NE(message.find("'12\\0tail' is not an integer"), std::string::npos) << message;
  const std::string state = message_of([] { validate_state_field("status", std::string("run\0\n", 5)); });
  EXPECT_NE(state.find("status 'run\\0\\n' is not one of"), std::string::npos) << state;
}

TEST(StatusSnapshot, TrainingFiguresMustBeFiniteNumbers) {
  for (const char* bad : {"nan", "inf", "abc", "", "1.5x", "1e999"}) {
    const std::string message = message_of([&] { validate_state_field("loss", bad); });
    EXPECT_NE(message.find("field 'loss' is '" + std::string(bad) + "', not a finite number"), std::string::npos)
        << message;
  }
  for (const char* good : {"2.75", "0", "1e-05", "-3.5"}) EXPECT_NO_THROW(validate_state_field("lr", good)) << good;
  EXPECT_NO_THROW(validate_state_field("status", "stopped"));
}

// ---- defect 7: what `hdp status --json` prints is validated as UTF-8, naming key and field ----

TEST(StatusSnapshot, NonUtf8FieldsAreNamedNotPassedOn) {
  auto store = std::make_shared<MemoryStore>();
  JobState job(store);
  store->commit(Transaction{}.add(Write::hash_set(keys::kState, {{"status", "running"}, {"last_ckpt_path", "/ck\xff"}})));
  std::string message = message_of([&] { job.snapshot(10); });
  EXPECT_NE(message.find("'state'"), std::string::npos) << message;
  EXPECT_NE(message.find("field 'last_ckpt_path' is '/ck\\xff', not UTF-8"), std::string::npos) << message;

  store->erase(keys::kState);
  store->commit(Transaction{}.add(event_write("note", {{"te\xc3xt", "ok"}})));
  message = message_of([&] { job.snapshot(10); });
  EXPECT_NE(message.find("'events'"), std::string::npos) << message;
  EXPECT_NE(message.find("field 'te\\xc3xt'"), std::string::npos) << message;

  store->erase(keys::kEvents);
  store->set(keys::kLeader, "\xff\xfe");
  message = message_of([&] { job.snapshot(10); });
  EXPECT_NE(message.find("'leader': '\\xff\\xfe' is not <node>/<incarnation>"), std::string::npos) << message;
}

}  // namespace
}  // namespace hdp::elastic

namespace hdp::elastic {
namespace {

// `state` and `events` are for people and tools: a string written into either (a value of another
// type) must not stop a registration, a publication or a worker's fenced report. Each writer erases
// it and writes (before, an agent starting then exited 2 and rank 0's report killed its worker).
TEST_F(BadValues, AStringInTheStateHashOrTheEventStreamStopsNoWriter) {
  store_->set(keys::kEvents, "garbage");
  store_->set(keys::kState, "garbage");
  join("a");  // its announcement commit appends a `join` event
  auto leader = controller();
  ASSERT_EQ(leader.tick(), 1);  // writes `state` and a `resize` event
  store_->set(keys::kState, "garbage");
  JobState job(store_);
  EXPECT_TRUE(job.fenced_update(1, {{"step", "7"}}));
  EXPECT_EQ(store_->hash_get_all(keys::kState).at("step"), "7");
  store_->set(keys::kEvents, "garbage");
  job.event("note", {});
  EXPECT_EQ(store_->stream_tail(keys::kEvents, 5).size(), 1u);
}

}  // namespace
}  // namespace hdp::elastic

namespace hdp::elastic {
namespace {

// The training curves' history: rank 0's fenced report appends one sample per step, Redis keeps
// the newest kSamplesKept, the snapshot reads and validates them, and a string written over the
// stream stops no writer.
TEST(Samples, AppendedWithTheFencedReportCappedAndValidated) {
  auto store = std::make_shared<MemoryStore>();
  store->set(keys::kGeneration, "3");
  JobState job(store);
  const std::size_t total = kSamplesKept + 5;
  for (std::size_t step = 1; step <= total; ++step) {
    ASSERT_TRUE(job.fenced_update(3, {{"step", std::to_string(step)}},
                                  {sample_write({{"step", std::to_string(step)}, {"loss", "2.5"}, {"world_size", "4"}})}));
  }
  EXPECT_FALSE(job.fenced_update(2, {{"step", "1"}}, {sample_write({{"step", "1"}})})) << "a stale report wrote";
  store->erase(keys::kGeneration);  // a snapshot reads the record `gen` names; this test has none
  const JobSnapshot snapshot = job.snapshot(0, kSamplesKept + 100);
  ASSERT_EQ(snapshot.samples.size(), kSamplesKept);
  EXPECT_EQ(snapshot.samples.front().fields[0], (std::pair<std::string, std::string>{"step", "6"}));
  EXPECT_EQ(snapshot.samples.back().fields[0], (std::pair<std::string, std::string>{"step", std::to_string(total)}));
  EXPECT_TRUE(job.snapshot(0).samples.empty()) << "samples are read only when asked for";

  store->commit(Transaction{}.add(sample_write({{"loss", "nan"}})));
  std::string message = message_of([&] { job.snapshot(0, 10); });
  EXPECT_NE(message.find("'samples'"), std::string::npos) << message;
  EXPECT_NE(message.find("field 'loss' is 'nan', not a finite number"), std::string::npos) << message;
  store->commit(Transaction{}.add(sample_write({{"password", "1"}})));
  message = message_of([&] { job.snapshot(0, 1); });
  EXPECT_NE(message.find("not a field of a sample"), std::string::npos) << message;

  store->set(keys::kSamples, "garbage");
  store->set(keys::kGeneration, "3");
  EXPECT_TRUE(job.fenced_update(3, {{"step", "9"}}, {sample_write({{"step", "9"}})}));
  EXPECT_EQ(store->stream_tail(keys::kSamples, 10).size(), 1u);
}

}  // namespace
}  // namespace hdp::elastic

namespace hdp::elastic {
namespace {

// The store's primary and failovers as `hdp status` reads them: absent is none and 0; a counter
// that is not an integer, or a primary that is not UTF-8, is an error naming its key.
TEST(StatusSnapshot, TheStoresPrimaryAndFailoversAreReadAndValidated) {
  auto store = std::make_shared<MemoryStore>();
  JobState job(store);
  JobSnapshot snapshot = job.snapshot(0);
  EXPECT_FALSE(snapshot.store_primary);
  EXPECT_EQ(snapshot.store_failovers, 0);

  store->set(keys::kStorePrimary, "127.0.0.1:6380");
  store->set(keys::kStoreFailovers, "2");
  snapshot = job.snapshot(0);
  EXPECT_EQ(snapshot.store_primary, "127.0.0.1:6380");
  EXPECT_EQ(snapshot.store_failovers, 2);

  for (const char* bad : {"two", "-1", "", "1.5", "99999999999999999999"}) {
    store->set(keys::kStoreFailovers, bad);
    const std::string message = message_of([&] { job.snapshot(0); });
    EXPECT_NE(message.find("invalid value in Redis key 'store_failovers': '" + std::string(bad) + "' is not an integer"),
              std::string::npos)
        << message;
  }
  store->set(keys::kStoreFailovers, "1");
  store->set(keys::kStorePrimary, "host\xff:1");
  const std::string message = message_of([&] { job.snapshot(0); });
  EXPECT_NE(message.find("'store_primary': 'host\\xff:1' is not UTF-8"), std::string::npos) << message;

  // A key of another type is named, not read as missing.
  store->erase(keys::kStorePrimary);
  store->commit(Transaction{}.add(Write::hash_set(keys::kStorePrimary, {{"a", "b"}})));
  EXPECT_THROW(job.snapshot(0), WrongType);
}

// A store that counts the calls made through it, and can run a hook before one kind of call or
// fail every call (a store outage).
class CountingStore final : public ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  int calls = 0;
  bool down = false;
  std::string hook_op;
  std::function<void()> hook;  // run once, before the first call `hook_op`

 protected:
  void around(const char* op, const std::function<void()>& call) override {
    ++calls;
    if (down) throw StoreUnavailable("store down (test)");
    if (hook && hook_op == op) std::exchange(hook, nullptr)();
    call();
  }
};

std::optional<std::string> recorded(Store& store) { return store.get(keys::kStorePrimary); }
std::optional<std::string> failovers(Store& store) { return store.get(keys::kStoreFailovers); }

// Through Sentinel: the first record is no failover; a move is counted once, by the first agent
// that records it, the others find the key equal; no command while nothing moved.
TEST(StorePrimaryRecord, AMoveIsCountedOnceAndNothingIsSentWhileNothingMoved) {
  auto memory = std::make_shared<MemoryStore>();
  CountingStore a_store(memory), b_store(memory);
  StorePrimaryRecord a(a_store, true), b(b_store, true);

  a.record("");  // no connection yet: nothing
  EXPECT_EQ(a_store.calls, 0);
  a.record("10.0.0.1:6379", 1);
  EXPECT_EQ(a_store.calls, 2) << "one GET, one compare_and_set";
  EXPECT_EQ(recorded(*memory), "10.0.0.1:6379");
  EXPECT_FALSE(failovers(*memory)) << "the first record is no failover";
  EXPECT_EQ(a.confirmed(), "10.0.0.1:6379");
  for (int i = 0; i < 5; ++i) a.record("10.0.0.1:6379", 1);
  EXPECT_EQ(a_store.calls, 2) << "a heartbeat with nothing moved sends nothing";

  b.record("10.0.0.1:6379", 1);
  EXPECT_EQ(b_store.calls, 1) << "found equal: one GET, no write";

  a.record("10.0.0.2:6379", 2);  // the failover, as A sees it first
  EXPECT_EQ(recorded(*memory), "10.0.0.2:6379");
  EXPECT_EQ(failovers(*memory), "1");
  const int b_before = b_store.calls;
  b.record("10.0.0.2:6379", 2);
  EXPECT_EQ(b_store.calls, b_before + 1) << "B finds it recorded";
  EXPECT_EQ(failovers(*memory), "1") << "counted once";

  // A reconnection to the same primary reads the key once (it may have been lost with the data).
  const int a_before = a_store.calls;
  a.record("10.0.0.2:6379", 3);
  EXPECT_EQ(a_store.calls, a_before + 1);
  memory->erase(keys::kStorePrimary);
  a.record("10.0.0.2:6379", 4);
  EXPECT_EQ(recorded(*memory), "10.0.0.2:6379") << "written again after the store lost it";
  EXPECT_EQ(failovers(*memory), "1") << "a record written again is no failover";
  EXPECT_EQ(JobState(memory).snapshot(0).store_failovers, 1);
}

// Two agents see the same move at once: the one whose compare_and_set lost reads the key again at
// its next call and finds it equal; the move is counted once.
TEST(StorePrimaryRecord, TheAgentThatLostTheRaceCountsNothing) {
  auto memory = std::make_shared<MemoryStore>();
  memory->set(keys::kStorePrimary, "10.0.0.1:6379");
  CountingStore a_store(memory), b_store(memory);
  StorePrimaryRecord a(a_store, true), b(b_store, true);
  // B read the old value; A records the move before B's compare_and_set.
  b_store.hook_op = "compare_and_set";
  b_store.hook = [&] { a.record("10.0.0.2:6379", 1); };
  b.record("10.0.0.2:6379", 1);
  EXPECT_EQ(b.confirmed(), "") << "B's compare_and_set lost";
  EXPECT_EQ(failovers(*memory), "1");
  b.record("10.0.0.2:6379", 1);
  EXPECT_EQ(b.confirmed(), "10.0.0.2:6379");
  EXPECT_EQ(failovers(*memory), "1");
}

// A plain redis:// endpoint: one server, which agents may spell differently. The first record
// stands; nothing is ever counted.
TEST(StorePrimaryRecord, APlainEndpointIsRecordedOnceAndNeverCounted) {
  auto memory = std::make_shared<MemoryStore>();
  CountingStore a_store(memory), b_store(memory);
  StorePrimaryRecord a(a_store, false), b(b_store, false);
  a.record("127.0.0.1:6379");
  b.record("localhost:6379");
  EXPECT_EQ(recorded(*memory), "127.0.0.1:6379");
  EXPECT_FALSE(failovers(*memory));
  const int calls = b_store.calls;
  b.record("localhost:6379");
  EXPECT_EQ(b_store.calls, calls) << "B confirmed what it found";
  memory->erase(keys::kStorePrimary);  // the server restarted without its data
  b.record("localhost:6379", 1);
  EXPECT_EQ(recorded(*memory), "localhost:6379");
  EXPECT_FALSE(failovers(*memory));
}

// A store error propagates and changes nothing: the next call retries the step. A counter that is
// not an integer fails the count (named), not the record of the primary.
TEST(StorePrimaryRecord, AStoreErrorIsRetriedAtTheNextCall) {
  auto memory = std::make_shared<MemoryStore>();
  memory->set(keys::kStorePrimary, "10.0.0.1:6379");
  CountingStore store(memory);
  StorePrimaryRecord record(store, true);
  store.down = true;
  EXPECT_THROW(record.record("10.0.0.2:6379", 1), StoreUnavailable);
  EXPECT_EQ(record.confirmed(), "");
  store.down = false;
  record.record("10.0.0.2:6379", 1);
  EXPECT_EQ(record.confirmed(), "10.0.0.2:6379");
  EXPECT_EQ(failovers(*memory), "1");

  memory->set(keys::kStoreFailovers, "garbage");
  EXPECT_THROW(record.record("10.0.0.3:6379", 2), InvalidArgument);
  EXPECT_EQ(recorded(*memory), "10.0.0.3:6379");
  EXPECT_EQ(record.confirmed(), "10.0.0.3:6379") << "not written twice";
}

}  // namespace
}  // namespace hdp::elastic
