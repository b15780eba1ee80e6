// Flat-buffer arithmetic: tensor offsets, the slices a shard range cuts, ZeRO-1 partitions.
#include <gtest/gtest.h>

#include "checkpoint/flat_layout.h"
#include "common/error.h"

namespace hdp::checkpoint {
namespace {

FlatLayout three_tensors() { return FlatLayout({{"a", {2, 3}}, {"b", {4}}, {"c", {5, 1}}}); }

TEST(CheckpointLayout, OffsetsAreBackToBack) {
  FlatLayout layout = three_tensors();
  EXPECT_EQ(layout.offset(0), 0);
  EXPECT_EQ(layout.offset(1), 6);
  EXPECT_EQ(layout.offset(2), 10);
  EXPECT_EQ(layout.numel(2), 5);
  EXPECT_EQ(layout.total(), 15);
}

TEST(CheckpointLayout, SlicesCutTensorsAnywhere) {
  FlatLayout layout = three_tensors();
  // [4, 12) covers a[4,6), all of b, c[0,2).
  std::vector<Slice> slices = layout.slices({4, 12});
  ASSERT_EQ(slices.size(), 3u);
  EXPECT_EQ(slices[0].tensor, 0u);
  EXPECT_EQ(slices[0].tensor_offset, 4);
  EXPECT_EQ(slices[0].length, 2);
  EXPECT_EQ(slices[0].flat_offset, 4);
  EXPECT_EQ(slices[1].tensor, 1u);
  EXPECT_EQ(slices[1].tensor_offset, 0);
  EXPECT_EQ(slices[1].length, 4);
  EXPECT_EQ(slices[2].tensor, 2u);
  EXPECT_EQ(slices[2].tensor_offset, 0);
  EXPECT_EQ(slices[2].length, 2);
  EXPECT_EQ(slices[2].flat_offset, 10);
}

TEST(CheckpointLayout, SlicesInsideOneTensorAndAtBoundaries) {
  FlatLayout layout = three_tensors();
  std::vector<Slice> inside = layout.slices({7, 9});
  ASSERT_EQ(inside.size(), 1u);
  EXPECT_EQ(inside[0].tensor, 1u);
  EXPECT_EQ(inside[0].tensor_offset, 1);
  EXPECT_EQ(inside[0].length, 2);
  std::vector<Slice> exact = layout.slices({6, 10});
  ASSERT_EQ(exact.size(), 1u);
  EXPECT_EQ(exact[0].tensor, 1u);
  EXPECT_EQ(exact[0].length, 4);
  EXPECT_TRUE(layout.slices({6, 6}).empty());
  EXPECT_EQ(layout.slices({0, 15}).size(), 3u);
}

TEST(CheckpointLayout, SlicesOfAPartitionCoverEveryElementOnce) {
  FlatLayout layout = three_tensors();
  for (int world = 1; world <= 8; ++world) {
    std::vector<int> hits(15, 0);
    for (ShardRange range : split_evenly(layout.total(), world)) {
      for (const Slice& s : layout.slices(range)) {
        EXPECT_EQ(s.flat_offset, layout.offset(s.tensor) + s.tensor_offset);
        for (std::int64_t i = 0; i < s.length; ++i) ++hits[static_cast<std::size_t>(s.flat_offset + i)];
      }
    }
    for (int h : hits) EXPECT_EQ(h, 1) << "world " << world;
  }
}

TEST(CheckpointLayout, RejectsBadInput) {
  EXPECT_THROW(FlatLayout({}), InvalidArgument);
  EXPECT_THROW(FlatLayout({{"a", {2}}, {"a", {3}}}), InvalidArgument);
  EXPECT_THROW(FlatLayout({{"a", {0, 3}}}), InvalidArgument);
  EXPECT_THROW(FlatLayout({TensorSpec{"a", {}}}), InvalidArgument);
  EXPECT_THROW(FlatLayout({{"", {1}}}), InvalidArgument);
  EXPECT_THROW(three_tensors().slices({10, 16}), InvalidArgument);
  EXPECT_THROW(three_tensors().slices({-1, 3}), InvalidArgument);
  EXPECT_THROW(split_evenly(10, 0), InvalidArgument);
}

TEST(CheckpointLayout, IntersectAndSplitEvenly) {
  EXPECT_EQ(intersect({0, 10}, {5, 20}), (ShardRange{5, 10}));
  EXPECT_TRUE(intersect({0, 5}, {5, 9}).empty());
  EXPECT_TRUE(intersect({7, 9}, {0, 3}).empty());
  std::vector<ShardRange> parts = split_evenly(10, 4);  // 3, 3, 2, 2
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_EQ(parts[0], (ShardRange{0, 3}));
  EXPECT_EQ(parts[1], (ShardRange{3, 6}));
  EXPECT_EQ(parts[2], (ShardRange{6, 8}));
  EXPECT_EQ(parts[3], (ShardRange{8, 10}));
  EXPECT_EQ(split_evenly(2, 3)[2], (ShardRange{2, 2}));  // more ranks than elements: empty shards
}

}  // namespace
}  // namespace hdp::checkpoint
