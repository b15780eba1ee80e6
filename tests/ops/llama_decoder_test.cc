// The KV-cache decoder (ops/model/llama_decoder.h) against the full forward: for a random tiny
// model and a 40-token sequence fed as an 11-token prompt then one token at a time, the logits of
// every position equal LlamaModel::forward's row for it over the sequence up to there, within
// 1e-5 of the row's largest magnitude (the same ops; only the attention's and GEMMs' summation
// order differs with the shapes, ~1e-7). Bad input is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/error.h"
#include "ops/model/llama_decoder.h"
#include "ops/model/llama_model.h"
#include "tests/ops/tiny_llama.h"

namespace hdp::ops::model {
namespace {

TEST(LlamaDecoder, EveryPositionsLogitsEqualTheFullForwardsAndBadInputIsRefused) {
  const LlamaConfig config = testing::tiny_llama();
  LlamaModel model(config);
  model.init(21);
  std::mt19937 rng(3);
  std::vector<int32_t> seq(40);
  for (auto& t : seq) t = static_cast<int32_t>(rng() % 256);

  LlamaDecoder decoder(config, model.params(), 64);
  constexpr size_t kPrompt = 11;
  double worst = 0;
  for (size_t end = kPrompt; end <= seq.size(); ++end) {
    const std::vector<float> logits =
        end == kPrompt ? decoder.append({seq.begin(), seq.begin() + kPrompt}) : decoder.append({seq[end - 1]});
    ASSERT_EQ(decoder.length(), static_cast<int64_t>(end));
    model.forward(pack_documents({{seq.begin(), seq.begin() + static_cast<long>(end)}}));
    const std::vector<float> full = model.logits().to_vector<float>();
    const size_t row = (end - 1) * static_cast<size_t>(config.vocab_size);
    double scale = 0, diff = 0;
    for (size_t j = 0; j < logits.size(); ++j) {
      scale = std::max(scale, std::abs(double(full[row + j])));
      diff = std::max(diff, std::abs(double(logits[j]) - full[row + j]));
    }
    ASSERT_EQ(logits.size(), static_cast<size_t>(config.vocab_size));
    worst = std::max(worst, diff / scale);
  }
  std::printf("worst logit difference against the full forward: %.3g of the largest\n", worst);
  EXPECT_LT(worst, 1e-5);

  EXPECT_THROW(decoder.append({}), InvalidArgument);
  LlamaDecoder small(config, model.params(), 4);
  EXPECT_THROW(small.append({1, 2, 3, 4, 5}), InvalidArgument);
  EXPECT_THROW(small.append({256}), InvalidArgument);
  EXPECT_THROW(small.append({-1}), InvalidArgument);
  EXPECT_NO_THROW(small.append({1, 2, 3, 4}));
  EXPECT_THROW(small.append({1}), InvalidArgument) << "the cache is full";
}

}  // namespace
}  // namespace hdp::ops::model
