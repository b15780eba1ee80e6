// The data plane's connection handshake (mesh/comm/wire.h, tcp_network.h): a connection from
// another generation, meant for another rank, or that is not an hdp rank at all, is refused,
// counted, and leaves the communicator it reached working. Ranks are threads of this process over
// loopback; the store is a MemoryStore (its contract is the Store's, checked elsewhere).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <future>
#include <thread>

#include "common/error.h"
#include "elastic/memory_store.h"
#include "elastic/prefix_store.h"
#include "mesh/comm/tcp_communicator.h"
#include "mesh/comm/wire.h"
#include "tests/support/ranks.h"

namespace hdp::mesh {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using test::on_ranks_ok;

// ---- the checks, one by one ---------------------------------------------------------------------

TEST(Handshake, EveryFieldOfTheHelloIsChecked) {
  const wire::Identity me{.group = wire::group_of("job/gen:8:boot:main/"), .generation = 8, .rank = 2, .size = 4};
  auto from = [&](int rank) {
    wire::Identity them = me;
    them.rank = rank;
    return wire::hello_for(them, me.rank);
  };
  EXPECT_EQ(wire::check_hello(from(1), me), wire::Verdict::kAccepted);
  EXPECT_EQ(wire::check_hello(from(3), me), wire::Verdict::kBadSource) << "the higher rank never connects";
  EXPECT_EQ(wire::check_hello(from(2), me), wire::Verdict::kBadSource) << "itself";
  EXPECT_EQ(wire::check_hello(from(-1), me), wire::Verdict::kBadSource);
  wire::Hello h = from(1);
  h.generation = 7;
  h.group = wire::group_of("job/gen:7:boot:main/");
  EXPECT_EQ(wire::check_hello(h, me), wire::Verdict::kOtherGeneration);
  EXPECT_THAT(wire::describe(wire::check_hello(h, me), h, me), HasSubstr("another generation (7, not 8)"));
  h = from(1);
  h.group = wire::group_of("other-job/gen:8:boot:main/");
  EXPECT_EQ(wire::check_hello(h, me), wire::Verdict::kOtherGroup);
  h = from(1);
  h.size = 5;
  EXPECT_EQ(wire::check_hello(h, me), wire::Verdict::kOtherSize);
  h = from(1);
  h.to = 3;
  EXPECT_EQ(wire::check_hello(h, me), wire::Verdict::kWrongRank);
  h = from(1);
  h.magic ^= 1;
  EXPECT_EQ(wire::check_hello(h, me), wire::Verdict::kBadMagic);
}

TEST(Handshake, AddressRecordsThatDoNotParseAreRejected) {
  const auto a = wire::parse_record(wire::record("10.1.2.3", 4567));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host, "10.1.2.3");
  EXPECT_EQ(a->port, 4567);
  const auto v6 = wire::parse_record(wire::record("::1", 80));
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "::1");
  for (const char* bad : {"", ":", "host", "host:", ":80", "host:0", "host:65536", "host:12x", "host:-1"}) {
    EXPECT_FALSE(wire::parse_record(bad)) << bad;
  }
}

// ---- against real communicators ----------------------------------------------------------------

struct Group {
  std::shared_ptr<elastic::Store> root = std::make_shared<elastic::MemoryStore>();
  std::string name;
  std::int64_t generation = 0;
  std::shared_ptr<elastic::Store> store() const { return std::make_shared<elastic::PrefixStore>(root, name); }
  TcpConnectOptions options(int rank, int size, std::chrono::milliseconds timeout = 10s) const {
    return {.rank = rank, .size = size, .store = store(), .group = name, .generation = generation, .timeout = timeout};
  }
};

