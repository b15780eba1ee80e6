// ZeroOptimizer's weight-decay exemption (set_no_decay): over 3 ranks (threads of one process,
// TCP on loopback) with exempt ranges that start, end and lie inside different shards, the
// updated parameters equal AdamW run over the whole buffer in one process, element by element:
// weight decay where the element is not exempt, none where it is. AdamW is element-wise, so the
// two must agree exactly (same float operations on each element). An exemption ignored would
// move an exempt element by lr * wd * p = 0.05 p more: caught wherever p != 0.
#include <gtest/gtest.h>

#include <thread>

#include "common/error.h"
#include "mesh/comm/communicator_factory.h"
#include "mesh/step/zero.h"
#include "ops/adamw.h"

namespace hdp::mesh {
namespace {

using namespace std::chrono_literals;
using ops::DType;
using ops::Tensor;

constexpr std::int64_t kN = 100;  // shards of 34, 33, 33

std::vector<float> values(std::uint32_t seed) {
  std::vector<float> v(kN);
  for (std::int64_t i = 0; i < kN; ++i) v[i] = static_cast<float>(((i * 37 + seed) % 41) - 20) / 16.0f;
  return v;
}

TEST(ZeroNoDecay, ExemptRangesTakeNoWeightDecayOnEveryShard) {
  const std::vector<ZeroOptimizer::Range> exempt{{30, 40}, {60, 62}, {90, 100}, {10, 12}};
  const ops::AdamWParams adamw{.lr = 0.1f, .weight_decay = 0.5f};
  const auto params0 = values(1), grads = values(2);

  // Reference: every element updated alone with its own weight decay; gradients summed over 3 ranks.
  std::vector<float> expected(kN);
  for (std::int64_t i = 0; i < kN; ++i) {
    bool off = false;
    for (const auto& r : exempt) off = off || (i >= r.begin && i < r.end);
    const Tensor p = Tensor::from_vector<float>({params0[i]}, {1});
    const Tensor g = Tensor::from_vector<float>({3 * grads[i]}, {1});
    const Tensor m = Tensor::zeros({1}, DType::kF32), v = Tensor::zeros({1}, DType::kF32);
    ops::AdamWParams p1 = adamw;
    p1.weight_decay = off ? 0.0f : adamw.weight_decay;
    p1.step = 1;
    ops::adamw_step(p, g, m, v, p1, /*grad_norm=*/1.0, /*max_grad_norm=*/0);
    expected[i] = p.data<float>()[0];
  }

  auto comms = connect_local(3, 10s);
  std::vector<std::vector<float>> results(3);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      ZeroOptimizer zero(kN, r, 3);
      zero.set_no_decay(exempt);
      const Tensor params = Tensor::from_vector<float>(params0, {kN});
      const Tensor g = Tensor::from_vector<float>(grads, {kN});
      zero.step(params, g, *comms[r], adamw, /*max_grad_norm=*/0);
      results[r] = params.to_vector<float>();
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 3; ++r) {
    for (std::int64_t i = 0; i < kN; ++i) EXPECT_EQ(results[r][i], expected[i]) << "rank " << r << " element " << i;
  }
}

TEST(ZeroNoDecay, ARangeOutsideTheBufferIsRefused) {
  ZeroOptimizer zero(kN, 0, 2);
  EXPECT_THROW(zero.set_no_decay({{90, 101}}), InvalidArgument);
  EXPECT_THROW(zero.set_no_decay({{-1, 3}}), InvalidArgument);
  EXPECT_THROW(zero.set_no_decay({{5, 4}}), InvalidArgument);
  EXPECT_THROW(zero.set_steps_taken(-1), InvalidArgument);
}

}  // namespace
}  // namespace hdp::mesh
