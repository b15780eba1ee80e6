// File: elastic/gloo_store.h
//
// Gloo's rendezvous::Store over hdp's Store, so that a generation's Gloo context bootstraps
// through the same connection (AUTH/ACL, unix sockets, reconnect with backoff, binary-safe keys)
// as everything else. Gloo's own RedisStore cannot log in and polls with fixed 10 ms sleeps;
// this adapter keeps Gloo's write-once key semantics and puts a TTL on every key it writes, so a
// generation's bootstrap keys clean themselves up.
#pragma once

#include <gloo/rendezvous/store.h>

#include <memory>

#include "elastic/store.h"

namespace hdp::elastic {

class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(std::shared_ptr<elastic::Store> store, std::chrono::milliseconds timeout,
            std::chrono::milliseconds key_ttl = std::chrono::hours(1));

  void set(const std::string& key, const std::vector<char>& data) override;
  // Waits (up to the timeout) for the key, as Gloo expects, then reads it.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<elastic::Store> store_;
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds key_ttl_;
};

}  // namespace hdp::elastic
