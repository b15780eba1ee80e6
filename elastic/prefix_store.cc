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

void PrefixStore::set(std::string_view key, std::string_view value) { inner_->set(scoped(key), value); }

void PrefixStore::set_with_ttl(std::string_view key, std::string_view value, Duration ttl) {
  inner_->set_with_ttl(scoped(key), value, ttl);
}

bool PrefixStore::refresh_ttl(std::string_view key, Duration ttl) { return inner_->refresh_ttl(scoped(key), ttl); }

std::optional<std::string> PrefixStore::get(std::string_view key) { return inner_->get(scoped(key)); }

std::int64_t PrefixStore::add(std::string_view key, std::int64_t delta) { return inner_->add(scoped(key), delta); }

bool PrefixStore::compare_and_set(std::string_view key, std::optional<std::string_view> expected,
                                  std::string_view desired) {
  return inner_->compare_and_set(scoped(key), expected, desired);
}

bool PrefixStore::erase(std::string_view key) { return inner_->erase(scoped(key)); }

std::vector<std::string> PrefixStore::keys(std::string_view prefix) {
  std::vector<std::string> result = inner_->keys(scoped(prefix));
  for (auto& key : result) key.erase(0, prefix_.size());
  return result;
}

void PrefixStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  std::vector<std::string> scoped_keys;
  scoped_keys.reserve(keys.size());
  for (const auto& key : keys) scoped_keys.push_back(scoped(key));
  inner_->wait(scoped_keys, timeout);
}

}  // namespace hdp::elastic
