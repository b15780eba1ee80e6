// Step equivalence: one global batch of mixed lengths (1 to 300 tokens), run by DistributedStep
// in forked processes over TCP on loopback under many plans on 1, 2, 3 and 4 ranks, gives
// the same loss, reduced gradients, updated parameters and AdamW moments as one process running
// the whole batch packed (LlamaModel::forward, backward(1 / targets), AdamW on the full buffer).
// Plans: everything whole on one rank; static; naive; balanced (speeds 1 on 2 and 3 ranks,
// (1, 1, 0.5, 1) on 4); a hand-made plan with rings in a permuted order, local sequences beside
// shards and uneven micro-batch counts per rank. Capacities force the 300-token sequence over 2-4
// ranks. The model: the tiny LLaMA, and the same with Llama 3.2's features (llama3 RoPE scaling,
// tied embeddings, a free head_dim), whose ring shards must rotate with their global positions and
// whose one embedding parameter sums both uses' gradients.
// Bounds (each tensor: max |difference| / max |reference|):
//   f64: everything within 1e-9; the two sides differ only in summation order (~1e-16 per sum);
//   f32: loss and reduced gradients within 1e-5; parameters within 1e-5 by the L2 ratio
//        ||p - p_ref|| / ||p_ref|| (Adam's first update is about lr * sign(g), so a gradient
//        element near zero whose rounding differs moves by up to 2 lr: element-wise bounds do not
//        hold there); moments within 1e-5 of the largest.
// Every rank's parameters after the step must be bitwise identical (the all-gather copies each
// shard from its owner).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

#include "elastic/redis_store.h"
#include "elastic/redis_url.h"
#include "mesh/step/batch_builder.h"
#include "mesh/comm/communicator_factory.h"
#include "mesh/step/distributed_step.h"
#include "ops/adamw.h"
#include "ops/model/llama_params.h"
#include "tests/mesh/forked_ranks.h"
#include "tests/mesh/plan_test_support.h"
#include "tests/ops/tiny_llama.h"
#include "tests/support/redis_server.h"
#include "tests/support/temp_dir.h"

namespace hdp::mesh {
namespace {

using namespace std::chrono_literals;
using ops::DType;
using ops::Tensor;
using ops::model::LlamaConfig;
using ops::model::LlamaModel;

constexpr std::uint64_t kSeed = 2024;
const std::vector<std::int64_t> kLengths{300, 140, 64, 40, 17, 9, 5, 3, 1, 2, 90, 33};

// The tiny LLaMA, or the same with Llama 3.2's features (tests/ops/tiny_llama.h: llama3 RoPE
// scaling over the batch's positions up to 300, beyond its original 64; tied embeddings; a free
// head_dim): its ring shards rotate with their global positions.
struct Case {
  DType dtype;
  bool llama3;
};
LlamaConfig tiny_config(const Case& c) { return c.llama3 ? ops::testing::tiny_llama3() : ops::testing::tiny_llama(); }

StepOptions step_options() {
  StepOptions o;
  o.adamw = {.lr = 1e-3f, .weight_decay = 0.1f};
  o.max_grad_norm = 0.25;  // the batch's gradient norm (0.31) is above it: clipping is exercised
  o.timeout = 30s;
  return o;
}

std::vector<std::vector<std::int32_t>> make_batch() {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<std::vector<std::int32_t>> batch;
  for (std::int64_t len : kLengths) {
    std::vector<std::int32_t> seq(static_cast<std::size_t>(len));
    for (auto& t : seq) t = byte(rng);
    batch.push_back(std::move(seq));
  }
  return batch;
}

// What a run produced, all in double: scalars and flat tensors over the whole parameter buffer.
struct Outcome {
  double loss_sum = 0, loss_tokens = 0, grad_norm = 0;
  std::vector<double> grads, m, v, params;
};

std::vector<double> doubles(const Tensor& t) {
  if (t.dtype() == DType::kF64) return t.to_vector<double>();
  const std::vector<float> f = t.to_vector<float>();
  return {f.begin(), f.end()};
}

void write_doubles(std::ofstream& out, const std::vector<double>& v) {
  const std::uint64_t n = v.size();
  out.write(reinterpret_cast<const char*>(&n), sizeof n);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(n * sizeof(double)));
}

std::vector<double> read_doubles(std::ifstream& in) {
  std::uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), sizeof n);
  std::vector<double> v(n);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(double)));
  if (!in) throw std::runtime_error("short result file");
  return v;
}

