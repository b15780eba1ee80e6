// File: mesh/plan/rank_heap.h
//
// Internal to the planners: ranks ordered by a load (accumulated time or tokens), least loaded first,
// ties broken by the lower rank index so that every process pops the same ranks.
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <tuple>
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

// The same order for loads that also change while a rank is in the heap: push() files the rank
// under its new load and supersedes its earlier entry, which is skipped when it surfaces, so a rank
// is popped at most once per push.
class UpdatableRankHeap {
 public:
  explicit UpdatableRankHeap(std::size_t ranks) : version_(ranks, 0) {
    for (std::size_t r = 0; r < ranks; ++r) heap_.push({0.0, static_cast<std::uint32_t>(r), 0});
  }
  bool empty() {
    drop_superseded();
    return heap_.empty();
  }
  std::pair<double, std::uint32_t> top() {
    drop_superseded();
    return {std::get<0>(heap_.top()), std::get<1>(heap_.top())};
  }
  std::pair<double, std::uint32_t> pop() {
    const auto entry = top();
    heap_.pop();
    ++version_[entry.second];  // popped: out of the heap until pushed again
    return entry;
  }
  void push(double load, std::uint32_t rank) { heap_.push({load, rank, ++version_[rank]}); }

 private:
  void drop_superseded() {
    while (!heap_.empty() && std::get<2>(heap_.top()) != version_[std::get<1>(heap_.top())]) heap_.pop();
  }

  std::vector<std::uint32_t> version_;
  // (load, rank, version): the smallest load, then the smallest rank, is on top.
  std::priority_queue<std::tuple<double, std::uint32_t, std::uint32_t>,
                      std::vector<std::tuple<double, std::uint32_t, std::uint32_t>>, std::greater<>>
      heap_;
};

}  // namespace hdp::mesh
