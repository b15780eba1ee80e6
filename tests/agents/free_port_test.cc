// agents::free_loopback_port: calls in one process never return the same port twice among the
// last 256 (two agents once got the same metrics port from two calls in a row), from any thread.
#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

#include "agents/embedded_redis.h"

namespace hdp::agents {
namespace {

TEST(FreeLoopbackPort, CallsFromSeveralThreadsNeverRepeatARecentPort) {
  constexpr int kThreads = 4, kEach = 60;  // 240 ports, within the 256 remembered
  std::vector<std::vector<int>> ports(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) ports[t].push_back(free_loopback_port());
    });
  for (auto& thread : threads) thread.join();
  std::set<int> seen;
  for (const auto& list : ports)
    for (int port : list) {
      EXPECT_GT(port, 0);
      EXPECT_LE(port, 65535);
      EXPECT_TRUE(seen.insert(port).second) << "port " << port << " handed out twice";
    }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(kThreads * kEach));
}

}  // namespace
}  // namespace hdp::agents