// The single-process step over the whole batch.
Outcome reference_step(const Case& c) {
  const DType dtype = c.dtype;
  const auto batch = make_batch();
  LlamaModel model(tiny_config(c), dtype);
  model.init(kSeed);
  model.zero_grad();
  Outcome o;
  o.loss_sum = model.forward(ops::model::pack_documents(batch));
  o.loss_tokens = static_cast<double>(global_targets(batch));
  model.backward(1.0 / o.loss_tokens);
  o.grads = doubles(model.grads());
  o.grad_norm = std::sqrt(ops::sum_squares(model.grads()));
  const Tensor m = Tensor::zeros(model.params().shape(), dtype), v = Tensor::zeros(model.params().shape(), dtype);
  StepOptions opt = step_options();
  opt.adamw.step = 1;
  ops::adamw_step(model.params(), model.grads(), m, v, opt.adamw, o.grad_norm, opt.max_grad_norm);
  o.m = doubles(m);
  o.v = doubles(v);
  o.params = doubles(model.params());
  return o;
}

class StepEquivalence : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() { redis_ = new hdp::test::RedisServer(); }
  static void TearDownTestSuite() {
    delete redis_;
    redis_ = nullptr;
  }

  // Runs the plan on plan.rank_queues.size() forked ranks; returns the assembled outcome and
  // checks that every rank ended with the same parameters.
  Outcome distributed(const Plan& plan, DType dtype, const std::string& name) {
    const int world = static_cast<int>(plan.rank_queues.size());
    const std::string prefix = "step-" + std::to_string(++runs_) + ":";
    const std::string url = redis_->url();
    const auto& dir = tmp_.path();
    const auto ranks = test::run_forked_ranks(
        world,
        [&](int rank) {
          auto redis = std::make_shared<elastic::RedisStore>(elastic::parse_redis_url(url));
          auto comm = connect_rank(redis, prefix, rank, world, 30s);
          const auto batch = make_batch();
          LlamaModel model(tiny_config(GetParam()), dtype);
          model.init(kSeed);
          ZeroOptimizer zero(model.params().numel(), rank, world, dtype);
          DistributedStep step(model, zero, *comm, step_options());
          const StepResult r = step.run(plan, batch);
          std::ofstream out(dir / ("rank" + std::to_string(rank)), std::ios::binary);
          write_doubles(out, {r.loss_sum, static_cast<double>(r.loss_tokens), r.grad_norm});
          write_doubles(out, doubles(zero.grad_shard()));
          write_doubles(out, doubles(zero.exp_avg()));
          write_doubles(out, doubles(zero.exp_avg_sq()));
          write_doubles(out, doubles(model.params()));
          comm->barrier();  // nobody closes its connections while a peer still needs them
          return out ? 0 : 4;
        },
        60s);
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(WIFEXITED(ranks.statuses[static_cast<std::size_t>(r)]) &&
                  WEXITSTATUS(ranks.statuses[static_cast<std::size_t>(r)]) == 0)
          << name << ": rank " << r << " status " << ranks.statuses[static_cast<std::size_t>(r)];
    }
    Outcome o;
    for (int r = 0; r < world; ++r) {
      std::ifstream in(dir / ("rank" + std::to_string(r)), std::ios::binary);
      const auto scalars = read_doubles(in);
      const auto g = read_doubles(in), m = read_doubles(in), v = read_doubles(in), p = read_doubles(in);
      o.grads.insert(o.grads.end(), g.begin(), g.end());
      o.m.insert(o.m.end(), m.begin(), m.end());
      o.v.insert(o.v.end(), v.begin(), v.end());
      if (r == 0) {
        o.loss_sum = scalars[0];
        o.loss_tokens = scalars[1];
        o.grad_norm = scalars[2];
        o.params = p;
      } else {
        EXPECT_EQ(p, o.params) << name << ": rank " << r << "'s parameters differ from rank 0's";
        EXPECT_EQ(scalars[0], o.loss_sum) << name << ": rank " << r << "'s loss";
      }
    }
    return o;
  }

  static hdp::test::RedisServer* redis_;
  hdp::test::TempDir tmp_{"hdp-step"};
  static int runs_;  // across the suite: the redis-server outlives each test's fixture
};

hdp::test::RedisServer* StepEquivalence::redis_ = nullptr;
int StepEquivalence::runs_ = 0;

double max_rel(const std::vector<double>& a, const std::vector<double>& ref) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  return diff / std::max(scale, 1e-300);
}

double l2_rel(const std::vector<double>& a, const std::vector<double>& ref) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    diff += (a[i] - ref[i]) * (a[i] - ref[i]);
    scale += ref[i] * ref[i];
  }
  return std::sqrt(diff / std::max(scale, 1e-300));
}

