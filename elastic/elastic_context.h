// File: elastic/elastic_context.h
//
// The worker's side of the rendezvous. A worker knows who it is from its environment (set by its
// agent): HDP_JOB_ID, HDP_REDIS_URL (+ HDP_REDIS_PASSWORD_FILE), HDP_NODE_ID,
// HDP_NODE_INCARNATION, HDP_LOCAL_RANK, HDP_NPROC_PER_NODE, HDP_ADVERTISE_ADDR.
//
// Typical loop (trainer/elastic_loop.h wraps it):
//   ElasticContext ctx = ElasticContext::from_environment();
//   for (std::int64_t seen = 0;;) {
//     Membership m = ctx.wait_for_next(seen, 60s);   // a running generation that includes me
//     seen = m.generation;
//     auto gloo = ctx.connect(m, 30s);               // one communicator per generation
//     while (!ctx.changed(m)) { ...one step...; }    // cheap check at step boundaries
//   }
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "elastic/membership.h"
#include "elastic/store.h"

namespace gloo::rendezvous {
class Context;
}

namespace hdp::elastic {

struct WorkerIdentity {
  std::string job;
  std::string node;
  std::string incarnation;
  int local_rank = 0;
  std::string advertise_address = "127.0.0.1";
};

// This worker's place in one generation.
struct Membership {
  std::int64_t generation = 0;
  int rank = 0;
  int world_size = 0;
  Generation record;
};

class ElasticContext {
 public:
  ElasticContext(std::shared_ptr<Store> job_store, WorkerIdentity identity);
  // Reads the identity and the store's URL from the environment; InvalidArgument naming a
  // missing or malformed variable.
  static ElasticContext from_environment();

  const WorkerIdentity& identity() const { return identity_; }
  const std::shared_ptr<Store>& store() const { return store_; }

  // Blocks until a running, unbroken generation newer than `after` includes this worker; TimeoutError after
  // `timeout`. Store outages are waited out (they count against the timeout).
  Membership wait_for_next(std::int64_t after, std::chrono::milliseconds timeout);

  // True when a generation other than m's is current. At most one store read per 100 ms; while the
  // store is unreachable it answers false (training goes on peer to peer until the store is back).
  bool changed(const Membership& m);

  // Marks m's generation broken (a peer was lost): the leader publishes a new one, and no worker
  // joins a broken generation. Refused (a no-op) once a newer generation exists.
  void report_broken(const Membership& m, const std::string& reason);

  // The generation's Gloo context over TCP, bootstrapped under gen:<g>:boot: with `timeout` for
  // the rendezvous and for every collective. Throws PeerLost as soon as a newer generation is
  // published while the bootstrap still waits for a peer (that peer is gone), TimeoutError after
  // `timeout`.
  std::shared_ptr<gloo::rendezvous::Context> connect(const Membership& m, std::chrono::milliseconds timeout);

 private:
  std::shared_ptr<Store> store_;
  WorkerIdentity identity_;
  std::chrono::steady_clock::time_point last_check_{};
  std::int64_t last_seen_generation_ = 0;  // 0: not read yet (or none published)
};

}  // namespace hdp::elastic
