// RedisStore against a real redis-server that is killed, restarted and paused, against servers
// that never answer or answer garbage, and against bad credentials.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <thread>

#include "common/error.h"
#include "elastic/redis_store.h"
#include "tests/support/redis_server.h"

namespace hdp::test {
namespace {

using namespace std::chrono_literals;
using elastic::parse_redis_url;
using elastic::RedisStore;
using elastic::RedisStoreOptions;
using Clock = std::chrono::steady_clock;

RedisStoreOptions fast_options(std::chrono::milliseconds retry = 2s) {
  RedisStoreOptions options;
  options.connect_timeout = 200ms;
  options.command_timeout = 300ms;
  options.retry_timeout = retry;
  options.backoff = {.initial = 10ms, .max = 100ms, .multiplier = 2.0, .jitter = 0.2};
  return options;
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// A loopback listener that accepts connections and either says nothing or answers garbage.
class FakeServer {
 public:
  enum class Mode { kSilent, kGarbage };
  explicit FakeServer(Mode mode) : mode_(mode) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    listen(fd_, 64);
    socklen_t len = sizeof addr;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeServer() {
    stop_ = true;
    thread_.join();
    for (int client : clients_) close(client);
    close(fd_);
  }
  int port() const { return port_; }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      int client = accept(fd_, nullptr, nullptr);
      if (client < 0) continue;
      if (mode_ == Mode::kGarbage) {
        const char reply[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
        (void)!write(client, reply, sizeof reply - 1);
      }
      clients_.push_back(client);  // kept open: a silent server never closes either
    }
  }

  Mode mode_;
  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::vector<int> clients_;  // owned by the serving thread until it is joined
  std::thread thread_;
};

TEST(RedisStoreFaults, KilledAndRestartedServerIsReconnectedWithoutANewStore) {
  RedisServer server;
  RedisStore store(parse_redis_url(server.url()), fast_options());
  store.set("before", "1");
  server.restart();  // SIGKILL, then a fresh server on the same port (no persistence: data is gone)
  EXPECT_EQ(store.get("before"), std::nullopt);
  EXPECT_EQ(store.add("counter", 1), 1);
  // add() is not idempotent: the dead socket was noticed before sending, so it ran exactly once.
  EXPECT_EQ(store.get("counter"), "1");
  EXPECT_EQ(store.reconnects(), 1);
}

TEST(RedisStoreFaults, NonIdempotentCallsRunOnceAcrossARestart) {
  RedisServer server;
  RedisStore store(parse_redis_url(server.url()), fast_options());
  store.set("k", "a");
  server.restart();
  EXPECT_TRUE(store.compare_and_set("k", std::nullopt, "b"));
  EXPECT_EQ(store.get("k"), "b");
}

TEST(RedisStoreFaults, CallDuringAnOutageCompletesOnceTheServerIsBack) {
  RedisServer server;
  RedisStore store(parse_redis_url(server.url()), fast_options(5s));
  server.kill();
  // The blocked call runs in a thread; the server is restarted from this one, because a child
  // dies with the thread that started it (PR_SET_PDEATHSIG).
  double waited = 0;
  std::thread caller([&] {
    const auto start = Clock::now();
    store.set("k", "v");  // blocks in reconnect with backoff until the server is back
    waited = seconds_since(start);
  });
  std::this_thread::sleep_for(500ms);
  server.start();
  caller.join();
  EXPECT_EQ(store.get("k"), "v");
  EXPECT_GE(waited, 0.45);
  EXPECT_LT(waited, 1.5);  // 500 ms outage + at most one capped backoff (100 ms) + the restart
}

TEST(RedisStoreFaults, OutageLongerThanTheRetryBudgetThrowsStoreUnavailableOnTime) {
  RedisServer server;
  RedisStore store(parse_redis_url(server.url()), fast_options(1s));
  server.kill();
  const auto start = Clock::now();
  EXPECT_THROW(store.get("k"), StoreUnavailable);
  const double waited = seconds_since(start);
  EXPECT_GT(waited, 0.8);
  EXPECT_LT(waited, 1.2);
  server.start();
  EXPECT_EQ(store.get("k"), std::nullopt);  // and the same store works again afterwards
}

TEST(RedisStoreFaults, PausedServerTimesOutThenRecoversWhenResumed) {
  RedisServer server;
  RedisStore store(parse_redis_url(server.url()), fast_options(1s));
  store.set("k", "v");
  server.pause();  // SIGSTOP: the socket stays open, nothing answers
  auto start = Clock::now();
  EXPECT_THROW(store.get("k"), StoreUnavailable);
  double waited = seconds_since(start);
  // One 300 ms command timeout, then reconnect attempts (each 200 ms) until the 1 s budget is spent.
  EXPECT_GT(waited, 0.8);
  EXPECT_LT(waited, 1.6);
  EXPECT_THROW(store.add("n", 1), StoreUnavailable);
  server.resume();
  EXPECT_EQ(store.get("k"), "v");
}

TEST(RedisStoreFaults, AddInterruptedAfterSendingSaysTheOutcomeIsUnknown) {
  RedisServer server;
  RedisStore store(parse_redis_url(server.url()), fast_options(1s));
  store.set("n", "0");
  server.pause();
  try {
    store.add("n", 1);
    FAIL() << "add succeeded against a paused server";
  } catch (const StoreUnavailable& e) {
    EXPECT_NE(std::string(e.what()).find("may or may not have been applied"), std::string::npos) << e.what();
  }
  server.resume();
}

TEST(RedisStoreFaults, UnreachableServerFailsWithinTheRetryBudget) {
  // Nothing listens on a port we just released: every connect is refused at once, so only the
  // retry budget bounds the wait.
  const int port = free_loopback_port();
  for (auto budget : {500ms, 1500ms}) {
    const auto start = Clock::now();
    EXPECT_THROW(RedisStore(parse_redis_url("redis://127.0.0.1:" + std::to_string(port)), fast_options(budget)),
                 StoreUnavailable);
    const double waited = seconds_since(start), expected = budget.count() / 1000.0;
    EXPECT_GT(waited, expected * 0.8) << "budget " << budget.count();
    EXPECT_LT(waited, expected * 1.2) << "budget " << budget.count();
  }
}

TEST(RedisStoreFaults, ServerThatNeverAnswersFailsWithinTheRetryBudget) {
  FakeServer silent(FakeServer::Mode::kSilent);
  const auto start = Clock::now();
  EXPECT_THROW(RedisStore(parse_redis_url("redis://127.0.0.1:" + std::to_string(silent.port())), fast_options(1s)),
               StoreUnavailable);
  const double waited = seconds_since(start);
  EXPECT_GT(waited, 0.8);
  EXPECT_LT(waited, 1.2);
}

TEST(RedisStoreFaults, ServerThatAnswersGarbageIsAClearErrorNotACrash) {
  FakeServer garbage(FakeServer::Mode::kGarbage);
  try {
    RedisStore store(parse_redis_url("redis://127.0.0.1:" + std::to_string(garbage.port())), fast_options(500ms));
    FAIL() << "connected to a server that speaks HTTP";
  } catch (const StoreUnavailable& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(garbage.port())), std::string::npos)
        << e.what();
  }
}

