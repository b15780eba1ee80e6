// File: mesh/comm/gloo_store.h
//
// Gloo's rendezvous::Store over hdp's Store, so that a communicator bootstraps through the same
// connection (AUTH/ACL, unix sockets, reconnect with backoff, binary-safe keys) as everything
// else. Gloo's own RedisStore cannot log in and polls with fixed 10 ms sleeps; this adapter keeps
// Gloo's write-once key semantics and puts a TTL on every key it writes, so a generation's
// bootstrap keys clean themselves up.
//
// One adapter serves one bootstrap: its deadline is fixed at construction (now + timeout) and
// every get/wait ends there with TimeoutError, whatever timeout Gloo passes, so a whole
// connectFullMesh waits at most `timeout` for the store (GlooCommunicator sets Gloo's own context
// timeout lower, for its pair connects; see bootstrap.cc).
//
// A bootstrap whose generation is superseded (a member died before connecting, and the leader has
// published the next generation) can never complete: while it waits, the adapter asks
// `superseded` about every 250 ms and gives up with PeerLost at once, instead of sitting out the
// whole timeout.
//
// An internal header of mesh/comm, as bootstrap.h and peer_monitor.h are: only mesh/comm/bootstrap.cc
// includes it, and no header outside mesh/comm names a Gloo type.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <functional>
#include <memory>

#include "elastic/store.h"

namespace hdp::mesh {

class GlooStore final : public gloo::rendezvous::Store {
 public:
  // `superseded` may be empty (never superseded); it may block on the store.
  GlooStore(std::shared_ptr<elastic::Store> store, std::chrono::milliseconds timeout,
            std::function<bool()> superseded = {}, std::chrono::milliseconds key_ttl = std::chrono::hours(1));

  void set(const std::string& key, const std::vector<char>& data) override;
  // Waits (until the deadline) for the key, as Gloo expects, then reads it.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  // Throws TimeoutError at the adapter's deadline (Gloo's `timeout` is ignored), PeerLost once
  // `superseded` says so.
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  using Clock = std::chrono::steady_clock;

  std::shared_ptr<elastic::Store> store_;
  std::chrono::milliseconds timeout_;
  Clock::time_point deadline_;
  std::function<bool()> superseded_;
  std::chrono::milliseconds key_ttl_;
};

}  // namespace hdp::mesh
