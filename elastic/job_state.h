// File: elastic/job_state.h
//
// The job's state as people and tools see it: the `state` hash, the capped `events` stream, and a
// validated snapshot of everything `hdp status` shows. Writers that act for a generation go
// through fenced_update(), which is refused once a newer generation exists.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "elastic/control.h"
#include "elastic/goodput.h"
#include "elastic/membership.h"
#include "elastic/store.h"

namespace hdp::elastic {

inline constexpr std::size_t kEventsKept = 1000;
// The per-step history of the training curves (`samples`): about 2,000 × 200 bytes in Redis.
inline constexpr std::size_t kSamplesKept = 2000;
// The fields of a sample: all finite numbers (validated on read).
inline constexpr const char* kSampleFields[] = {"step",       "loss",       "tokens_per_s", "step_ms", "lr",
                                                "grad_norm",  "world_size", "generation",   "time_ms", "eval_loss"};

// The statuses of the state hash's `status` field.
inline constexpr const char* kStatuses[] = {"waiting",  "running",   "resizing", "restoring",
                                            "draining", "completed", "failed",   "stopped"};

// Fields of the state hash that hold numbers (validate_state_field checks them; `hdp status --json`
// prints them as JSON numbers): integers >= 0, and finite decimal numbers.
// The goodput fields (elastic/goodput.h) are among them.
inline constexpr const char* kIntegerStateFields[] = {"generation",          "world_size",           "step",
                                                      "last_ckpt_step",      "updated_at_ms",        "nodes",
                                                      "tokens",              "eval_step",            goodput::kStartedAtMs,
                                                      goodput::kFurthestStep, goodput::kRecomputedSteps,
                                                      goodput::kIdleMs};
inline constexpr const char* kNumberStateFields[] = {"loss",      "tokens_per_s",          "step_ms",
                                                     "lr",        "grad_norm",             "eval_loss",
                                                     goodput::kProductiveMs, goodput::kRecomputedMs, goodput::kEttr};
// Fields that hold comma-separated lists of finite numbers (printed as JSON arrays).
inline constexpr const char* kNumberListStateFields[] = {"speeds"};

// The numbers of a kNumberListStateFields value; InvalidArgument naming the field otherwise.
std::vector<double> parse_number_list(const std::string& field, const std::string& value);

std::int64_t now_ms();  // wall clock, milliseconds since the epoch

// A write that appends one event {type, time_ms, ...details} to the capped stream.
Write event_write(const std::string& type, Fields details);
// A write that appends one training step's sample (kSampleFields) to the capped `samples` stream.
Write sample_write(Fields fields);

// store.commit(txn) for a transaction that writes the `state` hash or appends to `events`,
// `samples` or `generations`. No hdp process decides anything from those keys alone (they are for
// people and tools, and `generations` only wakes agents that then read `gen`), so one that holds a
// value of another type (a string written by hand) must not stop a registration, a publication or
// a worker's report: it is erased (logged, naming the key) and the commit tried once more.
CommitResult commit_with_job_state(Store& store, const Transaction& txn);

// Whether the job's `outcome` key says completed. A store that cannot be read (or a value of
// another type) answers false, logged at debug level: callers poll it, and each decides what an
// unknown outcome means (hdp run: not completed; an agent: drained; a waiting worker: wait on).
bool job_completed(Store& job_store);
// Erases `outcome` when it says "stopped" (never "completed"): an agent starting for a job that
// was stopped resumes it. In the same commit the time the job stood stopped is added to the state's
// `idle_ms` (elastic/goodput.h: not wall time for its ETTR), when the state shows the stop. Returns
// whether it erased it.
bool clear_stopped_outcome(Store& job_store);

struct JobSnapshot {
  std::int64_t generation = 0;              // 0: none published yet
  std::optional<Generation> members;        // the record of `generation`
  std::map<std::string, std::string> state; // the state hash, every field validated
  std::optional<std::string> leader;
  std::map<std::string, NodeLease> leases;  // live leases of the members, by node
  // By node: how long ago each live lease was last renewed (its TTL less the time it has left),
  // where the lease records its TTL.
  std::map<std::string, std::chrono::milliseconds> lease_ages;
  Evictions evictions;                      // every node/slot evicted so far (membership.h)
  ControlRequests requests;                 // pending requests (control.h)
  Cordons cordons;                          // cordoned nodes (control.h)
  LiveSettings settings;                    // set with `hdp config set` (control.h)
  std::vector<StreamEntry> events;          // newest last
  std::vector<StreamEntry> samples;         // oldest first; every field validated
  std::optional<std::string> store_primary; // `store_primary`: "host:port" as the agents last saw it
  std::int64_t store_failovers = 0;         // `store_failovers` (0 when absent)
};

// Keeps the job's `store_primary` and `store_failovers` (job_keys.h) current for one agent, which
// calls record() after each heartbeat with its RedisStore's primary() and reconnects(). Nothing is
// sent while neither changed since this record last wrote or confirmed the key (a heartbeat costs
// no extra command); after a change, one GET, and when the key names another node (or none), a
// compare_and_set from the value read to `primary`. Only the agent whose compare_and_set replaced
// a recorded value (not the first record) adds 1 to `store_failovers`: every agent sees a
// failover, the first to record it counts it, the others find the key equal. A compare_and_set
// that lost a race is looked at again at the next call (one GET).
//
// With `count_moves` false (a plain redis:// endpoint: one server, which agents may spell
// differently, "localhost:6379" and "127.0.0.1:6379") the key is written only when absent (the
// first record, or again after the store lost its data) and nothing is counted.
//
// Store errors propagate; the record is then unchanged, so the caller's next call retries the
// step. A compare_and_set or add that broke after it was sent (StoreUnavailable: it may have
// applied) can leave one failover uncounted; the primary is right after the next call.
// Not thread-safe.
class StorePrimaryRecord {
 public:
  StorePrimaryRecord(Store& job_store, bool count_moves) : store_(job_store), count_moves_(count_moves) {}

