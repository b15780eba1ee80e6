// The worker's elastic loop (trainer/elastic_loop.h) over a MemoryStore with real TCP
// communicators: when a member of the running generation freezes (here: its body stops taking
// part in collectives, as a SIGSTOPped or cut-off process would), the survivors are blocked in a
// collective whose timeout is 20 s. Once the leader publishes the generation without it, the
// survivors must leave the blocked collective within the watch interval (200 ms) plus scheduling,
// and run the next generation's body: bound 1.5 s after the publication, against the 20 s the
// collective would otherwise wait.
#include "trainer/elastic_loop.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "common/error.h"
#include "elastic/job_keys.h"
#include "elastic/memory_store.h"
#include "mesh/comm/nccl_communicator.h"
#include "tests/elastic/worker_fixture.h"
#include "tests/mesh/nccl/nccl_fake_backend.h"

namespace hdp::trainer {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Both survivors ran generation 2's body within the bound (1.5 s) of its publication.
void expect_both_within_bound(const std::map<std::string, Clock::time_point>& entered, Clock::time_point published) {
  ASSERT_EQ(entered.size(), 2u);
  for (const auto& [node, at] : entered) {
    const auto after = std::chrono::duration_cast<std::chrono::milliseconds>(at - published);
    EXPECT_LT(after, 1500ms) << node << " reached generation 2 " << after.count() << " ms after it was published";
  }
}

class ElasticLoopTest : public elastic::test::WorkerFixture {};

TEST_F(ElasticLoopTest, ANewerGenerationAbortsACollectiveBlockedOnAFrozenPeer) {
  publish(1, {"a", "b", "c"});
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::map<std::string, Clock::time_point> entered_gen2;
  std::map<std::string, std::string> left_gen1;  // what ended each survivor's generation-1 body
  Clock::time_point published;

  auto run_worker = [&](const std::string& node) {
    elastic::ElasticContext ctx = worker(node);
    LoopOptions options;
    options.connect_timeout = 20s;  // the collective's timeout: what the survivors would wait
    options.wait_slice = 100ms;
    run_elastic_loop(ctx, options, stop, [&](const elastic::Membership& m, mesh::Communicator& comm) {
      if (m.generation == 1 && node == "c") {
        while (!stop) std::this_thread::sleep_for(10ms);  // frozen: never joins the allreduce
        return BodyResult::kFinished;
      }
      if (m.generation == 1) {
        try {
          for (;;) comm.allreduce_sum(std::int64_t{1});
        } catch (const RecoverableError& e) {
          std::lock_guard lock(mutex);
          left_gen1[node] = e.what();
          throw;
        }
      }
      {
        std::lock_guard lock(mutex);
        entered_gen2[node] = Clock::now();
      }
      EXPECT_EQ(comm.allreduce_sum(std::int64_t{1}), 2);  // the two survivors, over the new communicator
      return BodyResult::kFinished;
    });
  };
  std::thread c([&] { run_worker("c"); });
  std::thread a([&] { run_worker("a"); });
  std::thread b([&] { run_worker("b"); });
  std::this_thread::sleep_for(1500ms);  // all three connected; a and b wait on c in the allreduce
  published = Clock::now();
  publish(2, {"a", "b"});
  a.join();
  b.join();
  stop = true;
  c.join();

  expect_both_within_bound(entered_gen2, published);
  // Whichever watcher fires first aborts its communicator and closes its connections, so a
  // survivor leaves either through its own watcher (the generation was superseded) or with
  // PeerLost from a peer whose watcher fired first (the frozen member's included) -- never
  // through the collective's 20 s timeout.
  for (const char* node : {"a", "b"}) {
    const std::string& why = left_gen1[node];
    EXPECT_TRUE(why.find("superseded") != std::string::npos || why.find("peer lost") != std::string::npos)
        << node << ": " << why;
  }
}

// The same over NCCL (every rank on a GPU of its own; NcclCommunicator over the fake backend,
// tests/mesh/nccl/nccl_fake_backend.h): the generation's NCCL communicator is built through the
// data plane's choice, a collective that never completes (the fake holds it, as a frozen peer
// would) is aborted once the next generation is published (ncclCommAbort, never a hang), the
// workers stay, and the next generation builds a new NCCL communicator under a new id. Bound as
// above: 1.5 s from the publication to the next generation's body, against the 20 s deadline.
TEST_F(ElasticLoopTest, ASupersededNcclCommunicatorIsAbortedAndTheNextGenerationBuildsANewOne) {
  publish(1, {"a", "b", "c"});
  auto nccl = std::make_shared<mesh::testing::FakeNccl>();
  nccl->hang = true;  // generation 1's collectives never complete
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::map<std::string, Clock::time_point> entered_gen2;
  std::map<std::string, std::string> left_gen1;
  std::map<std::string, bool> nccl_in_gen;
  Clock::time_point published;

  auto run_worker = [&](const std::string& node, const std::string& gpu) {
    elastic::ElasticContext ctx = worker(node);
    LoopOptions options;
    options.connect_timeout = 20s;
    options.wait_slice = 100ms;
    options.device = {.host = "", .device = ops::Device::kCuda, .device_id = gpu};
    options.data_plane = {.nccl_built = true,
                          .nccl_backend = [&](const mesh::RankDevice&) -> std::shared_ptr<mesh::nccl::Backend> {
                            return nccl;
                          }};
    run_elastic_loop(ctx, options, stop, [&](const elastic::Membership& m, mesh::Communicator& comm) {
      {
        std::lock_guard lock(mutex);
        nccl_in_gen[node + std::to_string(m.generation)] = dynamic_cast<mesh::NcclCommunicator*>(&comm) != nullptr;
      }
      if (m.generation == 1 && node == "c") {
        while (!stop) std::this_thread::sleep_for(10ms);
        return BodyResult::kFinished;
      }
      if (m.generation == 1) {
        try {
          comm.allreduce_sum(std::int64_t{1});
        } catch (const RecoverableError& e) {
          std::lock_guard lock(mutex);
          left_gen1[node] = e.what();
          throw;
        }
        ADD_FAILURE() << node << ": generation 1's allreduce completed";
        return BodyResult::kFinished;
      }
      {
        std::lock_guard lock(mutex);
        entered_gen2[node] = Clock::now();
      }
      comm.allreduce_sum(std::int64_t{1});  // completes: the new communicator works
      return BodyResult::kFinished;
    });
  };
  std::thread c([&] { run_worker("c", "2"); });
  std::thread a([&] { run_worker("a", "0"); });
  std::thread b([&] { run_worker("b", "1"); });
  // All three joined and a and b are held in their allreduce (two groups launched while held).
  for (const auto until = Clock::now() + 20s; nccl->launched().size() < 2 && Clock::now() < until;) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_GE(nccl->launched().size(), 2u) << "a and b never launched their allreduce";
  nccl->hang = false;  // generation 2's groups complete
  published = Clock::now();
  publish(2, {"a", "b"});
  a.join();
  b.join();
  stop = true;
  c.join();

  expect_both_within_bound(entered_gen2, published);
  for (const char* node : {"a", "b"}) {
    EXPECT_TRUE(nccl_in_gen[std::string(node) + "1"] && nccl_in_gen[std::string(node) + "2"]) << node;
    EXPECT_NE(left_gen1[node].find("superseded"), std::string::npos) << node << ": " << left_gen1[node];
  }
  EXPECT_TRUE(nccl_in_gen["c1"]);
  EXPECT_GE(nccl->aborts(), 2) << "a's and b's generation-1 communicators";
  // Generation 1: three ranks joined one id; generation 2: two joined another.
  std::map<mesh::nccl::UniqueId, int> joined;
  for (const auto& [id, rank] : nccl->inits()) ++joined[id];
  ASSERT_EQ(joined.size(), 2u);
  std::vector<int> sizes;
  for (const auto& [id, n] : joined) sizes.push_back(n);
  std::sort(sizes.begin(), sizes.end());
  EXPECT_EQ(sizes, (std::vector<int>{2, 3}));
}

// A generation that keeps every worker and adds one (a node joined) does not abort the running
// generation's communicator: the step in flight (here an allreduce, 1.2 s of "compute" while the
// joiner's generation is published, and another allreduce) completes over the old communicator,
// and the ranks switch at the boundary, where they see the change, to the generation of three.
// A generation without one of them still aborts at once (ANewerGenerationAbortsACollective...).
TEST_F(ElasticLoopTest, AGenerationThatOnlyAddsAWorkerLetsTheStepInFlightFinish) {
  publish(1, {"a", "b"});
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::map<std::string, std::string> gen1_end;  // what ended each runner's generation-1 body
  std::vector<int> gen2_sizes;
  std::atomic<int> in_step{0};
  auto run_worker = [&](const std::string& node) {
    elastic::ElasticContext ctx = worker(node);
    LoopOptions options;
    options.wait_slice = 100ms;
    options.watch_every = 20ms;
    run_elastic_loop(ctx, options, stop, [&](const elastic::Membership& m, mesh::Communicator& comm) {
      if (m.generation == 1) {
        try {
          EXPECT_EQ(comm.allreduce_sum(std::int64_t{1}), 2);
          ++in_step;
          std::this_thread::sleep_for(1200ms);  // the generation of three is published meanwhile
          EXPECT_EQ(comm.allreduce_sum(std::int64_t{1}), 2);
          std::lock_guard lock(mutex);
          gen1_end[node] = ctx.changed(m) ? "step finished, change seen at the boundary" : "no change seen";
        } catch (const RecoverableError& e) {
          std::lock_guard lock(mutex);
          gen1_end[node] = std::string("aborted: ") + e.what();
          throw;
        }
        return BodyResult::kGenerationChanged;
      }
      const auto size = comm.allreduce_sum(std::int64_t{1});
      std::lock_guard lock(mutex);
      gen2_sizes.push_back(static_cast<int>(size));
      return BodyResult::kFinished;
    });
  };
  std::thread a([&] { run_worker("a"); });
  std::thread b([&] { run_worker("b"); });
  const auto deadline = Clock::now() + 20s;
  while (in_step < 2 && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(in_step.load(), 2);
  publish(2, {"a", "b", "c"});
  std::thread c([&] { run_worker("c"); });
  a.join();
  b.join();
  c.join();
  for (const char* node : {"a", "b"}) {
    EXPECT_EQ(gen1_end[node], "step finished, change seen at the boundary") << node;
  }
  EXPECT_EQ(gen2_sizes, (std::vector<int>{3, 3, 3}));
}

// A worker that starts after the job completed (its agent restarted it as the others finished)
// finds no generation that includes it, and none will come: it must see the outcome and leave.
TEST_F(ElasticLoopTest, AWorkerWaitingAfterTheJobCompletedLeaves) {
  publish(1, {"a"});
  store_->set(elastic::keys::kOutcome, "completed");
  std::atomic<bool> stop{false};
  elastic::ElasticContext ctx = worker("late");  // not a member of generation 1
  LoopOptions options;
  options.wait_slice = 100ms;
  const auto start = Clock::now();
  const LoopResult result = run_elastic_loop(ctx, options, stop, [](const elastic::Membership&, mesh::Communicator&) {
    ADD_FAILURE() << "no generation includes this worker";
    return BodyResult::kFinished;
  });
  EXPECT_EQ(result, LoopResult::kFinished);
  EXPECT_LT(Clock::now() - start, 2s) << "one wait slice (100 ms) and a store read";
}

}  // namespace
}  // namespace hdp::trainer
