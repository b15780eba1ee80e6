#include "elastic/prefix_store.h"

#include "common/error.h"

namespace hdp::elastic {

PrefixStore::PrefixStore(std::shared_ptr<Store> inner, std::string prefix)
    : inner_(std::move(inner)), prefix_(std::move(prefix)) {
  if (!inner_) throw InvalidArgument("PrefixStore: inner store is null");
}

std::string PrefixStore::scoped(std::string_view key) const {
  std::string result;
  result.reserve(prefix_.size() + key.size());
  result.append(prefix_).append(key);
  return result;
}

void PrefixStore::set(std::string_view key, std::string_view value) {
  unscoped_errors([&] { inner_->set(scoped(key), value); });
}

void PrefixStore::set_with_ttl(std::string_view key, std::string_view value, Duration ttl) {
  inner_->set_with_ttl(scoped(key), value, ttl);
}

Refresh PrefixStore::refresh_ttl(std::string_view key, Duration ttl, std::optional<std::string_view> new_value,
                                 const std::vector<std::string>& reads) {
  return inner_->refresh_ttl(scoped(key), ttl, new_value, scoped(reads));
}

std::optional<std::string> PrefixStore::get(std::string_view key) {
  return unscoped_errors([&] { return inner_->get(scoped(key)); });
}

std::int64_t PrefixStore::add(std::string_view key, std::int64_t delta) {
  return unscoped_errors([&] { return inner_->add(scoped(key), delta); });
}

bool PrefixStore::compare_and_set(std::string_view key, std::optional<std::string_view> expected,
                                  std::string_view desired) {
  return unscoped_errors([&] { return inner_->compare_and_set(scoped(key), expected, desired); });
}

bool PrefixStore::erase(std::string_view key) { return inner_->erase(scoped(key)); }

std::vector<std::string> PrefixStore::keys(std::string_view prefix) {
  std::vector<std::string> result = inner_->keys(scoped(prefix));
  for (auto& key : result) key.erase(0, prefix_.size());
  return result;
}

std::vector<std::string> PrefixStore::scoped(const std::vector<std::string>& keys) const {
  std::vector<std::string> result;
  result.reserve(keys.size());
  for (const auto& key : keys) result.push_back(scoped(key));
  return result;
}

void PrefixStore::wait(const std::vector<std::string>& keys, Duration timeout) { inner_->wait(scoped(keys), timeout); }

std::vector<std::optional<std::string>> PrefixStore::multi_get(const std::vector<std::string>& keys) {
  return inner_->multi_get(scoped(keys));
}

std::vector<std::optional<Store::Duration>> PrefixStore::remaining_ttl(const std::vector<std::string>& keys) {
  return inner_->remaining_ttl(scoped(keys));
}

std::map<std::string, std::string> PrefixStore::hash_get_all(std::string_view key) {
  return unscoped_errors([&] { return inner_->hash_get_all(scoped(key)); });
}

std::vector<StreamEntry> PrefixStore::stream_tail(std::string_view key, std::size_t count) {
  return unscoped_errors([&] { return inner_->stream_tail(scoped(key), count); });
}

std::vector<StreamEntry> PrefixStore::stream_read(std::string_view key, std::string_view after, std::size_t count,
                                               Duration block) {
  return unscoped_errors([&] { return inner_->stream_read(scoped(key), after, count, block); });
}

void PrefixStore::stop_stream_reads() { inner_->stop_stream_reads(); }
void PrefixStore::interrupt_stream_reads() { inner_->interrupt_stream_reads(); }

CommitResult PrefixStore::commit(const Transaction& transaction) {
  Transaction inner = transaction;
  for (auto& condition : inner.conditions) condition.key = scoped(condition.key);
  for (auto& write : inner.writes) write.key = scoped(write.key);
  for (auto& key : inner.reads) key = scoped(key);
  return unscoped_errors([&] { return inner_->commit(inner); });
}

template <typename Call>
auto PrefixStore::unscoped_errors(Call&& call) const -> decltype(call()) {
  try {
    return call();
  } catch (const WrongType& e) {
    // The message keeps the full key (it says where to look in Redis); key() is the caller's.
    if (!e.key().starts_with(prefix_)) throw;
    throw WrongType(e.key().substr(prefix_.size()), e.what());
  }
}

}  // namespace hdp::elastic
