// The agent's channel to its workers (agents/worker_channel.h, elastic/agent_channel.h), in one
// process: the agent's end on an Asio thread, workers' ends as AgentChannel objects, and fake
// agents (a raw abstract socket) for garbage and silence. Bounds: a generation published reaches
// a connected worker within 1 s (it is one write on a local socket; the rest is scheduling on a
// loaded 2-core machine); a closed channel is seen as lost within 1 s; a silent one after
// 3 keepalives + 1 s (the protocol's bound), checked within 1 s more.
#include "agents/worker_channel.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <functional>
#include <future>
#include <optional>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

#include "common/error.h"
#include "elastic/agent_channel.h"
#include "elastic/elastic_context.h"
#include "elastic/job_keys.h"
#include "elastic/memory_store.h"

namespace hdp::agents {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using elastic::AgentChannel;

// Polls `condition` every 10 ms for up to `limit`.
bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return condition();
}

// The agent's end, on an Asio thread of its own; calls run on that thread.
class AgentEnd {
 public:
  explicit AgentEnd(std::chrono::milliseconds keepalive) {
    on_io([&] {
      channel_ = std::make_unique<WorkerChannel>(
          io_, keepalive, [this](std::int64_t g) { broken_.push_back(g); },
          [this](bool preparing) { preparing_calls_.push_back(preparing); });
    });
  }
  // What on_preparing was called with, in order; whether a worker is preparing now.
  std::vector<bool> preparing_calls() {
    std::vector<bool> out;
    on_io([&] { out = preparing_calls_; });
    return out;
  }
  bool preparing() {
    bool out = false;
    on_io([&] { out = channel_->preparing(); });
    return out;
  }
  int preparing_workers() {
    int out = 0;
    on_io([&] { out = channel_->preparing_workers(); });
    return out;
  }
  void expect_worker() { on_io([&] { channel_->expect_worker(); }); }
  // The generations the workers said broke, in order.
  std::vector<std::int64_t> broken() {
    std::vector<std::int64_t> out;
    on_io([&] { out = broken_; });
    return out;
  }
  ~AgentEnd() {
    // Closed on its thread; destroyed only once the thread has stopped, so that no handler of it
    // (the aborted accept and reads) runs on a destroyed channel. Handlers still queued are
    // destroyed with io_, not run.
    on_io([&] { channel_->close(); });
    work_.reset();
    io_.stop();
    thread_.join();
    channel_.reset();
  }
  const std::string& name() { return channel_->name(); }
  void publish(std::int64_t g, std::shared_ptr<const elastic::HeldRecord> record = nullptr) {
    on_io([&] { channel_->publish(g, record); });
  }
  void close() { on_io([&] { channel_->close(); }); }
  std::size_t workers() {
    std::size_t n = 0;
    on_io([&] { n = channel_->workers(); });
    return n;
  }

 private:
  void on_io(const std::function<void()>& call) {
    std::promise<void> done;
    boost::asio::post(io_, [&] {
      call();
      done.set_value();
    });
    done.get_future().wait();
  }
  boost::asio::io_context io_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_{io_.get_executor()};
  std::thread thread_{[this] { io_.run(); }};
  std::unique_ptr<WorkerChannel> channel_;
  std::vector<std::int64_t> broken_;  // the Asio thread's
  std::vector<bool> preparing_calls_;  // the Asio thread's
};

