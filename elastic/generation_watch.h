// File: elastic/generation_watch.h
//
// How an agent learns of a new generation without polling: the leader's publishing commit appends
// {gen: <g>} to the job's capped `generations` stream (keys::kGenerationLog), and the agent blocks
// on it (Store::stream_read, XREAD BLOCK on Redis) between heartbeats. The heartbeat's own read of
// `gen` stays the fallback: an entry missed (the stream trimmed past it, the store restarted empty)
// is seen at the next heartbeat. Given a GenerationRecords, the watch also applies each entry's
// delta to the record held (elastic/generation_records.h), so the agent knows the new record
// without reading it.
//
// Example (on a thread of its own; the store is thread-safe):
//   GenerationWatch watch(job_store);
//   if (auto g = watch.wait(1500ms)) tell_workers(*g);
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "elastic/generation_records.h"
#include "elastic/store.h"

namespace hdp::elastic {

class GenerationWatch {
 public:
  explicit GenerationWatch(std::shared_ptr<Store> job_store, std::shared_ptr<GenerationRecords> records = nullptr)
      : store_(std::move(job_store)), records_(std::move(records)) {}

  // The newest generation appended since the previous call (the first call starts after the
  // stream's newest entry), waiting up to `block` for one; nullopt when none came. Entries whose
  // `gen` does not decode are logged and skipped. Throws StoreUnavailable when the store cannot be
  // reached (the next call reads on from the last entry seen). Not thread-safe: one caller.
  std::optional<std::int64_t> wait(std::chrono::milliseconds block);

 private:
  std::shared_ptr<Store> store_;
  std::shared_ptr<GenerationRecords> records_;  // may be null
  std::optional<std::string> last_id_;  // the newest entry seen; nullopt before the first call
};

// What an agent that learned generation g some other way (the heartbeat's read of `gen`) does
// before reading gen:<g> (1.4 MB at 12,500 nodes): reads the stream's newest entries (one
// XREVRANGE of at most kGenerationLogLength small entries) and applies their deltas, oldest first,
// to the record held. Returns g's record when that gave it, else null. Throws StoreUnavailable.
std::shared_ptr<const HeldRecord> catch_up(Store& store, GenerationRecords& records, std::int64_t g);

}  // namespace hdp::elastic