  // `primary`: RedisStore::primary() ("" before a connection: nothing is done); `connection`: a
  // number that changes whenever the store's connection was opened again (RedisStore::reconnects()),
  // so that a key lost with the store's data is written again after the reconnection.
  void record(const std::string& primary, int connection = 0);
  // The primary this record last wrote or found recorded ("" before the first).
  const std::string& confirmed() const { return confirmed_; }

 private:
  Store& store_;
  const bool count_moves_;
  std::string confirmed_;
  int confirmed_connection_ = 0;
};

class JobState {
 public:
  explicit JobState(std::shared_ptr<Store> job_store) : store_(std::move(job_store)) {}

  // Appends an event; no fencing (agents report joins and leaves whatever the generation).
  void event(const std::string& type, Fields details);
  // Sets state fields (updated_at_ms added) and applies `writes` (an event, a sample) in the same
  // commit, only while `generation` is current. Returns false when a newer generation exists (the
  // write is stale).
  bool fenced_update(std::int64_t generation, Fields fields, std::vector<Write> writes = {});
  // The same, also reading `reads` in the same round trip (their values whether or not it applied).
  CommitResult fenced_update_and_read(std::int64_t generation, Fields fields, std::vector<Write> writes,
                                      std::vector<std::string> reads);

  // Marks the job completed at `step` (state, `outcome` key, event), only while `generation` is
  // current. Once `outcome` exists the leader publishes no further generation, so nothing can
  // overwrite the terminal status.
  bool complete(std::int64_t generation, std::int64_t step);
  // Marks the job stopped at `step` (state and `outcome` = "stopped"), only while `generation` is
  // current: like completion, it ends publishing, so agents leaving after a stop cannot publish a
  // generation that says `running` with no worker left. A job resumed later (its agents started
  // again) clears it first (clear_stopped_outcome).
  bool stop(std::int64_t generation, std::int64_t step);

  // Reads and validates everything; throws InvalidArgument naming the first bad key or field.
  JobSnapshot snapshot(std::size_t event_count, std::size_t sample_count = 0);
  // True when the job has never been seen in this store (no generation, no state, no config).
  bool exists();

  Store& store() const { return *store_; }

 private:
  std::shared_ptr<Store> store_;
};

// Validates one field of the state hash (name and value UTF-8, kIntegerStateFields non-negative
// 64-bit integers, kNumberStateFields finite numbers, kNumberListStateFields lists of them, status one of kStatuses); throws InvalidArgument naming the key and the field.
void validate_state_field(const std::string& field, const std::string& value);
// Validates one entry of the events stream (every field name and value UTF-8); throws
// InvalidArgument naming the key, the entry and the field.
void validate_event(const StreamEntry& entry);
// Validates one entry of the samples stream (kSampleFields only, each a finite number).
void validate_sample(const StreamEntry& entry);

}  // namespace hdp::elastic
