// File: elastic/elastic_context.h
//
// The worker's side of the rendezvous. A worker knows who it is from its environment, set by its
// agent under the contract of elastic/worker_env.h: HDP_JOB_ID, HDP_REDIS_URL
// (+ HDP_REDIS_PASSWORD_FILE), HDP_NODE_ID, HDP_NODE_INCARNATION, HDP_LOCAL_RANK,
// HDP_NPROC_PER_NODE, HDP_ADVERTISE_ADDR, HDP_AGENT_PID.
//
// Typical loop (trainer/elastic_loop.h wraps it):
//   ElasticContext ctx = ElasticContext::from_environment();
//   for (std::int64_t seen = 0;;) {
//     Membership m = ctx.wait_for_next(seen, 60s);   // a running generation that includes me
//     seen = m.generation;
//     auto comm = mesh::connect_communicator(ctx.bootstrap(m), "main", 30s);  // mesh/comm/communicator_factory.h
//     while (!ctx.changed(m)) { ...one step...; }    // cheap check at step boundaries
//   }
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "common/error.h"
#include "elastic/agent_channel.h"
#include "elastic/bootstrap.h"
#include "elastic/membership.h"
#include "elastic/store.h"

namespace hdp::elastic {

struct WorkerIdentity {
  std::string job;
  std::string node;
  std::string incarnation;
  int local_rank = 0;
  std::string advertise_address = "127.0.0.1";
  int nproc_per_node = 1;
  int agent_pid = 0;  // the agent that started this worker; 0 when none did (tests)
  std::filesystem::path metrics_file;  // where to keep this worker's metrics for its agent; empty: none
  std::string agent_channel;  // the agent's channel (elastic/agent_channel.h); empty: none, read `gen` from the store
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
  // How long values that do not decode (`gen`, `gen:<g>`: garbage, a wrong type, a number out of
  // range) may go on being read before a worker gives up: each bad read is logged (at most every
  // 5 s), counted and retried, and a good read ends the streak. Only bad reads with no good read
  // between them for longer than this make wait_for_next() or changed() throw InvalidArgument
  // (`hdp train` exits 2). A minute lets a person or a tool repair a key it wrote by mistake.
  static constexpr std::chrono::milliseconds kBadValueLimit{60000};
  // A worker's Redis connection (from_environment) is closed after this long without a call
  // (RedisStoreOptions::idle_close).
  static constexpr std::chrono::milliseconds kIdleClose{10000};

  // `channel_limit`: how long the agent's channel may be lost before changed() and
  // wait_for_next() give up (agent_channel::kAgentChannelLimit; shorter in tests).
  ElasticContext(std::shared_ptr<Store> job_store, WorkerIdentity identity,
                 std::chrono::milliseconds bad_value_limit = kBadValueLimit,
                 std::chrono::milliseconds channel_limit = agent_channel::kAgentChannelLimit);
  // Reads the identity and the store's URL from the environment (read_worker_environment of
  // elastic/worker_env.h); InvalidArgument naming a missing or malformed variable.
  static ElasticContext from_environment();

  const WorkerIdentity& identity() const { return identity_; }
  const std::shared_ptr<Store>& store() const { return store_; }
  // Whether the generation comes from an agent's channel (no store read) rather than the store.
  bool has_agent_channel() const { return channel_ != nullptr; }

  // Blocks until a running, unbroken generation newer than `after` includes this worker; TimeoutError after
  // `timeout`. First tells the agent, when there is one, that this worker is set up (`ready`,
  // agent_channel.h): a joining node is admitted once its workers are. Store outages and values
  // that do not decode are waited out (they count against the timeout; bad values throw only
  // beyond the bad-value limit, see kBadValueLimit).
  Membership wait_for_next(std::int64_t after, std::chrono::milliseconds timeout);

