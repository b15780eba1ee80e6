#include "mesh/plan/room_index.h"

#include <algorithm>
#include <limits>

#include "common/error.h"

namespace hdp::mesh {

RoomIndex::RoomIndex(std::size_t ranks)
    : rooms_(ranks), finish_ms_(ranks, 0.0), version_(ranks, 0), threshold_(std::numeric_limits<std::int64_t>::max()) {}

void RoomIndex::set_finish(std::uint32_t rank, double finish_ms) {
  finish_ms_[rank] = finish_ms;
  refile(rank);
}

void RoomIndex::add(std::uint32_t rank, std::uint32_t micro_batch, std::int64_t tokens) {
  HDP_CHECK(tokens > 0, "a room holds at least one token");
  rooms_[rank].push_back({micro_batch, tokens});
}

void RoomIndex::clear(std::uint32_t rank) {
  rooms_[rank].clear();
}

void RoomIndex::fill(std::uint32_t rank, std::uint32_t micro_batch, std::int64_t tokens) {
  auto& rooms = rooms_[rank];
  const auto room =
      std::find_if(rooms.begin(), rooms.end(), [&](const Room& r) { return r.micro_batch == micro_batch; });
  HDP_CHECK(room != rooms.end() && room->tokens >= tokens, "a sequence fills a room it does not fit");
  room->tokens -= tokens;
  if (room->tokens == 0) rooms.erase(room);
}

void RoomIndex::refile(std::uint32_t rank) {
  ++version_[rank];
  std::int64_t largest = 0;
  for (const Room& room : rooms_[rank]) largest = std::max(largest, room.tokens);
  if (largest == 0) return;
  const Entry entry{.finish_ms = finish_ms_[rank], .rank = rank, .version = version_[rank], .tokens = largest};
  if (largest >= threshold_) {
    fitting_.push(entry);
  } else {
    waiting_.push(entry);
  }
}

std::optional<RoomIndex::Fit> RoomIndex::earliest_fit(std::int64_t tokens) {
  HDP_CHECK(tokens <= threshold_, "room requests must come in non-increasing length");
  threshold_ = tokens;
  while (!waiting_.empty() && (!current(waiting_.top()) || waiting_.top().tokens >= threshold_)) {
    if (current(waiting_.top())) fitting_.push(waiting_.top());
    waiting_.pop();
  }
  while (!fitting_.empty() && !current(fitting_.top())) fitting_.pop();
  if (fitting_.empty()) return std::nullopt;
  const Entry& entry = fitting_.top();
  const Room* best = nullptr;
  for (const Room& room : rooms_[entry.rank]) {
    if (room.tokens >= tokens && (best == nullptr || room.tokens < best->tokens)) best = &room;
  }
  HDP_CHECK(best != nullptr, "a rank's rooms changed without set_finish");
  return Fit{.rank = entry.rank, .micro_batch = best->micro_batch, .finish_ms = entry.finish_ms};
}

}  // namespace hdp::mesh
