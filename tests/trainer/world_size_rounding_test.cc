// What separates a step on 2 ranks from the same step on 4 (tests/trainer/trainer_cluster_test.cc
// allows relative 1e-4 between them) is summation order, not a different computation: the first
// steps of the trainer's own batches (the tiny model, /usr/include cut at 128 tokens, 1,024 tokens
// a step, the balanced plan of each world size, the trainer's seed, schedule and weight-decay
// exemption) run through DistributedStep on 2 and on 4 ranks (threads of this process over TCP
// TCP on loopback) give, in float64, the same losses and parameters within 1e-9 (relative); in
// float32 they differ by float32 rounding only (loss within 1e-5, parameters within 1e-4 of the
// largest; measured 2e-9 and 7e-7, printed). Measured float64: 2e-16 and 6e-16.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <thread>

#include "mesh/comm/communicator_factory.h"
#include "mesh/step/distributed_step.h"
#include "mesh/plan/plan.h"
#include "tests/trainer/tiny_config.h"
#include "trainer/data/batch_source.h"
#include "trainer/trainer_config.h"
#include "trainer/training_setup.h"

namespace hdp::trainer {
namespace {

using namespace std::chrono_literals;
using ops::DType;

constexpr int kSteps = 3;

struct Trained {
  std::vector<double> losses;
  std::vector<double> params;  // rank 0's after the last step
};

TrainerConfig config() {
  TrainerConfig c = tiny_config();
  c.data = "/usr/include";
  c.seed = 77;
  c.lr = {.peak = 3e-3, .min = 3e-4, .warmup = 1, .total = 10};
  return c;
}

Trained train(int world, DType dtype) {
  const TrainerConfig c = config();
  data::BatchSource source(open_data(c), c.seed);
  checkpoint::DataPosition position;
  std::vector<data::GlobalBatch> batches;
  for (int s = 0; s < kSteps; ++s) batches.push_back(source.next(position, c.batch_tokens));
  const auto no_decay = no_decay_ranges(c);  // the trainer's own exemption
  auto comms = mesh::connect_local(world, 30s);
  Trained run;
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      omp_set_num_threads(1);
      ops::model::LlamaModel model(c.model, dtype);
      model.init(c.seed);
      mesh::ZeroOptimizer zero(model.params().numel(), r, world, dtype);
      zero.set_no_decay(no_decay);
      for (int s = 0; s < kSteps; ++s) {
        mesh::PlanRequest request;
        request.lengths = batches[s].lengths();
        request.speeds.assign(static_cast<std::size_t>(world), 1.0);
        request.capacity = c.capacity;
        request.context = c.context;
        request.cost = trainer_cost_model(c);
        const mesh::Plan plan = mesh::make_plan(request, mesh::Strategy::kBalanced);
        mesh::StepOptions o;
        o.adamw = {.lr = static_cast<float>(c.lr.at(s + 1)), .weight_decay = c.weight_decay};
        o.max_grad_norm = c.max_grad_norm;
        mesh::DistributedStep step(model, zero, *comms[r], o);
        const double loss = step.run(plan, batches[s].sequences).loss();
        if (r == 0) run.losses.push_back(loss);
      }
      if (r == 0) {
        if (dtype == DType::kF64) {
          run.params = model.params().to_vector<double>();
        } else {
          const auto f = model.params().to_vector<float>();
          run.params.assign(f.begin(), f.end());
        }
      }
    });
  }
  for (auto& t : ranks) t.join();
  return run;
}

// {largest relative loss difference, largest parameter difference over the largest parameter}.
std::pair<double, double> differences(const Trained& a, const Trained& b) {
  double loss = 0, diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.losses.size(); ++i) {
    loss = std::max(loss, std::abs(a.losses[i] - b.losses[i]) / std::abs(a.losses[i]));
  }
  for (std::size_t i = 0; i < a.params.size(); ++i) {
    diff = std::max(diff, std::abs(a.params[i] - b.params[i]));
    scale = std::max(scale, std::abs(a.params[i]));
  }
  return {loss, diff / scale};
}

TEST(WorldSizeRounding, TwoAndFourRanksAgreeInFloat64) {
  const Trained two = train(2, DType::kF64), four = train(4, DType::kF64);
  ASSERT_EQ(two.losses.size(), static_cast<std::size_t>(kSteps));
  const auto [loss, params] = differences(two, four);
  std::cout << "float64, 2 vs 4 ranks after " << kSteps << " steps: loss " << loss << ", parameters " << params << "\n";
  EXPECT_LE(loss, 1e-9);
  EXPECT_LE(params, 1e-9);
}

TEST(WorldSizeRounding, TwoAndFourRanksDifferInFloat32OnlyByRounding) {
  const Trained two = train(2, DType::kF32), four = train(4, DType::kF32);
  const auto [loss, params] = differences(two, four);
  std::cout << "float32, 2 vs 4 ranks after " << kSteps << " steps: loss " << loss << ", parameters " << params << "\n";
  EXPECT_LE(loss, 1e-5);
  // Measured 7e-7 of the largest parameter. An element whose tiny gradient rounds to the other
  // sign would move by up to 2 lr (6e-3) the other way in Adam's first steps: the bound would
  // then fail, and the case would need the L2 ratio of tests/mesh/step_equivalence_test.cc.
  EXPECT_LE(params, 1e-4);
}

}  // namespace
}  // namespace hdp::trainer