  // True when a generation other than m's is current. With an agent channel (identity's
  // agent_channel) the number is the one the agent announced, with no store read; while the
  // channel is lost it answers false, and throws Error once it was lost for longer than
  // agent_channel::kAgentChannelLimit. Without a channel: at most one store read of `gen` per
  // 100 ms; while the store is unreachable or `gen` does not decode it answers false (training goes
  // on peer to peer until the store is back or the value is repaired; see kBadValueLimit).
  bool changed(const Membership& m);

  // How many reads of wait_for_next() and changed() found a value that did not decode, in all.
  std::int64_t bad_value_reads() const { return bad_reads_; }

  // The current generation number as the agent's channel announced it, or as the store has it
  // (without a channel), read now (thread-safe, unlike changed()); nullopt while the channel is
  // lost, the store is unreachable or the value does not decode (logged).
  std::optional<std::int64_t> read_generation() const;

  // True when generation `g`'s record (running, not broken) holds every worker of m's generation
  // (the same node, incarnation and slot for each, ranks possibly in another order), and perhaps
  // more: m's communicator then connects processes that are all alive and all go on into g, so
  // work in flight over it may finish and the switch wait for the step boundary (the members came
  // back as they were after a store restart; nodes joined: docs/architecture.md, "A join at the
  // step boundary"). False when the record is missing, broken or cannot be read. Thread-safe,
  // like read_generation().
  bool keeps_every_worker(const Membership& m, std::int64_t g) const;

  // Marks m's generation broken (a peer was lost): the leader publishes a new one, and no worker
  // joins a broken generation. Refused (a no-op) once a newer generation exists. `report` (this
  // worker's node and slot, whether a collective timed out on it) goes into gen:<g>:abandoned in
  // the same commit: when a generation broke on timeouts, the members that never report are the
  // hung ones, and the leader evicts them (membership.h, Evictions). Then the agent is told
  // (AgentChannel::report_broken), so that it acts without waiting for its next tick.
  void report_broken(const Membership& m, const std::string& reason, const AbandonReport& report);

  // What m's communicators bootstrap with (see Bootstrap; it keeps a pointer to this context).
  Bootstrap bootstrap(const Membership& m);

 private:
  // Throws Error when the agent's channel has been lost for longer than its limit.
  void check_channel() const;
  // Blocks until the generation may have changed from `known`, at most `timeout`: an agent's
  // announcement wakes it at once; without a channel it sleeps min(50 ms, timeout) (the store is
  // polled).
  void wait_for_generation_change(std::int64_t known, std::chrono::milliseconds timeout) const;
  std::pair<std::shared_ptr<const std::string>, bool> read_record(std::int64_t g) const;

  std::shared_ptr<Store> store_;
  WorkerIdentity identity_;
  std::shared_ptr<AgentChannel> channel_;  // null: no agent channel
  std::chrono::milliseconds channel_limit_;
  std::chrono::steady_clock::time_point last_check_{};
  std::int64_t last_seen_generation_ = 0;  // 0: not read yet (or none published)
  std::int64_t read_for_ = 0;    // the generation changed() was asked about when it last read
  std::int64_t forced_for_ = 0;  // the generation a stale number was last read again for

  // One read found a value that does not decode: log (rate-limited), count, and throw once the
  // streak of bad reads is older than bad_value_limit_.
  void bad_value(const InvalidArgument& error);
  void good_value();  // a read decoded: the streak ends
  std::chrono::milliseconds bad_value_limit_;
  std::optional<std::chrono::steady_clock::time_point> bad_since_;  // first bad read of the streak
  std::chrono::steady_clock::time_point bad_logged_{};
  std::int64_t bad_reads_ = 0, bad_reads_in_streak_ = 0;
  // read_generation() runs on another thread; its own log rate limit (ms since the epoch of the
  // steady clock), behind a pointer so that the context stays movable.
  std::unique_ptr<std::atomic<std::int64_t>> watch_logged_ms_ = 
      std::make_unique<std::atomic<std::int64_t>>(std::numeric_limits<std::int64_t>::min() / 2);
};

}  // namespace hdp::elastic