void expect_equivalent(const Outcome& got, const Outcome& ref, DType dtype, const std::string& name) {
  ASSERT_EQ(got.grads.size(), ref.grads.size()) << name;
  ASSERT_EQ(got.params.size(), ref.params.size()) << name;
  EXPECT_EQ(got.loss_tokens, ref.loss_tokens) << name;
  const double tol = dtype == DType::kF64 ? 1e-9 : 1e-5;
  std::printf("%-26s %s: loss %.1e, grads %.1e, exp_avg %.1e, exp_avg_sq %.1e, params %.1e (max), %.1e (L2)\n",
              name.c_str(), dtype == DType::kF64 ? "f64" : "f32",
              std::abs(got.loss_sum - ref.loss_sum) / std::abs(ref.loss_sum), max_rel(got.grads, ref.grads),
              max_rel(got.m, ref.m), max_rel(got.v, ref.v), max_rel(got.params, ref.params),
              l2_rel(got.params, ref.params));
  EXPECT_LE(std::abs(got.loss_sum - ref.loss_sum) / std::abs(ref.loss_sum), tol) << name << " loss";
  EXPECT_LE(std::abs(got.grad_norm - ref.grad_norm) / ref.grad_norm, tol) << name << " grad norm";
  EXPECT_LE(max_rel(got.grads, ref.grads), tol) << name << " reduced gradients";
  EXPECT_LE(max_rel(got.m, ref.m), tol) << name << " exp_avg";
  EXPECT_LE(max_rel(got.v, ref.v), tol) << name << " exp_avg_sq";
  if (dtype == DType::kF64) {
    EXPECT_LE(max_rel(got.params, ref.params), tol) << name << " parameters";
  } else {
    EXPECT_LE(l2_rel(got.params, ref.params), tol) << name << " parameters (L2)";
  }
}

// Capacity per world size: the 300-token sequence needs every rank.
std::int64_t capacity_for(int world) { return world == 1 ? 512 : (300 + world - 1) / world + 5; }

// Rings in permuted order, local sequences beside shards, and uneven queues: rank 0 runs four
// micro-batches, rank 1 three (two when world > 2), the others one.
Plan hand_made_plan(int world) {
  Plan plan;
  std::vector<std::uint32_t> all;
  for (int r = world - 1; r >= 0; --r) all.push_back(static_cast<std::uint32_t>(r));
  const auto last = static_cast<std::uint32_t>(world - 1);
  plan.micro_batches = {
      {.slot = 0, .sequences = {0, 10}, .ranks = all, .local = {{last, 4}}, .rank_capacity = 1024},
      {.slot = 1, .sequences = {1}, .ranks = {0, last}, .local = {{0, 7}}, .rank_capacity = 1024},
      {.slot = 2, .sequences = {2, 3}, .ranks = {0}, .rank_capacity = 1024},
      {.slot = 3, .sequences = {5, 6}, .ranks = {0}, .rank_capacity = 1024},
      {.slot = 2, .sequences = {8, 9, 11}, .ranks = {1}, .rank_capacity = 1024},
  };
  plan.rank_queues.assign(static_cast<std::size_t>(world), {});
  for (std::uint32_t b = 0; b < plan.micro_batches.size(); ++b) {
    for (std::uint32_t r : plan.micro_batches[b].ranks) plan.rank_queues[r].push_back(b);
  }
  for (auto& q : plan.rank_queues) {
    std::sort(q.begin(), q.end(), [&](auto a, auto b) { return plan.micro_batches[a].slot < plan.micro_batches[b].slot; });
  }
  return plan;
}

TEST_P(StepEquivalence, EveryPlanOnOneToFourRanksEqualsTheSingleProcessStep) {
  const DType dtype = GetParam().dtype;
  const Outcome ref = reference_step(GetParam());
  ASSERT_GT(ref.grad_norm, step_options().max_grad_norm) << "the test means to exercise clipping";

  {
    PlanRequest request = test::make_request(kLengths, 1, capacity_for(1));
    const Plan whole = make_plan(request, Strategy::kBalanced);
    ASSERT_EQ(whole.rank_queues.size(), 1u);
    expect_equivalent(distributed(whole, dtype, "whole on 1 rank"), ref, dtype, "whole on 1 rank");
  }
  for (int world = 2; world <= 4; ++world) {
    PlanRequest request = test::make_request(kLengths, static_cast<std::size_t>(world), capacity_for(world));
    if (world == 4) request.speeds = {1, 1, 0.5, 1};
    for (Strategy strategy : {Strategy::kStatic, Strategy::kNaive, Strategy::kBalanced}) {
      const Plan plan = make_plan(request, strategy);
      const std::string name = std::string(strategy_name(strategy)) + " on " + std::to_string(world) + " ranks";
      bool sharded = false;
      for (const MicroBatch& mb : plan.micro_batches) sharded = sharded || mb.ranks.size() > 1;
      EXPECT_TRUE(sharded) << name << ": the plan should shard the long sequence";
      expect_equivalent(distributed(plan, dtype, name), ref, dtype, name);
    }
    const std::string name = "hand-made on " + std::to_string(world) + " ranks";
    expect_equivalent(distributed(hand_made_plan(world), dtype, name), ref, dtype, name);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, StepEquivalence,
                         ::testing::Values(Case{DType::kF64, false}, Case{DType::kF32, false}, Case{DType::kF64, true},
                                           Case{DType::kF32, true}),
                         [](const auto& info) {
                           return std::string(info.param.dtype == DType::kF64 ? "f64" : "f32") +
                                  (info.param.llama3 ? "_tied_llama3_rope" : "");
                         });

}  // namespace
}  // namespace hdp::mesh
