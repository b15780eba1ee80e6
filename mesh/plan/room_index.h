// File: mesh/plan/room_index.h
//
// Internal to the balanced planner: the room a short sequence may still join without opening a
// micro-batch (and paying γ): a rank's local micro-batches, and its share of its latest ring, each
// up to C tokens. The planner asks for the rank that is free earliest among those with room for a
// sequence; the whole index answers that, not a window of nearly-free ranks, because on a thousand
// ranks the room that saves a micro-batch is rarely among the first few.
//
// The planner asks with non-increasing lengths (short sequences go longest first), so a room that
// fits one request fits every later one until it shrinks. Rooms at least as large as the current
// request sit in a heap ordered by their rank's finish time, smaller ones in a heap ordered by
// size, from which they move over as requests get shorter. Entries are never updated in place:
// every set_finish pushes a fresh entry and bumps the rank's version, and entries of an older
// version are dropped when they surface. Ties go to the lower rank index.
#pragma once

#include <cstdint>
#include <optional>
#include <queue>
#include <vector>

namespace hdp::mesh {

class RoomIndex {
 public:
  struct Fit {
    std::uint32_t rank = 0;
    std::uint32_t micro_batch = 0;  // the rank's best-fitting room: the smallest that holds the request
    double finish_ms = 0;           // the rank's finish time when it was last updated
  };

  explicit RoomIndex(std::size_t ranks);

  // add, clear and fill change a rank's rooms; set_finish files the rank under its finish time and
  // its rooms as they are then, so queries see a rank as of its latest set_finish. The planner
  // calls it once after every change to a rank (one heap entry per change, not one per call).

  // Rank `rank` now finishes at `finish_ms`, with the rooms it has now.
  void set_finish(std::uint32_t rank, double finish_ms);
  // Adds a room of `tokens` free tokens in micro-batch `micro_batch` on `rank` (tokens > 0).
  void add(std::uint32_t rank, std::uint32_t micro_batch, std::int64_t tokens);
  // Forgets every room of `rank`: a ring starts on it, and nothing may join a micro-batch before it.
  void clear(std::uint32_t rank);
  // Takes `tokens` from the room in `micro_batch` on `rank`.
  void fill(std::uint32_t rank, std::uint32_t micro_batch, std::int64_t tokens);

  // The rank free earliest with a room of at least `tokens`, or none. `tokens` must not exceed the
  // previous request's.
  std::optional<Fit> earliest_fit(std::int64_t tokens);

 private:
  struct Room {
    std::uint32_t micro_batch = 0;
    std::int64_t tokens = 0;
  };
  struct Entry {
    double finish_ms = 0;
    std::uint32_t rank = 0;
    std::uint32_t version = 0;
    std::int64_t tokens = 0;  // the rank's largest room
  };
  struct LaterFinish {
    bool operator()(const Entry& a, const Entry& b) const {
      return a.finish_ms != b.finish_ms ? a.finish_ms > b.finish_ms : a.rank > b.rank;
    }
  };
  struct SmallerRoom {
    bool operator()(const Entry& a, const Entry& b) const {
      return a.tokens != b.tokens ? a.tokens < b.tokens : a.rank > b.rank;
    }
  };

  bool current(const Entry& e) const { return e.version == version_[e.rank]; }
  // Bumps the rank's version and files one entry for it under its largest room.
  void refile(std::uint32_t rank);

  std::vector<std::vector<Room>> rooms_;  // per rank
  std::vector<double> finish_ms_;
  std::vector<std::uint32_t> version_;
  std::int64_t threshold_;  // the latest request; starts above any room
  std::priority_queue<Entry, std::vector<Entry>, LaterFinish> fitting_;  // largest room >= threshold_
  std::priority_queue<Entry, std::vector<Entry>, SmallerRoom> waiting_;  // largest room < threshold_
};

}  // namespace hdp::mesh
