// The balanced planner's index of room: the earliest-free rank with enough room, as ranks finish
// later, rooms fill, and rings clear them.
#include <gtest/gtest.h>

#include "common/error.h"
#include "mesh/plan/rank_heap.h"
#include "mesh/plan/room_index.h"

namespace hdp::mesh {
namespace {

TEST(RoomIndex, EarliestFreeRankWithEnoughRoomAndItsBestFittingRoom) {
  RoomIndex index(4);
  index.add(1, /*micro_batch=*/7, 100);
  index.add(2, 8, 500);
  index.add(2, 9, 300);
  index.set_finish(0, 10);
  index.set_finish(1, 20);
  index.set_finish(2, 30);
  auto fit = index.earliest_fit(400);
  ASSERT_TRUE(fit.has_value());
  EXPECT_EQ(fit->rank, 2u);  // rank 1 is free earlier but has only 100 tokens of room
  EXPECT_EQ(fit->micro_batch, 8u);
  EXPECT_EQ(fit->finish_ms, 30);
  fit = index.earliest_fit(250);
  ASSERT_TRUE(fit.has_value());
  EXPECT_EQ(fit->micro_batch, 9u);  // both of rank 2's rooms fit: the smaller one
  fit = index.earliest_fit(100);
  ASSERT_TRUE(fit.has_value());
  EXPECT_EQ(fit->rank, 1u);  // a smaller request reaches rank 1's room
  EXPECT_FALSE(RoomIndex(2).earliest_fit(1).has_value());
}

TEST(RoomIndex, FollowsFinishTimesFillsAndClears) {
  RoomIndex index(3);
  index.add(0, 1, 200);
  index.add(1, 2, 200);
  EXPECT_FALSE(index.earliest_fit(200).has_value());  // rooms count from the rank's next set_finish
  index.set_finish(0, 5);
  index.set_finish(1, 6);
  EXPECT_EQ(index.earliest_fit(200)->rank, 0u);
  index.set_finish(0, 9);  // rank 0 took more work: rank 1 is now free first
  EXPECT_EQ(index.earliest_fit(200)->rank, 1u);
  index.fill(1, 2, 150);  // 50 tokens left on rank 1, seen once rank 1 is filed again
  EXPECT_THROW(index.earliest_fit(200), InvariantViolation);  // filed with 200, holds 50
  index.set_finish(1, 7);
  EXPECT_EQ(index.earliest_fit(100)->rank, 0u);
  EXPECT_EQ(index.earliest_fit(50)->rank, 1u);
  index.clear(1);  // a ring starts on rank 1
  index.set_finish(1, 8);
  index.fill(0, 1, 200);
  index.set_finish(0, 9);
  EXPECT_FALSE(index.earliest_fit(10).has_value());
  EXPECT_THROW(index.earliest_fit(11), InvariantViolation);  // requests must not grow
  EXPECT_THROW(index.fill(2, 3, 1), InvariantViolation);     // no such room
}

TEST(UpdatableRankHeap, ARankPushedAgainIsPoppedOnceUnderItsNewLoad) {
  UpdatableRankHeap heap(3);
  EXPECT_EQ(heap.top(), (std::pair<double, std::uint32_t>{0.0, 0}));
  heap.push(5.0, 0);  // supersedes rank 0's entry at 0
  heap.push(1.0, 2);
  EXPECT_EQ(heap.pop(), (std::pair<double, std::uint32_t>{0.0, 1}));
  EXPECT_EQ(heap.pop(), (std::pair<double, std::uint32_t>{1.0, 2}));
  EXPECT_EQ(heap.pop(), (std::pair<double, std::uint32_t>{5.0, 0}));
  EXPECT_TRUE(heap.empty());
}

}  // namespace
}  // namespace hdp::mesh
