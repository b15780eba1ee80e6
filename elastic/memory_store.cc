#include "elastic/memory_store.h"

#include <algorithm>
#include <utility>
#include <charconv>

#include "common/error.h"
#include "common/text.h"

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

MemoryStore::Entry* MemoryStore::find_kind(std::string_view key, Entry::Kind kind) {
  Entry* entry = find_live(key);
  if (entry && entry->kind != kind) {
    static constexpr const char* kNames[] = {"string", "hash", "stream"};
    throw WrongType(std::string(key), "key " + quote_value(key) + " holds a " +
                                          kNames[static_cast<int>(entry->kind)] + ", not a " +
                                          kNames[static_cast<int>(kind)]);
  }
  return entry;
}

MemoryStore::Entry& MemoryStore::obtain(std::string_view key, Entry::Kind kind) {
  if (Entry* entry = find_kind(key, kind)) return *entry;
  Entry& created = entries_[std::string(key)];
  created = Entry{};
  created.kind = kind;
  return created;
}

void MemoryStore::put(std::string_view key, std::string_view value, std::optional<Clock::time_point> expires) {
  {
    std::lock_guard lock(mutex_);
    entries_.insert_or_assign(std::string(key), Entry{.value = std::string(value), .expires = expires});
  }
  changed_.notify_all();
}

void MemoryStore::set(std::string_view key, std::string_view value) { put(key, value, std::nullopt); }

void MemoryStore::set_with_ttl(std::string_view key, std::string_view value, Duration ttl) {
  if (ttl.count() <= 0) throw InvalidArgument("set_with_ttl: ttl must be > 0 ms");
  put(key, value, Clock::now() + ttl);
}

Refresh MemoryStore::refresh_ttl(std::string_view key, Duration ttl, std::optional<std::string_view> new_value,
                                 const std::vector<std::string>& reads) {
  if (ttl.count() <= 0) throw InvalidArgument("refresh_ttl: ttl must be > 0 ms");
  std::lock_guard lock(mutex_);
  Refresh result;
  if (Entry* entry = find_live(key)) {
    if (new_value) *entry = Entry{.value = std::string(*new_value)};
    entry->expires = Clock::now() + ttl;
    result.alive = true;
  }
  for (const auto& read : reads) {
    // Like multi_get (and Redis's MGET): a key of another kind reads as missing.
    Entry* entry = find_live(read);
    result.values.push_back(entry && entry->kind == Entry::Kind::kString ? std::optional(entry->value) : std::nullopt);
  }
  return result;
}

std::optional<std::string> MemoryStore::get(std::string_view key) {
  std::lock_guard lock(mutex_);
  if (Entry* entry = find_kind(key, Entry::Kind::kString)) return entry->value;
  return std::nullopt;
}

std::int64_t MemoryStore::add(std::string_view key, std::int64_t delta) {
  std::int64_t result = 0;
  {
    std::lock_guard lock(mutex_);
    Entry* entry = find_kind(key, Entry::Kind::kString);
    std::int64_t current = 0;
    if (entry) {
      const std::string& text = entry->value;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), current);
      if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
        throw InvalidArgument("add: the value of key " + quote_value(key) + " is not a 64-bit integer");
      }
    }
    if (__builtin_add_overflow(current, delta, &result)) {
      throw InvalidArgument("add: adding " + std::to_string(delta) + " to key " + quote_value(key) + " overflows 64 bits");
    }
    if (entry) {
      entry->value = std::to_string(result);
    } else {
      entries_.emplace(std::string(key), Entry{.value = std::to_string(result)});
    }
  }
  changed_.notify_all();
  return result;
}