// A fake agent: listens on an abstract socket and writes what a test tells it.
class FakeAgent {
 public:
  FakeAgent() : name_("@hdp-test-" + std::to_string(getpid()) + "-" + std::to_string(counter_++)) {
    listener_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path + 1, name_.data() + 1, name_.size() - 1);
    const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name_.size());
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&address), length) != 0 || ::listen(listener_, 4) != 0) {
      throw std::runtime_error("cannot listen");
    }
  }
  ~FakeAgent() {
    if (peer_ >= 0) ::close(peer_);
    ::close(listener_);
  }
  const std::string& name() const { return name_; }
  // The worker's connection, within `limit`; false when none came.
  bool accept(std::chrono::milliseconds limit = 5s) {
    pollfd entry{.fd = listener_, .events = POLLIN, .revents = 0};
    if (::poll(&entry, 1, static_cast<int>(limit.count())) <= 0) return false;
    peer_ = ::accept(listener_, nullptr, nullptr);
    return peer_ >= 0;
  }
  void write(const std::string& text) { ASSERT_EQ(::send(peer_, text.data(), text.size(), MSG_NOSIGNAL), static_cast<ssize_t>(text.size())); }
  // The next line the worker wrote, without its end; "" when none came within `limit`.
  std::string read_line(std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    for (;;) {
      if (const auto newline = input_.find('\n'); newline != std::string::npos) {
        std::string line = input_.substr(0, newline);
        input_.erase(0, newline + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left <= 0ms) return "";
      pollfd entry{.fd = peer_, .events = POLLIN, .revents = 0};
      if (::poll(&entry, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[256];
      const ssize_t got = ::recv(peer_, chunk, sizeof chunk, 0);
      if (got <= 0) return "";
      input_.append(chunk, static_cast<std::size_t>(got));
    }
  }
  // Closes the connection (the worker's channel then connects again).
  void hang_up() {
    ::close(peer_);
    peer_ = -1;
    input_.clear();
  }

 private:
  static inline std::atomic<int> counter_{0};
  std::string name_;
  int listener_ = -1, peer_ = -1;
  std::string input_;
};

TEST(AgentChannelLines, RoundTripAndGarbageIsRefused) {
  namespace ac = elastic::agent_channel;
  auto hello = ac::hello_line(1500ms);
  auto parsed = ac::parse_line(hello.substr(0, hello.size() - 1));
  EXPECT_EQ(parsed.kind, ac::Line::Kind::kHello);
  EXPECT_EQ(parsed.keepalive, 1500ms);
  auto gen = ac::generation_line(42);
  EXPECT_EQ(ac::parse_line(gen.substr(0, gen.size() - 1)).generation, 42);
  auto record = ac::parse_line(ac::record_line(7, 1234).substr(0, ac::record_line(7, 1234).size() - 1));
  EXPECT_EQ(record.kind, ac::Line::Kind::kRecord);
  EXPECT_EQ(record.generation, 7);
  EXPECT_EQ(record.bytes, 1234u);
  for (const char* bad : {"", "gen", "gen -1", "gen 1x", "gen 99999999999999999999", "hdp-agent 4 100", "hdp-agent 2 100",
                          "hdp-agent 3 0", "hdp-agent 3", "GEN 1", "gen  1", "record 1", "record 0 5", "record 1 -1",
                          "record 1 5x", "record 1 999999999999"}) {
    EXPECT_THROW(ac::parse_line(bad), InvalidArgument) << bad;
  }
  EXPECT_THROW(ac::parse_line("gen " + std::string(200, '1')), InvalidArgument);
  // The lines a worker writes.
  const auto strip = [](const std::string& line) { return line.substr(0, line.size() - 1); };
  const auto broken = ac::parse_worker_line(strip(ac::broken_line(9)));
  EXPECT_EQ(broken.kind, ac::WorkerLine::Kind::kBroken);
  EXPECT_EQ(broken.generation, 9);
  EXPECT_EQ(ac::parse_worker_line(strip(ac::preparing_line())).kind, ac::WorkerLine::Kind::kPreparing);
  EXPECT_EQ(ac::parse_worker_line(strip(ac::ready_line())).kind, ac::WorkerLine::Kind::kReady);
  for (const char* bad : {"", "broken", "broken 0", "broken -1", "broken 1x", "gen 1", "broken  1", "ready 1",
                          "preparing ", "READY", " ready"}) {
    EXPECT_THROW(ac::parse_worker_line(bad), InvalidArgument) << bad;
  }
}

// A worker says `preparing` when it connects and `ready` once it waits for a generation; the agent
// hears whether any worker is preparing when that changes (two workers: only the last to be ready
// ends it), and a worker that leaves while preparing is no longer counted.
TEST(WorkerChannel, TheAgentHearsWhetherAnyWorkerIsPreparing) {
  AgentEnd agent(1000ms);
  AgentChannel first(agent.name()), second(agent.name());
  ASSERT_TRUE(eventually([&] { return agent.preparing_workers() == 2; }, 5s));
  EXPECT_EQ(agent.preparing_calls(), std::vector<bool>{true});
  EXPECT_TRUE(agent.preparing());
  first.report_ready();
  first.report_ready();  // idempotent
  std::this_thread::sleep_for(200ms);
  EXPECT_TRUE(agent.preparing()) << "the second worker is still preparing";
  second.report_ready();
  ASSERT_TRUE(eventually([&] { return agent.preparing_calls() == std::vector<bool>{true, false}; }, 5s));
  EXPECT_FALSE(agent.preparing());
  {
    AgentChannel leaving(agent.name());
    ASSERT_TRUE(eventually([&] { return agent.preparing(); }, 5s));
  }
  ASSERT_TRUE(eventually([&] { return agent.preparing_calls().size() == 4; }, 5s));
  EXPECT_EQ(agent.preparing_calls(), (std::vector<bool>{true, false, true, false}));
}

// A worker the agent started counts as preparing from its start until its first line: one that
// speaks ends it with `ready`; one that never connects (no hdp worker) ends it after
// kFirstLineGrace (2 s; checked within 1.5 s more on a loaded machine).
TEST(WorkerChannel, AStartedWorkerIsPreparingUntilItsFirstLineOrTheGrace) {
  AgentEnd agent(1000ms);
  agent.expect_worker();
  ASSERT_TRUE(eventually([&] { return agent.preparing_calls() == std::vector<bool>{true}; }, 5s));
  {
    AgentChannel worker(agent.name());
    ASSERT_TRUE(eventually([&] { return agent.preparing_workers() == 1; }, 5s));
    worker.report_ready();
    ASSERT_TRUE(eventually([&] { return agent.preparing_calls() == std::vector<bool>{true, false}; }, 5s));
  }
  const auto expected = Clock::now();
  agent.expect_worker();  // never connects
  ASSERT_TRUE(eventually([&] { return agent.preparing_calls().size() == 3; }, 5s));
  EXPECT_TRUE(agent.preparing());
  ASSERT_TRUE(eventually([&] { return agent.preparing_calls().size() == 4; }, 10s));
  const auto held = Clock::now() - expected;
  EXPECT_FALSE(agent.preparing());
  EXPECT_GE(held, elastic::agent_channel::kFirstLineGrace);
  EXPECT_LT(held, elastic::agent_channel::kFirstLineGrace + 1500ms);
}

// Where a worker stands is said again at every connection: a worker that was ready and lost its
// connection says `ready` first when it connects anew, never `preparing`.
TEST(WorkerChannel, AReconnectedWorkerSaysWhereItStands) {
  FakeAgent agent;
  AgentChannel worker(agent.name());
  ASSERT_TRUE(agent.accept());
  agent.write(elastic::agent_channel::hello_line(1000ms));
  EXPECT_EQ(agent.read_line(5s), "preparing");
  worker.report_ready();
  EXPECT_EQ(agent.read_line(5s), "ready");
  agent.hang_up();
  ASSERT_TRUE(agent.accept());
  EXPECT_EQ(agent.read_line(5s), "ready");
}

// A line the connection's buffer cannot take now is written once it can, in order: a worker whose
// agent reads nothing for a while tells it `ready` when it reads again. Of the `broken` lines, those
// beyond kMaxUnsent bytes waiting are dropped; the stage never is.
TEST(WorkerChannel, ALineTheBufferRefusesIsWrittenOnceTheAgentReads) {
  using elastic::agent_channel::kMaxLine;
  using elastic::agent_channel::kMaxUnsent;
  FakeAgent agent;
  AgentChannel worker(agent.name());
  ASSERT_TRUE(agent.accept());
  agent.write(elastic::agent_channel::hello_line(1000ms));
  EXPECT_EQ(agent.read_line(5s), "preparing");
  // The agent reads nothing: the connection's buffer fills, then what the worker keeps, until a
  // line is dropped.
  std::int64_t dropped = 0;
  for (std::int64_t g = 1; g <= 1000000 && !dropped; ++g) {
    const std::size_t before = worker.unsent();
    worker.report_broken(g);
    if (before > 0 && worker.unsent() == before) dropped = g;
  }
  ASSERT_GT(dropped, 0) << "the connection's buffer never filled";
  const std::size_t kept = worker.unsent();
  EXPECT_LE(kept, kMaxUnsent);
  EXPECT_GT(kept + kMaxLine, kMaxUnsent) << "dropped before kMaxUnsent";
  worker.report_ready();
  EXPECT_EQ(worker.unsent(), kept + elastic::agent_channel::ready_line().size()) << "ready waits";
  // The agent reads again: every broken line before the dropped one, in order, then `ready`.
  std::string line;
  std::int64_t last = 0;
  while ((line = agent.read_line(5s)).starts_with("broken ")) {
    const std::int64_t g = std::stoll(line.substr(7));
    ASSERT_EQ(g, last + 1) << "lost or out of order: " << line;
    last = g;
  }
  EXPECT_EQ(last, dropped - 1);
  EXPECT_EQ(line, "ready");
  EXPECT_TRUE(eventually([&] { return worker.unsent() == 0; }, 5s));
}

// A worker's `broken <g>` reaches the agent (once per line; garbage between lines is dropped),
// and a worker whose channel is lost drops the report without blocking.
TEST(WorkerChannel, AWorkersBrokenGenerationReachesTheAgent) {
  AgentEnd agent(1000ms);
  agent.publish(4);
  AgentChannel worker(agent.name());
  ASSERT_TRUE(eventually([&] { return worker.generation() == 4; }, 5s));
  worker.report_broken(4);
  ASSERT_TRUE(eventually([&] { return agent.broken().size() == 1; }, 5s));
  EXPECT_EQ(agent.broken(), (std::vector<std::int64_t>{4}));
  worker.report_broken(5);
  ASSERT_TRUE(eventually([&] { return agent.broken().size() == 2; }, 5s));
  EXPECT_EQ(agent.broken().back(), 5);
  AgentChannel lost("@hdp-test-nobody-listens-" + std::to_string(getpid()));
  const auto before = Clock::now();
  lost.report_broken(1);
  EXPECT_LT(Clock::now() - before, 1s);
}

TEST(WorkerChannel, WorkersGetTheGenerationAtOnceAndEveryChange) {
  AgentEnd agent(1000ms);
  agent.publish(3);
  AgentChannel first(agent.name()), second(agent.name());
  ASSERT_TRUE(eventually([&] { return first.generation() == 3 && second.generation() == 3; }, 1s));
  EXPECT_EQ(first.lost_for(), 0ms);
  EXPECT_TRUE(first.lost_because().empty());
  const auto published = Clock::now();
  agent.publish(4);
  first.wait_for_change(3, 2s);  // woken by the line, not by the timeout
  EXPECT_EQ(first.generation(), 4);
  EXPECT_LT(Clock::now() - published, 1s);
  ASSERT_TRUE(eventually([&] { return second.generation() == 4; }, 1s));
  agent.publish(2);  // older: never told
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(first.generation(), 4);
  EXPECT_EQ(agent.workers(), 2u);
}

TEST(WorkerChannel, AWorkerThatLeavesIsForgottenAndOneThatJoinsLateGetsTheNewest) {
  AgentEnd agent(1000ms);
  {
    AgentChannel gone(agent.name());
    ASSERT_TRUE(eventually([&] { return gone.generation().has_value(); }, 1s));
    EXPECT_EQ(agent.workers(), 1u);
  }
  EXPECT_TRUE(eventually([&] { return agent.workers() == 0; }, 1s));
  agent.publish(7);
  AgentChannel late(agent.name());
  EXPECT_TRUE(eventually([&] { return late.generation() == 7; }, 1s));
}

// An agent that closed its channel (it is exiting: its workers get SIGKILL from PDEATHSIG next)
// is lost at once, and the worker keeps trying, saying why.
TEST(WorkerChannel, AClosedChannelIsLostAndTheWorkerSaysWhy) {
  auto agent = std::make_unique<AgentEnd>(1000ms);
  agent->publish(5);
  AgentChannel worker(agent->name());
  ASSERT_TRUE(eventually([&] { return worker.generation() == 5; }, 1s));
  agent->close();
  ASSERT_TRUE(eventually([&] { return !worker.generation().has_value(); }, 1s));
  std::this_thread::sleep_for(300ms);
  EXPECT_GE(worker.lost_for(), 250ms);
  const std::string why = worker.lost_because();
  EXPECT_TRUE(why.find("closed its channel") != std::string::npos || why.find("cannot connect") != std::string::npos)
      << why;
  EXPECT_NE(why.find(worker.name()), std::string::npos) << why;
}

// A stopped agent keeps its socket open but writes nothing: lost after 3 keepalives + 1 s.
TEST(WorkerChannel, ASilentAgentIsLostAfterThreeKeepalivesAndOneSecond) {
  FakeAgent fake;
  AgentChannel worker(fake.name());
  fake.accept();
  fake.write(elastic::agent_channel::hello_line(100ms) + elastic::agent_channel::generation_line(9));
  ASSERT_TRUE(eventually([&] { return worker.generation() == 9; }, 1s));
  const auto last_line = Clock::now();
  ASSERT_TRUE(eventually([&] { return !worker.generation().has_value(); }, 3s));
  const auto silent = Clock::now() - last_line;
  EXPECT_GE(silent, 1200ms);  // 3 x 100 ms + 1 s, less the time the line took to be read
  EXPECT_LT(silent, 2500ms);
  EXPECT_NE(worker.lost_because().find("silent"), std::string::npos) << worker.lost_because();
  fake.write(elastic::agent_channel::generation_line(9));  // it speaks again
  EXPECT_TRUE(eventually([&] { return worker.generation() == 9; }, 1s));
}

TEST(WorkerChannel, GarbageLinesAreCountedAndIgnored) {
  FakeAgent fake;
  AgentChannel worker(fake.name());
  fake.accept();
  fake.write(elastic::agent_channel::hello_line(1000ms));
  fake.write("gen twelve\n\x01\x02\xff\n" + std::string(300, 'x') + "\ngen 12\n");
  ASSERT_TRUE(eventually([&] { return worker.generation() == 12; }, 1s));
  EXPECT_GE(worker.bad_lines(), 3);
}

// A worker whose agent's channel is lost keeps training (changed() is false) and gives up with an
// error naming the channel once the loss outlasts its limit (500 ms here, 30 s in production).
TEST(WorkerChannel, AWorkerThatLostItsAgentForLongerThanTheLimitGivesUpNamingTheChannel) {
  auto agent = std::make_unique<AgentEnd>(1000ms);
  agent->publish(1);
  auto store = std::make_shared<elastic::MemoryStore>();
  elastic::WorkerIdentity identity{.job = "job", .node = "n", .incarnation = "i", .agent_channel = agent->name()};
  elastic::ElasticContext ctx(store, identity, elastic::ElasticContext::kBadValueLimit, 500ms);
  elastic::Membership m{.generation = 1};
  ASSERT_TRUE(eventually([&] { return ctx.read_generation() == 1; }, 1s));
  EXPECT_FALSE(ctx.changed(m));
  agent->publish(2);
  EXPECT_TRUE(eventually([&] { return ctx.changed(m); }, 1s));
  agent.reset();  // the agent is gone
  EXPECT_TRUE(eventually([&] { return !ctx.read_generation().has_value(); }, 1s));
  EXPECT_FALSE(ctx.changed(m));  // lost, within the limit: keep training
  std::this_thread::sleep_for(700ms);
  try {
    ctx.changed(m);
    ADD_FAILURE() << "a channel lost for 700 ms was accepted with a 500 ms limit";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(identity.agent_channel), std::string::npos) << e.what();
  }
  EXPECT_THROW(ctx.wait_for_next(1, 5s), Error);
  // The store was never read for the generation: the channel is the only source.
  EXPECT_EQ(store->get(elastic::keys::kGeneration), std::nullopt);
}

// The record of the generation goes to each worker once, before its generation line (a worker that
// sees g has g's record), also to a worker that connects later and when the agent gets the record
// after the number; a record of 12,500 nodes (~1.5 MB) arrives whole, and a fake agent's record
// line followed by its bytes and more lines parses.
TEST(WorkerChannel, TheGenerationsRecordGoesToEveryWorkerBeforeItsNumber) {
  auto record_of = [](std::int64_t g, int nodes) {
    elastic::Generation generation;
    generation.number = g;
    for (int i = 0; i < nodes; ++i) {
      generation.members.push_back({"node-" + std::to_string(i), "inc", "10.1.2.3", {0, 1, 2, 3, 4, 5, 6, 7}, 0});
    }
    generation.assign_ranks();
    std::string encoded = elastic::encode(generation);
    return std::make_shared<const elastic::HeldRecord>(elastic::HeldRecord{std::move(generation), std::move(encoded)});
  };
  AgentEnd agent(1000ms);
  const auto five = record_of(5, 3);
  agent.publish(5, five);
  AgentChannel first(agent.name());
  ASSERT_TRUE(eventually([&] { return first.generation() == 5; }, 1s));
  ASSERT_NE(first.record(5), nullptr);  // already there when the number is
  EXPECT_EQ(*first.record(5), five->encoded);

  agent.publish(6);  // the number before the record: the worker has none of 6 yet
  ASSERT_TRUE(eventually([&] { return first.generation() == 6; }, 1s));
  EXPECT_EQ(first.record(6), nullptr);
  const auto six = record_of(6, 12'500);
  ASSERT_GT(six->encoded.size(), 1'000'000u);
  agent.publish(6, six);
  ASSERT_TRUE(eventually([&] { return first.record(6) != nullptr; }, 2s));
  EXPECT_EQ(*first.record(6), six->encoded);
  AgentChannel later(agent.name());  // connects after: gets the record with the number
  ASSERT_TRUE(eventually([&] { return later.generation() == 6; }, 2s));
  ASSERT_NE(later.record(6), nullptr);
  EXPECT_EQ(*later.record(6), six->encoded);
  EXPECT_EQ(first.bad_lines(), 0);
  EXPECT_EQ(later.bad_lines(), 0);

  FakeAgent fake;
  AgentChannel worker(fake.name());
  fake.accept();
  namespace ac = elastic::agent_channel;
  fake.write(ac::hello_line(1000ms) + ac::record_line(9, 11) + "hello\nworld" + ac::generation_line(9) + "gen x\n");
  ASSERT_TRUE(eventually([&] { return worker.generation() == 9; }, 1s));
  ASSERT_NE(worker.record(9), nullptr);
  EXPECT_EQ(*worker.record(9), "hello\nworld");  // bytes, newlines included, are not lines
  ASSERT_TRUE(eventually([&] { return worker.bad_lines() == 1; }, 1s));  // "gen x"
}

// A worker takes its membership from the record its agent relayed: the store holds no gen:<g>
// (reading it would find nothing and wait), and the worker joins generation 5 at once. Without a
// relayed record it reads gen:<g> from the store as before.
TEST(WorkerChannel, AWorkerJoinsFromTheRelayedRecordWithoutReadingItFromTheStore) {
  elastic::Generation five;
  five.number = 5;
  five.members.push_back({"n", "i", "127.0.0.1", {0, 1}, 0});
  five.members.push_back({"m", "j", "127.0.0.2", {0, 1}, 0});
  five.assign_ranks();
  AgentEnd agent(1000ms);
  agent.publish(5, std::make_shared<const elastic::HeldRecord>(elastic::HeldRecord{five, elastic::encode(five)}));
  auto store = std::make_shared<elastic::MemoryStore>();
  elastic::WorkerIdentity identity{.job = "job", .node = "m", .incarnation = "j", .local_rank = 1,
                                   .agent_channel = agent.name()};
  elastic::ElasticContext ctx(store, identity);
  const elastic::Membership m = ctx.wait_for_next(0, 5s);
  EXPECT_EQ(m.generation, 5);
  EXPECT_EQ(m.rank, 3);
  EXPECT_EQ(m.world_size, 4);
  EXPECT_EQ(store->get(elastic::keys::generation(5)), std::nullopt);

  agent.publish(6);  // no record relayed: the worker reads gen:6
  five.number = 6;
  store->set(elastic::keys::generation(6), elastic::encode(five));
  EXPECT_EQ(ctx.wait_for_next(5, 5s).generation, 6);
}

}  // namespace
}  // namespace hdp::agents