// `size` ranks of `g`, connected (each connect waits for its ring neighbours).
std::vector<std::unique_ptr<TcpCommunicator>> connect_all(const Group& g, int size) {
  std::vector<std::unique_ptr<TcpCommunicator>> comms(static_cast<std::size_t>(size));
  on_ranks_ok(size, [&](int r) { comms[static_cast<std::size_t>(r)] = TcpCommunicator::connect(g.options(r, size)); });
  return comms;
}

// Every rank still works: an allreduce over all of them.
void expect_working(std::vector<std::unique_ptr<TcpCommunicator>>& comms) {
  const int n = static_cast<int>(comms.size());
  on_ranks_ok(n, [&](int r) {
    EXPECT_EQ(comms[static_cast<std::size_t>(r)]->allreduce_sum(std::int64_t{r + 1}, 10s), std::int64_t{n} * (n + 1) / 2);
  });
}

// Generation 8 is running; a rank of generation 7 (whose address record for its peer now leads to
// a listener of generation 8, as a reused port would) connects into it.
TEST(Handshake, APeerOfAnOlderGenerationIsRefusedAndCounted) {
  Group g8{.name = "job/gen:8:boot:main/", .generation = 8};
  auto comms = connect_all(g8, 2);
  const auto address = g8.store()->get(wire::record_key(1));
  ASSERT_TRUE(address);

  Group g7{.root = g8.root, .name = "job/gen:7:boot:main/", .generation = 7};
  g7.store()->set(wire::record_key(1), *address);  // generation 7's record of rank 1: the same address
  std::string error;
  const auto start = Clock::now();
  try {
    TcpCommunicator::connect(g7.options(0, 2));  // rank 0 of generation 7 connects to "rank 1"
    error = "connected";
  } catch (const PeerLost& e) {
    error = e.what();
  }
  EXPECT_THAT(error, HasSubstr("refused the connection: a rank of another generation"));
  EXPECT_LT(Clock::now() - start, 5s) << "the refusal must come at once, not at the timeout";
  EXPECT_EQ(comms[1]->refused_connections(), 1);
  EXPECT_EQ(comms[0]->refused_connections(), 0);
  EXPECT_FALSE(comms[1]->dead());
  expect_working(comms);
}

// A second "rank 1" of a running 3-rank group whose record of rank 2 leads to rank 0 (a stale or
// wrong record): rank 0 refuses the hello meant for rank 2.
TEST(Handshake, AConnectionMeantForAnotherRankIsRefusedAndCounted) {
  Group g{.name = "job/gen:3:boot:main/", .generation = 3};
  auto comms = connect_all(g, 3);
  const auto address_of_0 = g.store()->get(wire::record_key(0));
  ASSERT_TRUE(address_of_0);
  auto wrong_records = std::make_shared<elastic::MemoryStore>();
  wrong_records->set(wire::record_key(2), *address_of_0);
  TcpConnectOptions options = g.options(1, 3);
  options.store = wrong_records;  // same group and generation, its own (wrong) records
  std::string error;
  try {
    TcpCommunicator::connect(options);  // connects its ring neighbour 2, which is rank 0
    error = "connected";
  } catch (const PeerLost& e) {
    error = e.what();
  }
  EXPECT_THAT(error, HasSubstr("refused the connection: meant for another rank"));
  EXPECT_EQ(comms[0]->refused_connections(), 1);
  EXPECT_EQ(comms[1]->refused_connections() + comms[2]->refused_connections(), 0);
  expect_working(comms);
}

