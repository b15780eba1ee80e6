// File: elastic/leader_lease.h
//
// Exactly one leader per job: the holder of the `leader` key (SET if absent, with a TTL, renewed
// only while it still holds our id — both are Store::commit()s). If the leader dies its key
// expires and the next candidate to try takes over. Not thread-safe; calls may block on the store.
//
// A `leader` value no agent writes (not a string, or not "<node>/<incarnation>") is garbage: a
// person or another program wrote it. Each candidate logs it and treats it as no valid leader:
// once the candidate has seen it for longer than the lease's TTL (so a value with a TTL had its
// chance to expire) it replaces it with its own id. A string is replaced by one commit that
// requires the same garbage, so a legitimate leader that got there first is never displaced. A
// key of another type cannot be a commit's condition: it is erased, then acquired as usual; a
// candidate that erased it just after another one had replaced it costs one extra leader change,
// never two leaders, since every leader's write requires `leader` to hold its own id.
// A value of the right form whose holder is dead expires with its TTL, as always.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "elastic/store.h"

namespace hdp::elastic {

// Whether `value` has the form of a leader id, "<node>/<incarnation>": a non-empty node and an
// incarnation of 16 lowercase hex digits (new_incarnation()).
bool is_leader_id(std::string_view value);

class LeaderLease {
 public:
  LeaderLease(std::shared_ptr<Store> job_store, std::string candidate_id, Store::Duration ttl);

  // Acquires the lease when free, renews it when ours. Returns whether we hold it now.
  bool try_acquire_or_renew();
  // The same, given the holder the caller has just read (so followers cost one read per poll,
  // which the caller can batch with others in a multi_get; a key of another type reads as nullopt).
  bool try_acquire_or_renew(const std::optional<std::string>& holder);
  // Takes the lease from `holder`, whose agent is known to be gone (agent_presence.h), in one
  // commit that requires `leader` to still name it; returns whether we hold it now.
  bool take_over(const std::string& holder, const std::string& why);
  // Gives the lease up (if ours) so that another agent takes over at once.
  void release();
  bool held() const { return held_; }

 private:
  // `leader` holds garbage (`value`, or nullopt for a key of another type): log, wait out the
  // TTL, then replace it. Returns whether we hold the lease now.
  bool replace_garbage(const std::optional<std::string>& value, const std::string& why);
  bool acquire();

  std::shared_ptr<Store> store_;
  std::string id_;
  Store::Duration ttl_;
  bool held_ = false;
  // The garbage last seen in `leader` (nullopt: a key of another type) and since when.
  std::optional<std::optional<std::string>> garbage_;
  std::chrono::steady_clock::time_point garbage_since_{};
};

}  // namespace hdp::elastic
