#include "mesh/comm/gloo_store.h"

#include <algorithm>

#include "common/error.h"

namespace hdp::mesh {

GlooStore::GlooStore(std::shared_ptr<elastic::Store> store, std::chrono::milliseconds timeout,
                     std::function<bool()> superseded, std::chrono::milliseconds key_ttl)
    : store_(std::move(store)),
      timeout_(timeout),
      deadline_(Clock::now() + timeout),
      superseded_(std::move(superseded)),
      key_ttl_(key_ttl) {}

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  store_->set_with_ttl(key, std::string_view(data.data(), data.size()), key_ttl_);
}

std::vector<char> GlooStore::get(const std::string& key) {
  wait({key});
  auto value = store_->get(key);
  if (!value) throw TimeoutError("gloo bootstrap key '" + key + "' vanished before it was read");
  return {value->begin(), value->end()};
}

void GlooStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void GlooStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) {
  constexpr std::chrono::milliseconds kCheckEvery{250};
  for (;;) {
    const auto remaining = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
    try {
      store_->wait(keys, std::clamp(remaining, std::chrono::milliseconds(1),
                                    superseded_ ? kCheckEvery : std::max(remaining, std::chrono::milliseconds(1))));
      return;
    } catch (const TimeoutError&) {
      if (superseded_ && superseded_()) {
        throw PeerLost("the bootstrap's generation was superseded before every peer connected");
      }
      if (Clock::now() >= deadline_) {
        throw TimeoutError("wait: " + std::to_string(keys.size()) + " bootstrap key(s) not all present after " +
                           std::to_string(timeout_.count()) + " ms");
      }
    }
  }
}

}  // namespace hdp::mesh
