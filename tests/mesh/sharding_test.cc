// Causal-balanced chunks and the fewest ranks a sequence may use (with and without offloading).
#include <gtest/gtest.h>

#include "mesh/plan/sharding.h"

namespace hdp::mesh {
namespace {

TEST(Sharding, ChunksCoverTheSequenceAndMembersGetAtMostCeilSOverD) {
  for (std::int64_t tokens : {1, 7, 64, 1000, 8191, 8193, 65537}) {
    for (std::int64_t d : {1, 2, 3, 7, 16, 33}) {
      std::int64_t next = 0;
      for (std::int64_t chunk = 0; chunk < 2 * d; ++chunk) {
        const TokenRange range = chunk_range(tokens, d, chunk);
        EXPECT_EQ(range.begin, next);
        next = range.end;
      }
      EXPECT_EQ(next, tokens);
      std::int64_t total = 0;
      for (std::int64_t p = 0; p < d; ++p) {
        total += member_tokens(tokens, d, p);
        EXPECT_LE(member_tokens(tokens, d, p), (tokens + d - 1) / d) << tokens << " over " << d;
      }
      EXPECT_EQ(total, tokens);
    }
  }
}

TEST(Sharding, MinimumRanksIsAnyIntegerCeil) {
  const CostModel model = gpu_preset_7b();
  EXPECT_EQ(shard_limit(model, 8192, 8192, false).min_ranks, 1);
  EXPECT_EQ(shard_limit(model, 8193, 8192, false).min_ranks, 2);
  EXPECT_EQ(shard_limit(model, 3 * 8192 + 1, 8192, false).min_ranks, 4);
  EXPECT_EQ(shard_limit(model, 5 * 8192, 8192, false).min_ranks, 5);  // not rounded up to 8
}

TEST(Sharding, OffloadLowersTheMinimumForLongSequences) {
  const CostModel model = gpu_preset_7b();
  // 1M tokens: T_layer ≈ (5.128e-6·2^40 + 0.184·2^20 + 629)/32 ms ≈ 182 s, far more than moving
  // Act(s) = 139264·2^20 bytes at 25 GB/s (≈ 5.8 s), so r = 1 and a rank holds
  // l·C/2 = 16·8192 tokens: D = ceil(2^20 / 131072) = 8 instead of 128.
  const ShardLimit limit = shard_limit(model, 1 << 20, 8192, true);
  EXPECT_DOUBLE_EQ(limit.offload_ratio, 1.0);
  EXPECT_EQ(limit.rank_capacity, 131072);
  EXPECT_EQ(limit.min_ranks, 8);
  // Just above C, compute still hides moving everything: one rank suffices.
  EXPECT_EQ(shard_limit(model, 8193, 8192, true).min_ranks, 1);
  // Over a slow host link compute hides only r ≈ 0.002, less than the ratio that saves a rank
  // (l·Act(C) / ((l-2)·Act(s)) ≈ 0.008 here), so Eq. 3 gives no offload and D(s) stays ceil(s/C).
  CostModel slow = model;
  slow.offload->d2h_gbps = 0.001;
  const ShardLimit limit_slow = shard_limit(slow, 1 << 20, 8192, true);
  EXPECT_EQ(limit_slow.min_ranks, 128);
  EXPECT_EQ(limit_slow.offload_ratio, 0.0);
}

}  // namespace
}  // namespace hdp::mesh
