// --fault's hold (trainer_config.h, FaultInjector::hold): how a test stands a job at a step until
// it acts on it. Ranks are threads, the job's store a MemoryStore.
#include "trainer/fault_injection.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "elastic/job_keys.h"
#include "elastic/memory_store.h"
#include "tests/support/error_message.h"
#include "trainer/trainer_config.h"

namespace hdp::trainer {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

TEST(HoldFault, ParsesEveryRankAStepAndTheLongestHold) {
  const Fault f = parse_fault("hold:all@11:60000");
  EXPECT_EQ(f.kind, Fault::Kind::kHold);
  EXPECT_EQ(f.step, 11);
  EXPECT_EQ(f.hang, 60000ms);
  EXPECT_FALSE(f.claimed_once()) << "every rank holds, not the first to claim it";
  for (const char* bad : {"hold:0@11:60000", "hold:n1/0@11:60000", "hold:all@11", "hold:all@0:100", "hold:all@5:0",
                          "hold:all@5:3600001", "hold:all@5:forward"}) {
    const std::string message = test::invalid_argument_message([&] { parse_fault(bad); });
    EXPECT_NE(message.find(bad), std::string::npos) << bad << ": " << message;
  }
}

// setup:NODE/SLOT:MS (a worker slow to set up): parsed without a step, and delay_setup() sleeps
// only in the worker it names, for its MS (within 1 s more on a loaded machine).
TEST(SetupFault, ParsesAWorkerAndADelayAndSleepsOnlyInThatWorker) {
  const Fault f = parse_fault("setup:n2/1:300");
  EXPECT_EQ(f.kind, Fault::Kind::kSetup);
  EXPECT_EQ(f.node, "n2");
  EXPECT_EQ(f.slot, 1);
  EXPECT_EQ(f.hang, 300ms);
  EXPECT_FALSE(f.claimed_once());
  for (const char* bad : {"setup:n2/1", "setup:n2:300", "setup:n2/1:0", "setup:n2/1:3600001", "setup:n2/x:300",
                          "setup:/1:300", "setup:n2/1:30ms"}) {
    const std::string message = test::invalid_argument_message([&] { parse_fault(bad); });
    EXPECT_NE(message.find(bad), std::string::npos) << bad << ": " << message;
  }
  const std::vector<Fault> faults{f};
  elastic::WorkerIdentity other{.node = "n2", .local_rank = 0}, named{.node = "n2", .local_rank = 1};
  auto start = Clock::now();
  delay_setup(faults, other);
  EXPECT_LT(seconds_since(start), 0.2);
  start = Clock::now();
  delay_setup(faults, named);
  EXPECT_GE(seconds_since(start), 0.3);
  EXPECT_LT(seconds_since(start), 1.3);
}

class Hold : public ::testing::Test {
 protected:
  // A worker's injector (made on the test's thread: the vectors are not shared with the ranks').
  std::unique_ptr<FaultInjector> injector(int local_rank) {
    identities_.push_back(std::make_unique<elastic::WorkerIdentity>());
    identities_.back()->node = "n1";
    identities_.back()->local_rank = local_rank;
    return std::make_unique<FaultInjector>(faults_, *identities_.back(), store_);
  }
  std::vector<Fault> faults_ = {parse_fault("crash:0@99"), parse_fault("hold:all@5:10000")};
  std::shared_ptr<elastic::Store> store_ = std::make_shared<elastic::MemoryStore>();
  std::vector<std::unique_ptr<elastic::WorkerIdentity>> identities_;
  const std::function<bool()> never_ = [] { return false; };
};

TEST_F(Hold, OnlyBeforeItsStep) {
  const auto a = injector(0);
  const auto began = Clock::now();
  EXPECT_FALSE(a->hold(4, never_));
  EXPECT_FALSE(a->hold(6, never_));
  EXPECT_LT(seconds_since(began), 1.0);
}

TEST_F(Hold, ARequestReleasesEveryRankAndAWorkerStartedLaterDoesNotHoldAgain) {
  std::vector<double> held_for(3, -1);
  std::vector<std::thread> ranks;
  const auto began = Clock::now();
  std::vector<std::unique_ptr<FaultInjector>> injectors;
  for (int r = 0; r < 3; ++r) injectors.push_back(injector(r));
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      EXPECT_TRUE(injectors[static_cast<std::size_t>(r)]->hold(5, never_));
      held_for[static_cast<std::size_t>(r)] = seconds_since(began);
    });
  }
  std::this_thread::sleep_for(300ms);
  for (double t : held_for) EXPECT_LT(t, 0) << "a rank went on before the job was asked anything";
  store_->set(elastic::keys::kControl, R"({"stop":{"id":"x","by":"test"}})");
  for (auto& t : ranks) t.join();
  for (double t : held_for) {
    EXPECT_GE(t, 0.3);
    EXPECT_LT(t, 0.3 + 2.0) << "released long after the request";  // 20 ms polls; 2 s for a loaded machine
  }
  EXPECT_TRUE(store_->get(fault_key(1)).has_value()) << "the release is not recorded for the job";
  store_->erase(elastic::keys::kControl);
  const auto joiner = injector(0);
  const auto joined = Clock::now();
  EXPECT_FALSE(joiner->hold(5, never_)) << "a joiner held the job again";
  EXPECT_LT(seconds_since(joined), 1.0);
}

TEST_F(Hold, ASignalToOneRankReleasesTheOthers) {
  std::atomic<bool> signalled{false};
  std::atomic<int> released{0};
  const auto quiet_injector = injector(1), signalled_injector = injector(0);
  std::thread quiet([&] {
    EXPECT_TRUE(quiet_injector->hold(5, never_));
    ++released;
  });
  std::thread signalled_rank([&] {
    EXPECT_TRUE(signalled_injector->hold(5, [&] { return signalled.load(); }));
    ++released;
  });
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(released.load(), 0);
  const auto began = Clock::now();
  signalled = true;
  quiet.join();
  signalled_rank.join();
  EXPECT_EQ(released.load(), 2);
  EXPECT_LT(seconds_since(began), 2.0);
}

TEST_F(Hold, ALiveSettingReleasesItAndEachWorkerHoldsOnce) {
  const auto a = injector(0);
  store_->set(elastic::keys::kSettings, R"({"log_every":2})");
  const auto began = Clock::now();
  EXPECT_TRUE(a->hold(5, never_));
  EXPECT_FALSE(a->hold(5, never_)) << "held twice by one worker (a rolled-back or re-formed job)";
  EXPECT_LT(seconds_since(began), 1.0);
}

TEST_F(Hold, NothingAskedGoesOnAtItsDeadline) {
  faults_ = {parse_fault("hold:all@5:300")};
  const auto a = injector(0);
  const auto began = Clock::now();
  EXPECT_TRUE(a->hold(5, never_));
  const double took = seconds_since(began);
  EXPECT_GE(took, 0.3);
  EXPECT_LT(took, 2.0);
  EXPECT_TRUE(store_->get(fault_key(0)).has_value());
}

}  // namespace
}  // namespace hdp::trainer
