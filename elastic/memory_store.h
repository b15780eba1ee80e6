// File: elastic/memory_store.h
//
// An in-process Store (a map, a mutex and a condition variable) for unit tests and single-process
// runs. Expired keys are dropped lazily, on access. Share one instance between threads to
// simulate several clients of one server.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>

#include "elastic/store.h"

namespace hdp::elastic {

class MemoryStore final : public Store {
 public:
  void set(std::string_view key, std::string_view value) override;
  void set_with_ttl(std::string_view key, std::string_view value, Duration ttl) override;
  Refresh refresh_ttl(std::string_view key, Duration ttl, std::optional<std::string_view> new_value,
                      const std::vector<std::string>& reads) override;
  std::optional<std::string> get(std::string_view key) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  bool compare_and_set(std::string_view key, std::optional<std::string_view> expected,
                       std::string_view desired) override;
  bool erase(std::string_view key) override;
  std::vector<std::string> keys(std::string_view prefix) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys) override;
  std::vector<std::optional<Duration>> remaining_ttl(const std::vector<std::string>& keys) override;
  std::map<std::string, std::string> hash_get_all(std::string_view key) override;
  std::vector<StreamEntry> stream_tail(std::string_view key, std::size_t count) override;
  std::vector<StreamEntry> stream_read(std::string_view key, std::string_view after, std::size_t count,
                                       Duration block) override;
  void stop_stream_reads() override;
  void interrupt_stream_reads() override;
  CommitResult commit(const Transaction& transaction) override;

  // Forgets every key, as a Redis server restarted without persistence (or FLUSHALL) does.
  void clear();

 private:
  using Clock = std::chrono::steady_clock;
  // One key's value: a string, a hash or a stream, as in Redis; the kind is fixed at creation.
  struct Entry {
    enum class Kind { kString, kHash, kStream };
    Kind kind = Kind::kString;
    std::string value;
    std::map<std::string, std::string> hash;
    std::deque<StreamEntry> stream;
    std::optional<Clock::time_point> expires;
  };
  using Map = std::map<std::string, Entry, std::less<>>;

  // Returns the live entry for `key`, erasing it first when it has expired. Requires mutex_.
  Entry* find_live(std::string_view key);
  // Like find_live, but throws InvalidArgument when the key holds another kind. Requires mutex_.
  Entry* find_kind(std::string_view key, Entry::Kind kind);
  // Returns the live entry of `kind`, creating it when missing. Requires mutex_.
  Entry& obtain(std::string_view key, Entry::Kind kind);
  void put(std::string_view key, std::string_view value, std::optional<Clock::time_point> expires);
  void apply(const Write& write);  // requires mutex_

  std::mutex mutex_;
  bool stream_reads_stopped_ = false;  // guarded by mutex_
  std::int64_t stream_interrupts_ = 0;  // interrupt_stream_reads() calls; guarded by mutex_
  int stream_readers_ = 0;               // stream_read() calls under way; guarded by mutex_
  bool stream_interrupt_pending_ = false;  // one came while none was under way; guarded by mutex_
  std::condition_variable changed_;  // notified on every write; wait() sleeps on it
  Map entries_;                      // guarded by mutex_
  std::uint64_t last_stream_ms_ = 0, stream_sequence_ = 0;  // guarded by mutex_; stream ids
};

}  // namespace hdp::elastic
