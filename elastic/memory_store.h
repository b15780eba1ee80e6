// File: elastic/memory_store.h
//
// An in-process Store (a map, a mutex and a condition variable) for unit tests and single-process
// runs. Expired keys are dropped lazily, on access. Share one instance between threads to
// simulate several clients of one server.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>

#include "elastic/store.h"

namespace hdp::elastic {

class MemoryStore final : public Store {
 public:
  void set(std::string_view key, std::string_view value) override;
  void set_with_ttl(std::string_view key, std::string_view value, Duration ttl) override;
  bool refresh_ttl(std::string_view key, Duration ttl) override;
  std::optional<std::string> get(std::string_view key) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  bool compare_and_set(std::string_view key, std::optional<std::string_view> expected,
                       std::string_view desired) override;
  bool erase(std::string_view key) override;
  std::vector<std::string> keys(std::string_view prefix) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    std::string value;
    std::optional<Clock::time_point> expires;
  };
  using Map = std::map<std::string, Entry, std::less<>>;

  // Returns the live entry for `key`, erasing it first when it has expired. Requires mutex_.
  Entry* find_live(std::string_view key);
  void put(std::string_view key, std::string_view value, std::optional<Clock::time_point> expires);

  std::mutex mutex_;
  std::condition_variable changed_;  // notified on every write; wait() sleeps on it
  Map entries_;                      // guarded by mutex_
};

}  // namespace hdp::elastic
