#include "elastic/memory_store.h"

#include <charconv>

#include "common/error.h"

namespace hdp::elastic {

MemoryStore::Entry* MemoryStore::find_live(std::string_view key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  if (it->second.expires && *it->second.expires <= Clock::now()) {
    entries_.erase(it);
    return nullptr;
  }
  return &it->second;
}

void MemoryStore::put(std::string_view key, std::string_view value, std::optional<Clock::time_point> expires) {
  {
    std::lock_guard lock(mutex_);
    entries_.insert_or_assign(std::string(key), Entry{std::string(value), expires});
  }
  changed_.notify_all();
}

void MemoryStore::set(std::string_view key, std::string_view value) { put(key, value, std::nullopt); }

void MemoryStore::set_with_ttl(std::string_view key, std::string_view value, Duration ttl) {
  if (ttl.count() <= 0) throw InvalidArgument("set_with_ttl: ttl must be > 0 ms");
  put(key, value, Clock::now() + ttl);
}

bool MemoryStore::refresh_ttl(std::string_view key, Duration ttl) {
  if (ttl.count() <= 0) throw InvalidArgument("refresh_ttl: ttl must be > 0 ms");
  std::lock_guard lock(mutex_);
  Entry* entry = find_live(key);
  if (!entry) return false;
  entry->expires = Clock::now() + ttl;
  return true;
}

std::optional<std::string> MemoryStore::get(std::string_view key) {
  std::lock_guard lock(mutex_);
  if (Entry* entry = find_live(key)) return entry->value;
  return std::nullopt;
}

std::int64_t MemoryStore::add(std::string_view key, std::int64_t delta) {
  std::int64_t result = 0;
  {
    std::lock_guard lock(mutex_);
    Entry* entry = find_live(key);
    std::int64_t current = 0;
    if (entry) {
      const std::string& text = entry->value;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), current);
      if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
        throw InvalidArgument("add: value of key is not a 64-bit integer");
      }
    }
    if (__builtin_add_overflow(current, delta, &result)) throw InvalidArgument("add: 64-bit overflow");
    if (entry) {
      entry->value = std::to_string(result);
    } else {
      entries_.emplace(std::string(key), Entry{std::to_string(result), std::nullopt});
    }
  }
  changed_.notify_all();
  return result;
}

bool MemoryStore::compare_and_set(std::string_view key, std::optional<std::string_view> expected,
                                  std::string_view desired) {
  {
    std::lock_guard lock(mutex_);
    Entry* entry = find_live(key);
    if (!expected) {
      if (entry) return false;
      entries_.emplace(std::string(key), Entry{std::string(desired), std::nullopt});
    } else {
      if (!entry || entry->value != *expected) return false;
      entry->value = std::string(desired);
    }
  }
  changed_.notify_all();
  return true;
}

bool MemoryStore::erase(std::string_view key) {
  std::lock_guard lock(mutex_);
  if (!find_live(key)) return false;
  entries_.erase(entries_.find(key));
  return true;
}

std::vector<std::string> MemoryStore::keys(std::string_view prefix) {
  std::lock_guard lock(mutex_);
  std::vector<std::string> result;
  const auto now = Clock::now();
  for (auto it = entries_.lower_bound(prefix); it != entries_.end(); ++it) {
    if (std::string_view(it->first).substr(0, prefix.size()) != prefix) break;
    if (!it->second.expires || *it->second.expires > now) result.push_back(it->first);
  }
  return result;
}

void MemoryStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  std::unique_lock lock(mutex_);
  auto all_present = [&] {
    for (const auto& key : keys) {
      if (!find_live(key)) return false;
    }
    return true;
  };
  if (!changed_.wait_for(lock, timeout, all_present)) {
    throw TimeoutError("wait: " + std::to_string(keys.size()) + " key(s) not all present after " +
                       std::to_string(timeout.count()) + " ms");
  }
}

}  // namespace hdp::elastic
