// DistributedStep::evaluate: the loss of a held-out batch under the current parameters, forward
// only, across a world. One batch of 12 sequences (1 to 300 tokens; C = 160 on 2 ranks and 96 on 4,
// so the long ones run over rings of ranks) on 1, 2 and 4 ranks as threads over TCP on loopback, with balanced plans,
// against one process running the whole batch packed: the losses agree within 1e-6 relative (each
// is a double sum of per-token f32 losses that differ only in summation order inside the GEMMs and
// attention, ~1e-7 relative at worst; measured 5e-10), the parameters and the gradient buffer are
// unchanged, and a second evaluation gives the same loss bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "mesh/comm/communicator_factory.h"
#include "mesh/step/distributed_step.h"
#include "ops/model/llama_params.h"
#include "tests/mesh/plan_test_support.h"
#include "tests/ops/tiny_llama.h"
#include "tests/support/ranks.h"

namespace hdp::mesh {
namespace {

using namespace std::chrono_literals;
using ops::model::LlamaModel;

const std::vector<std::int64_t> kLengths{300, 140, 64, 40, 17, 9, 5, 3, 1, 2, 90, 33};

std::vector<std::vector<std::int32_t>> batch() {
  std::mt19937 rng(5);
  std::vector<std::vector<std::int32_t>> out;
  for (std::int64_t len : kLengths) {
    std::vector<std::int32_t> seq(static_cast<std::size_t>(len));
    for (auto& t : seq) t = static_cast<std::int32_t>(rng() % 256);
    out.push_back(std::move(seq));
  }
  return out;
}

double reference_loss() {
  LlamaModel model(ops::testing::tiny_llama());
  model.init(11);
  const auto docs = batch();
  const ops::model::Batch packed = ops::model::pack_documents(docs);
  std::int64_t targets = 0;
  for (const auto& d : docs) targets += static_cast<std::int64_t>(d.size()) - 1;
  return model.forward(packed) / static_cast<double>(targets);
}

double evaluate_on(int world) {
  const auto config = ops::testing::tiny_llama();
  const std::int64_t n = ops::model::param_count(config);
  const PlannedStep planned = plan_step(test::make_request(kLengths, static_cast<std::size_t>(world), world == 1 ? 512 : world == 2 ? 160 : 96),
                                        Strategy::kBalanced);
  auto comms = connect_local(world, 20s);
  const auto docs = batch();
  std::vector<double> losses(static_cast<std::size_t>(world));
  hdp::test::on_ranks_ok(world, [&](int r) {
    LlamaModel model(config);
    model.init(11);
    const std::vector<float> params = model.params().to_vector<float>();
    model.grads().view(0, {1}).copy_from(ops::Tensor::from_vector<float>({0.25f}, {1}));  // a gradient in flight
    ZeroOptimizer zero(n, r, world);
    DistributedStep step(model, zero, *comms[static_cast<std::size_t>(r)], {.timeout = 20s});
    const auto first = step.evaluate(planned, docs);
    const auto second = step.evaluate(planned, docs);
    EXPECT_EQ(first.loss(), second.loss()) << "rank " << r;
    EXPECT_EQ(model.params().to_vector<float>(), params) << "evaluation changed the parameters";
    const std::vector<float> g = model.grads().to_vector<float>();
    EXPECT_EQ(g[0], 0.25f);
    for (std::size_t i = 1; i < g.size(); ++i) ASSERT_EQ(g[i], 0.0f) << "evaluation wrote a gradient at " << i;
    losses[static_cast<std::size_t>(r)] = first.loss();
  });
  for (double l : losses) EXPECT_EQ(l, losses[0]) << "every rank reports the all-reduced loss";
  return losses[0];
}

TEST(Evaluate, TheLossOfABatchIsTheSameOnOneTwoAndFourRanksAndMovesNothing) {
  const double ref = reference_loss();
  for (int world : {1, 2, 4}) {
    const double loss = evaluate_on(world);
    std::printf("world %d: eval loss %.9f, one process %.9f, relative %.3g\n", world, loss, ref,
                std::abs(loss - ref) / ref);
    EXPECT_NEAR(loss / ref, 1.0, 1e-6) << "world " << world;
  }
}

}  // namespace
}  // namespace hdp::mesh
