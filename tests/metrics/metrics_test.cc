// The metrics layer on its own: the registry's exposition text (Prometheus' text format 0.0.4:
// HELP and TYPE once per family, escaped label values, cumulative histogram buckets ending in
// +Inf, _sum and _count), its JSON hand-off between processes (round trip, garbage refused), the
// merge an agent does of its workers' registries, the HTTP server (GET, 404, 405, HEAD, a port in
// use, a stalled client that does not hold up others, the cap on connections; its other limits:
// http_server_test.cc) and the Store that times Redis calls.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <thread>

#include "common/error.h"
#include "elastic/memory_store.h"
#include "metrics/http_server.h"
#include "metrics/registry.h"
#include "metrics/timed_store.h"
#include "tests/elastic/forwarding_store.h"
#include "tests/support/http_get.h"

namespace hdp::metrics {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(Registry, RendersTheTextExpositionFormat) {
  Registry r;
  r.describe("hdp_x_total", Type::kCounter, "Things counted\nover two lines \\ here");
  r.describe("hdp_y", Type::kGauge, "A level");
  r.add_counter("hdp_x_total", {{"node", "n\"1\"\n"}}, 2);
  r.add_counter("hdp_x_total", {{"node", "n\"1\"\n"}}, 3);
  r.set_gauge("hdp_y", {}, 0.25);
  r.set_gauge("hdp_y", {{"slot", "1"}}, -1e300);
  const std::string text = r.text();
  EXPECT_TRUE(contains(text, "# HELP hdp_x_total Things counted\\nover two lines \\\\ here\n")) << text;
  EXPECT_TRUE(contains(text, "# TYPE hdp_x_total counter\n")) << text;
  EXPECT_TRUE(contains(text, "hdp_x_total{node=\"n\\\"1\\\"\\n\"} 5\n")) << text;
  EXPECT_TRUE(contains(text, "# TYPE hdp_y gauge\nhdp_y 0.25\nhdp_y{slot=\"1\"} -1e+300\n")) << text;
  // One HELP and one TYPE per family, whatever the number of samples.
  EXPECT_EQ(text.find("# TYPE hdp_y"), text.rfind("# TYPE hdp_y"));
}

TEST(Registry, HistogramBucketsAreCumulativeAndEndInInf) {
  Registry r;
  r.describe("hdp_t_seconds", Type::kHistogram, "Durations", {0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 2.0, 20.0, 30.0}) r.observe("hdp_t_seconds", {{"op", "get"}}, v);
  const std::string text = r.text();
  // le is inclusive: 0.1 falls in the 0.1 bucket.
  EXPECT_TRUE(contains(text, "hdp_t_seconds_bucket{op=\"get\",le=\"0.1\"} 2\n")) << text;
  EXPECT_TRUE(contains(text, "hdp_t_seconds_bucket{op=\"get\",le=\"1\"} 3\n")) << text;
  EXPECT_TRUE(contains(text, "hdp_t_seconds_bucket{op=\"get\",le=\"10\"} 4\n")) << text;
  EXPECT_TRUE(contains(text, "hdp_t_seconds_bucket{op=\"get\",le=\"+Inf\"} 6\n")) << text;
  EXPECT_TRUE(contains(text, "hdp_t_seconds_sum{op=\"get\"} 52.65\n")) << text;
  EXPECT_TRUE(contains(text, "hdp_t_seconds_count{op=\"get\"} 6\n")) << text;
}

TEST(Registry, RefusesWhatPrometheusWouldNot) {
  Registry r;
  EXPECT_THROW(r.describe("2bad", Type::kGauge, ""), InvalidArgument);
  EXPECT_THROW(r.describe("hdp-dash", Type::kGauge, ""), InvalidArgument);
  EXPECT_THROW(r.describe("hdp_restarts", Type::kCounter, ""), InvalidArgument) << "a counter must end in _total";
  EXPECT_THROW(r.describe("hdp_h", Type::kHistogram, "", {1, 0.5}), InvalidArgument) << "buckets must ascend";
  r.describe("hdp_g", Type::kGauge, "");
  EXPECT_THROW(r.describe("hdp_g", Type::kHistogram, ""), InvalidArgument);
  EXPECT_THROW(r.set_gauge("hdp_g", {{"__reserved", "x"}}, 1), InvalidArgument);
  EXPECT_THROW(r.set_gauge("hdp_g", {{"le", "x"}}, 1), InvalidArgument);
  EXPECT_THROW(r.set_gauge("hdp_g", {{"node", "\xff"}}, 1), InvalidArgument);
  EXPECT_THROW(r.set_gauge("hdp_undescribed", {}, 1), InvalidArgument);
  EXPECT_THROW(r.observe("hdp_g", {}, 1), InvalidArgument) << "a gauge is not a histogram";
  r.describe("hdp_c_total", Type::kCounter, "");
  EXPECT_THROW(r.add_counter("hdp_c_total", {}, -1), InvalidArgument);
}

TEST(Registry, JsonRoundTripAndMergeWithLabels) {
  Registry worker;
  worker.describe("hdp_train_step", Type::kGauge, "Step");
  worker.describe("hdp_train_step_seconds", Type::kHistogram, "Step time");
  worker.describe("hdp_train_recoveries_total", Type::kCounter, "Recoveries");
  worker.set_gauge("hdp_train_step", {}, 42);
  worker.observe("hdp_train_step_seconds", {}, 0.7);
  worker.add_counter("hdp_train_recoveries_total", {}, 2);
  const Registry back = Registry::from_json(worker.to_json());
  EXPECT_EQ(back.text(), worker.text());

  Registry agent;
  agent.describe("hdp_agent_generation", Type::kGauge, "Generation");
  agent.set_gauge("hdp_agent_generation", {{"node", "n1"}}, 3);
  agent.merge(back, {{"node", "n1"}, {"slot", "0"}});
  agent.merge(back, {{"node", "n1"}, {"slot", "1"}});
  EXPECT_EQ(agent.value("hdp_train_step", {{"node", "n1"}, {"slot", "1"}}), 42);
  EXPECT_EQ(agent.value("hdp_train_recoveries_total", {{"node", "n1"}, {"slot", "0"}}), 2);
  EXPECT_EQ(agent.value("hdp_train_step_seconds", {{"node", "n1"}, {"slot", "0"}}), 1);
  EXPECT_EQ(agent.value("hdp_agent_generation", {{"node", "n1"}}), 3);
  agent.remove_samples({{"slot", "1"}});
  EXPECT_EQ(agent.value("hdp_train_step", {{"node", "n1"}, {"slot", "1"}}), -1);
  EXPECT_EQ(agent.value("hdp_train_step", {{"node", "n1"}, {"slot", "0"}}), 42);

  Registry clash;
  clash.describe("hdp_train_step", Type::kHistogram, "");
  EXPECT_THROW(agent.merge(clash, {}), InvalidArgument);
}

// A diverged run's NaN or infinite loss must not make the agent drop the worker's document.
TEST(Registry, NonFiniteValuesSurviveTheJsonHandOff) {
  Registry worker;
  worker.describe("hdp_train_loss", Type::kGauge, "Loss");
  worker.describe("hdp_train_step_seconds", Type::kHistogram, "Step", {1});
  worker.set_gauge("hdp_train_loss", {{"slot", "0"}}, std::nan(""));
  worker.set_gauge("hdp_train_loss", {{"slot", "1"}}, -INFINITY);
  worker.observe("hdp_train_step_seconds", {}, std::nan(""));
  const Registry back = Registry::from_json(worker.to_json());
  EXPECT_EQ(back.text(), worker.text());
  const std::string text = back.text();
  EXPECT_TRUE(contains(text, "hdp_train_loss{slot=\"0\"} NaN\n")) << text;
  EXPECT_TRUE(contains(text, "hdp_train_loss{slot=\"1\"} -Inf\n")) << text;
  // NaN counts only in the +Inf bucket.
  EXPECT_TRUE(contains(text, "hdp_train_step_seconds_bucket{le=\"1\"} 0\n")) << text;
  EXPECT_TRUE(contains(text, "hdp_train_step_seconds_bucket{le=\"+Inf\"} 1\n")) << text;
}

TEST(Registry, GarbageJsonIsAnErrorNamingTheProblem) {
  for (const std::string& garbage :
       {std::string(""), std::string("{"), std::string("[]"), std::string("{\"hdp_x\": {\"type\": \"nope\"}}"),
        std::string("{\"hdp_x\": {\"type\": \"gauge\", \"help\": \"\", \"buckets\": [], \"samples\": [{\"labels\": {}, \"value\": \"1\"}]}}"),
        std::string("{\"hdp_c\": {\"type\": \"counter\", \"help\": \"\", \"buckets\": [], \"samples\": []}}"),
        std::string("{\"hdp_c_total\": {\"type\": \"counter\", \"help\": \"\", \"buckets\": [], \"samples\": [{\"labels\": {}, \"value\": -1}]}}"),
        std::string("{\"hdp_h\": {\"type\": \"histogram\", \"help\": \"\", \"buckets\": [1], \"samples\": [{\"labels\": {}, \"counts\": [1, 1], \"sum\": 1, \"count\": 5}]}}"),
        std::string("{\"hdp_g\": {\"type\": \"gauge\", \"help\": \"\", \"buckets\": [], \"samples\": [{\"labels\": {\"__x\": \"1\"}, \"value\": 1}]}}"),
        std::string(1000, '\xff')}) {
    EXPECT_THROW(Registry::from_json(garbage), InvalidArgument) << garbage.substr(0, 80);
  }
}

std::string http(int port, const std::string& request, std::chrono::milliseconds timeout = 5s) {
  return test::http_exchange(port, request, timeout);
}

TEST(HttpServer, ServesGetHeadAnd404And405) {
  HttpServer server("127.0.0.1", 0, [](const HttpRequest& request) {
    if (request.path == "/metrics") return HttpResponse{200, "text/plain; version=0.0.4", "m " + request.query + "\n"};
    if (request.path == "/boom") throw Error("exploded");
    return HttpResponse{404, "text/plain", "no\n"};
  });
  ASSERT_GT(server.port(), 0);
  const std::string get = http(server.port(), "GET /metrics?a=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(contains(get, "HTTP/1.1 200 OK")) << get;
  EXPECT_TRUE(contains(get, "Content-Type: text/plain; version=0.0.4")) << get;
  EXPECT_TRUE(contains(get, "\r\n\r\nm a=1\n")) << get;
  const std::string head = http(server.port(), "HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(contains(head, "HTTP/1.1 200 OK")) << head;
  EXPECT_FALSE(contains(head, "m \n")) << "HEAD has no body: " << head;
  EXPECT_TRUE(contains(http(server.port(), "GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), "404"));
  EXPECT_TRUE(contains(http(server.port(), "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"), "405"));
  const std::string boom = http(server.port(), "GET /boom HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(contains(boom, "500")) << boom;
  // Garbage instead of a request: the connection is dropped, the server serves on.
  static constexpr char kGarbage[] = "\x16\x03\x01\x02\x00garbage\r\n\r\n";  // a TLS hello's first bytes, a NUL
  http(server.port(), std::string(kGarbage, sizeof kGarbage - 1), 2s);
  EXPECT_TRUE(contains(http(server.port(), "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), "200 OK"));
}

TEST(HttpServer, APortInUseIsAClearError) {
  HttpServer first("127.0.0.1", 0, [](const HttpRequest&) { return HttpResponse{}; });
  try {
    HttpServer second("127.0.0.1", first.port(), [](const HttpRequest&) { return HttpResponse{}; });
    FAIL() << "bound a port in use";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "port " + std::to_string(first.port()) + " on 127.0.0.1 is in use")) << e.what();
  }
  EXPECT_THROW(HttpServer("not-an-address", 0, [](const HttpRequest&) { return HttpResponse{}; }), InvalidArgument);
}

TEST(HttpServer, AStalledClientDoesNotHoldUpOthers) {
  HttpServer server("127.0.0.1", 0, [](const HttpRequest&) { return HttpResponse{200, "text/plain", "ok\n"}; });
  // A client that connects and sends half a request, then nothing.
  const int stalled = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(server.port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(stalled, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_GT(::send(stalled, "GET /metr", 9, MSG_NOSIGNAL), 0);
  const auto started = std::chrono::steady_clock::now();
  EXPECT_TRUE(contains(http(server.port(), "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), "ok"));
  EXPECT_LT(std::chrono::steady_clock::now() - started, 2s);
  ::close(stalled);
}

// Idle connections cannot take the process's descriptors: past 64 at once, more are closed on
// arrival; once the idle ones go, requests are served again. The idle ones come from five
// addresses (one may hold only 16 slots: tests/metrics/http_server_test.cc), and the head
// deadline is long enough that none is reclaimed during the test.
TEST(HttpServer, ConnectionsBeyondTheCapAreClosedAndServingResumes) {
  HttpServerLimits limits;
  limits.head_deadline = 60s;
  HttpServer server("127.0.0.1", 0, [](const HttpRequest&) { return HttpResponse{200, "text/plain", "ok\n"}; }, limits);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(server.port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::vector<int> idle;
  for (int i = 0; i < 70; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    from.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1 + static_cast<std::uint32_t>(i / 14));  // 127.0.0.2 to .6
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from), 0);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    idle.push_back(fd);
  }
  // The server has reached the cap once it closed the last of them (EOF on our side).
  pollfd last{idle.back(), POLLIN, 0};
  ASSERT_EQ(::poll(&last, 1, 5000), 1) << "the connection past the cap was not closed";
  char byte;
  ASSERT_EQ(::recv(idle.back(), &byte, 1, 0), 0);
  EXPECT_FALSE(contains(http(server.port(), "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 2s), "ok"))
      << "served past the cap";
  const HttpServerStats stats = server.stats();
  EXPECT_EQ(stats.refused_over_cap, 70u - 64u + 1u);
  EXPECT_EQ(stats.refused_per_address, 0u);
  for (int fd : idle) ::close(fd);
  std::string answer;
  for (int i = 0; i < 50 && !contains(answer, "ok"); ++i) {
    std::this_thread::sleep_for(50ms);
    answer = http(server.port(), "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 2s);
  }
  EXPECT_TRUE(contains(answer, "ok")) << "not served again once the idle connections closed";
}

class FailingStore final : public elastic::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  bool fail = false;

 protected:
  void before_call() override {
    if (fail) throw StoreUnavailable("redis at 127.0.0.1:1: connection refused");
  }
};

TEST(TimedStore, TimesEveryCallAndCountsErrorsByKind) {
  Registry registry;
  auto failing = std::make_shared<FailingStore>(std::make_shared<elastic::MemoryStore>());
  TimedStore store(failing, registry, {{"node", "n1"}});
  store.set("a", "1");
  EXPECT_EQ(store.get("a"), "1");
  EXPECT_EQ(store.get("a"), "1");
  failing->fail = true;
  EXPECT_THROW(store.get("a"), StoreUnavailable);
  EXPECT_EQ(registry.value("hdp_redis_request_seconds", {{"node", "n1"}, {"op", "set"}}), 1);
  EXPECT_EQ(registry.value("hdp_redis_request_seconds", {{"node", "n1"}, {"op", "get"}}), 3);
  EXPECT_EQ(registry.value("hdp_redis_errors_total", {{"node", "n1"}, {"op", "get"}, {"kind", "unavailable"}}), 1);
  EXPECT_EQ(registry.value("hdp_redis_errors_total", {{"node", "n1"}, {"op", "set"}, {"kind", "unavailable"}}), -1);
}

}  // namespace
}  // namespace hdp::metrics