TEST(Handshake, GarbageAndSilentConnectionsAreRefusedAndCounted) {
  Group g{.name = "job/gen:1:boot:main/", .generation = 1};
  std::vector<std::unique_ptr<TcpCommunicator>> comms(2);
  on_ranks_ok(2, [&](int r) { comms[static_cast<std::size_t>(r)] = TcpCommunicator::connect(g.options(r, 2, 1s)); });
  const auto record = wire::parse_record(*g.store()->get(wire::record_key(1)));
  ASSERT_TRUE(record);
  namespace asio = boost::asio;
  asio::io_context io;
  const asio::ip::tcp::endpoint endpoint(asio::ip::make_address(record->host), record->port);

  // 40 bytes of garbage where the hello goes: refused with an answer, then closed.
  asio::ip::tcp::socket garbage(io);
  garbage.connect(endpoint);
  const std::string junk(sizeof(wire::Hello), 'x');
  asio::write(garbage, asio::buffer(junk));
  wire::Ack ack;
  asio::read(garbage, asio::buffer(&ack, sizeof ack));
  EXPECT_EQ(ack.verdict, static_cast<std::uint32_t>(wire::Verdict::kBadMagic));
  char byte = 0;
  boost::system::error_code ec;
  garbage.read_some(asio::buffer(&byte, 1), ec);
  EXPECT_TRUE(ec) << "the refused connection stays open";

  // A connection that says nothing is closed once the hello limit (the timeout here, 1 s) passed.
  asio::ip::tcp::socket silent(io);
  silent.connect(endpoint);
  const auto start = Clock::now();
  silent.read_some(asio::buffer(&byte, 1), ec);
  const auto held = Clock::now() - start;
  EXPECT_TRUE(ec);
  EXPECT_GE(held, 900ms);
  EXPECT_LT(held, 5s);

  // Half a hello, then close.
  {
    asio::ip::tcp::socket half(io);
    half.connect(endpoint);
    asio::write(half, asio::buffer(junk.data(), 10));
  }
  const auto deadline = Clock::now() + 5s;
  while (comms[1]->refused_connections() < 3 && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(comms[1]->refused_connections(), 3);
  expect_working(comms);
}

// The address record lives as long as its communicator: written with a TTL, rewritten (here every
// 100 ms instead of 15 min) even after someone erased it, and no longer once the communicator is
// gone.
TEST(Handshake, TheAddressRecordIsKeptWhileTheCommunicatorLives) {
  Group g{.name = "job/gen:1:boot:main/", .generation = 1};
  TcpConnectOptions options = g.options(0, 1);
  options.record_refresh = 100ms;
  auto comm = TcpCommunicator::connect(options);
  auto store = g.store();
  const std::string key = wire::record_key(0);
  const auto ttl = store->remaining_ttl({key});
  ASSERT_TRUE(ttl[0]);
  EXPECT_GT(*ttl[0], std::chrono::duration_cast<std::chrono::milliseconds>(wire::kRecordTtl) - 60s);
  const auto written = store->get(key);
  ASSERT_TRUE(written);
  ASSERT_TRUE(store->erase(key));
  const auto deadline = Clock::now() + 5s;
  while (!store->get(key) && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(store->get(key), written) << "not rewritten within 5 s";
  comm.reset();
  ASSERT_TRUE(store->erase(key));
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(store->get(key)) << "rewritten after the communicator was destroyed";
}

// Connections are made for the pairs that talk, not for every pair: after connect, a rank is
// connected to its two ring neighbours only; a message to another rank adds exactly that one.
TEST(Handshake, OnlyThePairsThatTalkAreConnected) {
  Group g{.name = "job/gen:1:boot:main/", .generation = 1};
  auto comms = connect_all(g, 8);
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(comms[static_cast<std::size_t>(r)]->connections(), 2) << "rank " << r;
  }
  const ops::Tensor out = ops::Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
  const ops::Tensor in = ops::Tensor::zeros({3}, ops::DType::kF32);
  auto recv = std::async(std::launch::async, [&] { comms[5]->recv(in, 1, 9, 10s); });
  comms[1]->send(out, 5, 9, 10s);
  recv.get();
  EXPECT_EQ(in.data<float>()[2], 3.0f);
  EXPECT_EQ(comms[1]->connections(), 3);
  EXPECT_EQ(comms[5]->connections(), 3);
  EXPECT_EQ(comms[3]->connections(), 2);
}

}  // namespace
}  // namespace hdp::mesh
