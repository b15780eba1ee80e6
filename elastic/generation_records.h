// File: elastic/generation_records.h
//
// The newest generation record an agent holds, decoded and as encoded, shared by the thread that
// watches the generations stream (it applies each entry's delta: elastic/membership.h, "A
// generation record by difference"), the agent's membership check, and the channel that hands
// the record to the node's workers (elastic/agent_channel.h). Thread-safe; a record is immutable
// once held, so readers keep it without copying.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "elastic/membership.h"

namespace hdp::elastic {

struct HeldRecord {
  Generation generation;
  std::string encoded;  // as stored in gen:<g>
};

class GenerationRecords {
 public:
  // The record of generation g, when it is the one held.
  std::shared_ptr<const HeldRecord> get(std::int64_t g) const;
  // The number of the generation whose record is held; 0 when none is.
  std::int64_t held_generation() const;
  // Holds this record unless a newer one is held; returns what is held afterwards.
  std::shared_ptr<const HeldRecord> put(Generation generation, std::string encoded);
  // Derives generation g from the record held and a stream entry's delta, and holds it when its
  // encoding has `digest`. False (nothing changes) when no base is held or the delta is over
  // another, does not decode, or gives another digest: the caller reads gen:<g> instead.
  bool apply(std::int64_t g, std::string_view delta, std::string_view digest);

  std::int64_t applied() const;     // deltas that gave the record
  std::int64_t missed() const;   // deltas that did not (no base, a gap, garbage, another digest)

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<const HeldRecord> held_;  // guarded by mutex_
  std::int64_t applied_ = 0;                // guarded by mutex_
  std::int64_t missed_ = 0;                 // guarded by mutex_
};

}  // namespace hdp::elastic
