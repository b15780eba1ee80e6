// File: mesh/rank_heap.h
//
// Internal to the planners: ranks ordered by a load (accumulated time or tokens), least loaded first,
// ties broken by the lower rank index so that every process pops the same ranks.
#pragma once

#include <cstdint>
#include <queue>
#include <utility>
#include <vector>

namespace hdp::mesh {

class RankHeap {
 public:
  explicit RankHeap(std::size_t ranks) {
    for (std::size_t r = 0; r < ranks; ++r) heap_.push({0.0, static_cast<std::uint32_t>(r)});
  }
  bool empty() const { return heap_.empty(); }
  std::pair<double, std::uint32_t> top() const { return heap_.top(); }
  std::pair<double, std::uint32_t> pop() {
    auto entry = heap_.top();
    heap_.pop();
    return entry;
  }
  void push(double load, std::uint32_t rank) { heap_.push({load, rank}); }

 private:
  // std::greater on (load, rank): the smallest load, then the smallest rank, is on top.
  std::priority_queue<std::pair<double, std::uint32_t>, std::vector<std::pair<double, std::uint32_t>>,
                      std::greater<>>
      heap_;
};

}  // namespace hdp::mesh