TEST(RedisStoreFaults, WrongPasswordNamesTheServerButNotThePassword) {
  RedisServer server({.password = "right-password"});
  const std::string where = "127.0.0.1:" + std::to_string(server.port());
  try {
    RedisStore store(parse_redis_url("redis://:Wr0ngPassw0rd@" + where), fast_options());
    FAIL() << "wrong password accepted";
  } catch (const AuthError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(where), std::string::npos) << message;
    EXPECT_EQ(message.find("Wr0ngPassw0rd"), std::string::npos) << message;
    EXPECT_EQ(message.find("right-password"), std::string::npos) << message;
  }
}

TEST(RedisStoreFaults, MissingPasswordIsAnAuthErrorThatSaysHowToGiveOne) {
  RedisServer server({.password = "pw"});
  try {
    RedisStore store(parse_redis_url(server.url()), fast_options());
    FAIL() << "connected without a password";
  } catch (const AuthError& e) {
    EXPECT_NE(std::string(e.what()).find("requires a password"), std::string::npos) << e.what();
  }
}

TEST(RedisStoreFaults, PasswordFromTheUrlWorksAndSurvivesARestart) {
  RedisServer server({.password = "pw"});
  RedisStore store(parse_redis_url("redis://:pw@127.0.0.1:" + std::to_string(server.port())), fast_options());
  store.set("k", "v");
  server.restart();
  store.set("k", "again");  // the reconnect logs in again
  EXPECT_EQ(store.get("k"), "again");
}

