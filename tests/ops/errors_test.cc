// Bad shapes, dtypes and devices are refused with hdp::InvalidArgument naming the op and the
// offending tensor; nothing broadcasts.
#include <gtest/gtest.h>

#include <string>

#include "common/error.h"
#include "ops/adamw.h"
#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

namespace hdp::ops {
namespace {

// Runs f, expects InvalidArgument, and checks that the message contains every fragment.
template <typename F>
void expect_invalid(F&& f, std::initializer_list<std::string> fragments) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const InvalidArgument& e) {
    for (const std::string& frag : fragments) EXPECT_NE(std::string(e.what()).find(frag), std::string::npos) << e.what();
  }
}

Tensor f32(const Shape& s) { return Tensor::zeros(s, DType::kF32); }

TEST(OpErrors, LinearNamesOpAndShapes) {
  expect_invalid([] { linear_forward(f32({4, 6}), f32({3, 5})); }, {"linear_forward", "f32[4, 6]", "f32[3, 5]"});
  expect_invalid([] { linear_forward(f32({4, 6}), Tensor::zeros({3, 6}, DType::kF64)); },
                 {"linear_forward", "weight", "f64[3, 6]"});
  expect_invalid([] { linear_forward(Tensor::zeros({4, 6}, DType::kI32), f32({3, 6})); }, {"linear_forward", "i32"});
}

TEST(OpErrors, NoBroadcast) {
  expect_invalid([] { swiglu_forward(f32({2, 3}), f32({3})); }, {"swiglu_forward", "up", "f32[3]", "[2, 3]"});
  expect_invalid([] { rmsnorm_forward(f32({2, 8}), f32({1}), 1e-5); }, {"rmsnorm_forward", "weight", "[8]"});
}

TEST(OpErrors, RopeAndEmbeddingInputs) {
  expect_invalid([] { rope_forward(f32({3, 2, 5}), Tensor::zeros({3}, DType::kI64), f32({2})); }, {"rope_forward", "odd"});
  expect_invalid([] { rope_forward(f32({3, 2, 4}), Tensor::zeros({3}, DType::kI32), f32({2})); },
                 {"rope_forward", "positions", "i32[3]"});
  expect_invalid([] { embedding_forward(Tensor::from_vector<int32_t>({0, 9}, {2}), f32({8, 4})); },
                 {"embedding_forward", "token id 9", "f32[8, 4]"});
  expect_invalid([] { cross_entropy_forward(f32({2, 8}), Tensor::from_vector<int32_t>({1, 8}, {2})); },
                 {"cross_entropy_forward", "target 8"});
}

TEST(OpErrors, AttentionLayout) {
  const Tensor q = f32({6, 4, 8}), k = f32({6, 3, 8});
  expect_invalid([&] { attention_forward(q, k, k, AttentionSpec::packed({0, 6})); },
                 {"attention_forward", "f32[6, 4, 8]", "f32[6, 3, 8]", "divisible"});
  const Tensor k2 = f32({6, 2, 8});
  expect_invalid([&] { attention_forward(q, k2, k2, AttentionSpec::packed({0, 5})); },
                 {"attention_forward", "cu_q [0, 5]", "6"});
  expect_invalid([&] { attention_forward(q, k2, f32({5, 2, 8}), AttentionSpec::packed({0, 6})); },
                 {"attention_forward", "v", "f32[5, 2, 8]"});
  AttentionSpec bad_pos = AttentionSpec::packed({0, 2, 6});
  bad_pos.q_pos = {0};
  expect_invalid([&] { attention_forward(q, k2, k2, bad_pos); }, {"attention_forward", "one entry per sequence"});
}

TEST(OpErrors, MergeAndAdamW) {
  expect_invalid([] { attention_merge_forward({f32({2, 2, 4}), f32({2, 2})}, {f32({2, 2, 4}), f32({2, 1})}); },
                 {"attention_merge_forward", "b.lse", "f32[2, 1]"});
  expect_invalid([] { adamw_step(f32({4}), f32({4}), f32({3}), f32({4}), {}, 0, 0); }, {"adamw_step", "m", "f32[3]"});
  expect_invalid([] { adamw_step(f32({4}), f32({4}), f32({4}), f32({4}), {.step = 0}, 0, 0); },
                 {"adamw_step", "step"});
}

TEST(OpErrors, CudaTensorsNeedACudaBuildAndDevice) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is present; this checks the no-device refusal";
  EXPECT_THROW(Tensor::zeros({2}, DType::kF32, Device::kCuda), Error);
}

}  // namespace
}  // namespace hdp::ops
