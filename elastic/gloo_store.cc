#include "elastic/gloo_store.h"

#include "common/error.h"

namespace hdp::elastic {

GlooStore::GlooStore(std::shared_ptr<elastic::Store> store, std::chrono::milliseconds timeout,
                     std::chrono::milliseconds key_ttl)
    : store_(std::move(store)), timeout_(timeout), key_ttl_(key_ttl) {}

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  store_->set_with_ttl(key, std::string_view(data.data(), data.size()), key_ttl_);
}

std::vector<char> GlooStore::get(const std::string& key) {
  wait({key}, timeout_);
  auto value = store_->get(key);
  if (!value) throw TimeoutError("gloo bootstrap key '" + key + "' vanished before it was read");
  return {value->begin(), value->end()};
}

void GlooStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void GlooStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  store_->wait(keys, timeout);
}

}  // namespace hdp::elastic