TEST(RedisStoreFaults, AclUserCanLogInAndIsHeldToItsPermissions) {
  // alice may touch keys under hdp:* only; the default user is disabled.
  RedisServer server({.extra_args = {"--user", "alice", "on", ">alice-pw", "~hdp:*", "+@all",
                                     "--user", "default", "off"}});
  const std::string where = "127.0.0.1:" + std::to_string(server.port());
  RedisStore store(parse_redis_url("redis://alice:alice-pw@" + where), fast_options());
  store.set("hdp:job:state", "running");
  EXPECT_EQ(store.get("hdp:job:state"), "running");
  EXPECT_THROW(store.set("elsewhere", "x"), AuthError);  // NOPERM
  try {
    RedisStore wrong(parse_redis_url("redis://alice:nope@" + where), fast_options());
    FAIL() << "wrong ACL password accepted";
  } catch (const AuthError& e) {
    EXPECT_NE(std::string(e.what()).find("alice"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("nope"), std::string::npos) << e.what();
  }
}

TEST(RedisStoreFaults, UnixSocketAndDatabaseSelection) {
  RedisServer server({.unix_socket = true});
  RedisStore db0(parse_redis_url("unix://" + server.socket_path()), fast_options());
  RedisStore db3(parse_redis_url("unix://" + server.socket_path() + "?db=3"), fast_options());
  RedisStore tcp3(parse_redis_url(server.url() + "/3"), fast_options());
  db3.set("k", "in-db-3");
  EXPECT_EQ(db0.get("k"), std::nullopt);
  EXPECT_EQ(tcp3.get("k"), "in-db-3");
}

TEST(RedisStoreFaults, ConcurrentCallersShareOneStoreThroughARestart) {
  RedisServer server;
  auto store = std::make_shared<RedisStore>(parse_redis_url(server.url()), fast_options(5s));
  std::atomic<int> failures{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const std::string key = "t" + std::to_string(t);
      for (int i = 0; !stop && i < 100000; ++i) {
        try {
          store->set(key, std::to_string(i));
          if (store->get(key) != std::to_string(i)) ++failures;
        } catch (const Error&) {
          ++failures;
        }
      }
    });
  }
  std::this_thread::sleep_for(200ms);
  server.restart();
  std::this_thread::sleep_for(300ms);
  stop = true;
  for (auto& thread : threads) thread.join();
  // A get may race the restart and see the key gone (the new server is empty); a set never fails.
  EXPECT_LE(failures.load(), 4);
  EXPECT_GE(store->reconnects(), 1);
}

}  // namespace
}  // namespace hdp::test