bool MemoryStore::compare_and_set(std::string_view key, std::optional<std::string_view> expected,
                                  std::string_view desired) {
  {
    std::lock_guard lock(mutex_);
    Entry* entry = find_kind(key, Entry::Kind::kString);
    if (!expected) {
      if (entry) return false;
      entries_.emplace(std::string(key), Entry{.value = std::string(desired)});
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

void MemoryStore::clear() {
  std::lock_guard lock(mutex_);
  entries_.clear();
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

std::vector<std::optional<Store::Duration>> MemoryStore::remaining_ttl(const std::vector<std::string>& keys) {
  std::lock_guard lock(mutex_);
  const auto now = Clock::now();
  std::vector<std::optional<Duration>> ttls;
  ttls.reserve(keys.size());
  for (const auto& key : keys) {
    Entry* entry = find_live(key);
    if (!entry || !entry->expires) {
      ttls.push_back(std::nullopt);
    } else {
      // Like Redis' PTTL: whole milliseconds, at least 1 while the key lives.
      ttls.push_back(std::max(Duration(1), std::chrono::ceil<Duration>(*entry->expires - now)));
    }
  }
  return ttls;
}

std::vector<std::optional<std::string>> MemoryStore::multi_get(const std::vector<std::string>& keys) {
  std::lock_guard lock(mutex_);
  std::vector<std::optional<std::string>> values;
  values.reserve(keys.size());
  for (const auto& key : keys) {
    // Like Redis MGET: a key of another kind reads as missing.
    Entry* entry = find_live(key);
    values.push_back(entry && entry->kind == Entry::Kind::kString ? std::optional(entry->value) : std::nullopt);
  }
  return values;
}

std::map<std::string, std::string> MemoryStore::hash_get_all(std::string_view key) {
  std::lock_guard lock(mutex_);
  Entry* entry = find_kind(key, Entry::Kind::kHash);
  return entry ? entry->hash : std::map<std::string, std::string>{};
}

std::vector<StreamEntry> MemoryStore::stream_tail(std::string_view key, std::size_t count) {
  std::lock_guard lock(mutex_);
  Entry* entry = find_kind(key, Entry::Kind::kStream);
  if (!entry) return {};
  const std::size_t skip = entry->stream.size() > count ? entry->stream.size() - count : 0;
  return {entry->stream.begin() + static_cast<std::ptrdiff_t>(skip), entry->stream.end()};
}

namespace {

// A stream id "<ms>-<seq>" (or "<ms>", or "0") as a pair that orders like Redis's ids.
std::pair<std::uint64_t, std::uint64_t> parse_stream_id(std::string_view id) {
  auto number = [&](std::string_view text) {
    std::uint64_t value = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || error != std::errc() || end != text.data() + text.size()) {
      throw InvalidArgument("stream_read: " + quote_value(id) + " is not a stream id (<ms>-<seq>)");
    }
    return value;
  };
  const auto dash = id.find('-');
  if (dash == std::string_view::npos) return {number(id), 0};
  return {number(id.substr(0, dash)), number(id.substr(dash + 1))};
}

}  // namespace

std::vector<StreamEntry> MemoryStore::stream_read(std::string_view key, std::string_view after, std::size_t count,
                                                  Duration block) {
  if (count == 0) throw InvalidArgument("stream_read: count must be >= 1");
  const auto from = parse_stream_id(after);
  const auto deadline = Clock::now() + block;
  std::unique_lock lock(mutex_);
  if (std::exchange(stream_interrupt_pending_, false)) return {};
  const std::int64_t interrupts = stream_interrupts_;
  ++stream_readers_;
  struct Leave {
    int& readers;
    ~Leave() { --readers; }
  } leave{stream_readers_};
  for (;;) {
    if (stream_reads_stopped_ || stream_interrupts_ != interrupts) return {};
    std::vector<StreamEntry> found;
    if (Entry* entry = find_kind(key, Entry::Kind::kStream)) {
      for (const StreamEntry& e : entry->stream) {
        if (parse_stream_id(e.id) <= from) continue;
        found.push_back(e);
        if (found.size() == count) break;
      }
    }
    if (!found.empty() || Clock::now() >= deadline) return found;
    changed_.wait_until(lock, deadline);
  }
}

void MemoryStore::stop_stream_reads() {
  {
    std::lock_guard lock(mutex_);
    stream_reads_stopped_ = true;
  }
  changed_.notify_all();
}

void MemoryStore::interrupt_stream_reads() {
  {
    std::lock_guard lock(mutex_);
    ++stream_interrupts_;
    if (stream_readers_ == 0) stream_interrupt_pending_ = true;
  }
  changed_.notify_all();
}

void MemoryStore::apply(const Write& write) {
  switch (write.op) {
    case Write::Op::kSet: {
      std::optional<Clock::time_point> expires;
      if (write.ttl.count() > 0) expires = Clock::now() + write.ttl;
      entries_.insert_or_assign(write.key, Entry{.value = write.value, .expires = expires});
      break;
    }
    case Write::Op::kErase:
      if (find_live(write.key)) entries_.erase(entries_.find(write.key));
      break;
    case Write::Op::kExpire:
      if (Entry* entry = find_live(write.key)) entry->expires = Clock::now() + write.ttl;
      break;
    case Write::Op::kHashSet: {
      Entry& entry = obtain(write.key, Entry::Kind::kHash);
      for (const auto& [field, value] : write.fields) entry.hash[field] = value;
      break;
    }
    case Write::Op::kStreamAppend: {
      Entry& entry = obtain(write.key, Entry::Kind::kStream);
      const auto now_ms = static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
              .count());
      // Ids increase strictly, even when the wall clock stands still or steps back (as Redis does).
      if (now_ms > last_stream_ms_) {
        last_stream_ms_ = now_ms;
        stream_sequence_ = 0;
      } else {
        ++stream_sequence_;
      }
      entry.stream.push_back({std::to_string(last_stream_ms_) + "-" + std::to_string(stream_sequence_), write.fields});
      while (entry.stream.size() > write.max_length) entry.stream.pop_front();
      break;
    }
  }
}

CommitResult MemoryStore::commit(const Transaction& transaction) {
  transaction.validate();
  CommitResult result;
  {
    std::lock_guard lock(mutex_);
    auto read_all = [&] {
      for (const auto& key : transaction.reads) {
        // Like multi_get: a key of another kind reads as missing.
        Entry* entry = find_live(key);
        result.values.push_back(entry && entry->kind == Entry::Kind::kString ? std::optional(entry->value)
                                                                             : std::nullopt);
      }
      return result;
    };
    for (const auto& condition : transaction.conditions) {
      Entry* entry = find_kind(condition.key, Entry::Kind::kString);
      if (condition.value ? (!entry || entry->value != *condition.value) : entry != nullptr) return read_all();
    }
    // Kinds are checked before anything is written, so a failing write cannot leave half a commit.
    for (const auto& write : transaction.writes) {
      if (write.op == Write::Op::kHashSet) find_kind(write.key, Entry::Kind::kHash);
      if (write.op == Write::Op::kStreamAppend) find_kind(write.key, Entry::Kind::kStream);
    }
    for (const auto& write : transaction.writes) apply(write);
    result.applied = true;
    read_all();
  }
  changed_.notify_all();
  return result;
}

}  // namespace hdp::elastic