namespace hdp::test {
namespace {

double connected_clients(RedisStore& observer) {
  const std::string info = observer.command({"INFO", "clients"}, true).str;
  const auto pos = info.find("connected_clients:");
  return std::stod(info.substr(pos + 18));
}

// idle_close: the connection is gone 200 ms after the last call (checked within 1 s), the next call
// opens it again unnoticed, and that is not counted as a reconnect.
TEST(RedisStoreIdle, AnIdleConnectionIsClosedAndTheNextCallOpensItAgain) {
  RedisServer server;
  RedisStore observer(parse_redis_url(server.url()));
  RedisStoreOptions options = fast_options();
  options.idle_close = 200ms;
  RedisStore store(parse_redis_url(server.url()), options);
  store.set("k", "v");
  EXPECT_EQ(connected_clients(observer), 2);
  const auto start = Clock::now();
  while (connected_clients(observer) > 1 && Clock::now() - start < 1s) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(connected_clients(observer), 1);
  EXPECT_GE(store.idle_closes(), 1);
  EXPECT_EQ(store.get("k"), "v");
  EXPECT_EQ(store.reconnects(), 0);
  // A connection in use is never closed under its caller: 30 calls 20 ms apart span 3 idle periods.
  for (int i = 0; i < 30; ++i) {
    store.set("k", std::to_string(i));
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(store.get("k"), "29");
}

// A blocking stream read on a paused server fails (StoreUnavailable) after its block plus the
// command timeout (300 + 300 ms; bound 3 s), is not retried, and the store works once resumed.
TEST(RedisStoreIdle, ABlockedStreamReadOnAPausedServerFailsWithinItsBlockAndTheCommandTimeout) {
  RedisServer server;
  RedisStore store(parse_redis_url(server.url()), fast_options());
  server.pause();
  const auto start = Clock::now();
  EXPECT_THROW(store.stream_read("s", "0", 10, 300ms), StoreUnavailable);
  EXPECT_GE(seconds_since(start), 0.5);
  EXPECT_LT(seconds_since(start), 3.0);
  server.resume();
  EXPECT_TRUE(store.stream_read("s", "0", 10, 0ms).empty());
}

// interrupt_stream_reads() wakes a blocked read without closing its connection: a named store
// (an agent's, whose presence the leader reads from CLIENT LIST) stays in the server's client list
// throughout, on the same connection (no reconnect, no re-open), and the next read blocks as usual.
// Before, the read's socket was shut down and the name left the list until the next call, which
// let a leader take a live agent for a gone one. Bounds: woken within 2 s of its 10 s block (a
// loaded machine); the list is read every 1 ms or so while the read is woken.
TEST(RedisStoreInterrupt, AnInterruptedReadKeepsItsNamedConnection) {
  RedisServer server;
  RedisStore observer(parse_redis_url(server.url()));
  RedisStoreOptions options = fast_options();
  options.client_name = "hdp-test-agent";
  RedisStore store(parse_redis_url(server.url()), options);
  const auto named = [&] {
    const auto names = observer.client_names();
    return std::count(names.begin(), names.end(), "hdp-test-agent");
  };
  ASSERT_EQ(named(), 1);
  for (int round = 0; round < 3; ++round) {
    std::atomic<bool> returned{false};
    std::thread reader([&] {
      EXPECT_TRUE(store.stream_read("s", "$", 10, 10s).empty());
      returned = true;
    });
    std::this_thread::sleep_for(200ms);  // blocked on the server by now (and if not: woken when it starts)
    const auto start = Clock::now();
    std::atomic<bool> gone_seen{false};
    std::thread watcher([&] {
      while (!returned) {
        if (named() != 1) gone_seen = true;
      }
    });
    store.interrupt_stream_reads();
    reader.join();
    watcher.join();
    EXPECT_LT(seconds_since(start), 2.0) << "round " << round;
    EXPECT_FALSE(gone_seen) << "round " << round << ": the named connection left the client list";
    EXPECT_EQ(named(), 1) << "round " << round;
  }
  EXPECT_EQ(store.reconnects(), 0);
  EXPECT_EQ(store.idle_closes(), 0);
  // The next read blocks as usual.
  const auto later = Clock::now();
  EXPECT_TRUE(store.stream_read("s", "$", 10, 300ms).empty());
  EXPECT_GE(seconds_since(later), 0.25);
}

}  // namespace
}  // namespace hdp::test
