// File: elastic/agent_channel.h
//
// The agent's channel to its workers: how a worker learns the job's current generation without
// asking Redis. The agent (agents/worker_channel.h) listens on an abstract unix socket whose name
// it passes in HDP_AGENT_CHANNEL (elastic/worker_env.h) and writes, to every worker connected:
//
//   hdp-agent 2 <keepalive_ms>\n     once, first: the protocol and how often the agent writes
//   record <g> <n>\n<n bytes>         generation g's record (gen:<g>'s value) when the agent holds
//                                    it, once per worker and generation, before its `gen` line
//   gen <g>\n                        the newest generation the agent knows (0: none yet), at
//                                    connection, at every change, and every keepalive_ms
//
// Each `gen` line is the whole state, so a worker that missed one loses nothing; a worker that has
// no record of g (the agent held none, or it was lost) reads gen:<g> itself. A worker writes:
//
//   preparing\n                      this worker is setting itself up (device, data, model buffers)
//   ready\n                          it is set up and waits for a generation that includes it
//                                    (one of the two at every connection, then `ready` once)
//   broken <g>\n                     generation g broke under this worker (a peer lost, a timeout)
//
// `preparing` and `ready` let a joining node be admitted only once its workers are set up
// (docs/architecture.md, "A joiner prepared beside the running job": the agent records a node
// whose workers are preparing, elastic/preparing_workers.h, and the leader leaves it out until they
// are ready); a worker counts as preparing from its start until its first line, for at most
// kFirstLineGrace (a worker that never says either, not an hdp worker, then counts as ready).
// `broken` makes its agent act at once (docs/architecture.md, "A node's processes gone: seen
// through the data plane"): a leading agent ticks now, a following one asks whether the leader's
// agent is gone. The worker's report in the store (gen:<g>:broken) stays what the leader decides
// from; a line lost costs only time. Both ends include this header: the line formats and the bounds below are the
// contract; an agent of an older build logs the first two as lines it does not know and ignores
// them.
//
// The worker's side, AgentChannel, keeps one connection open on its own thread and reconnects
// when it breaks. It counts the channel lost while it is not connected, or while the agent has
// been silent for more than kSilenceKeepalives keepalives (an agent that is stopped or hung keeps
// its socket open). A worker's watch treats a lost channel as it treats a store outage: training
// goes on peer to peer, and only a loss longer than kAgentChannelLimit is fatal
// (ElasticContext throws an Error naming the channel, why and for how long it was lost).
// Lines that do not parse are counted, logged (at most every 5 s) and ignored.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

namespace hdp::elastic {

namespace agent_channel {
inline constexpr std::string_view kMagic = "hdp-agent";
inline constexpr int kVersion = 3;
// The channel counts as lost after this many keepalive intervals without a line (plus 1 s for
// scheduling), and a worker gives up on an agent it has lost for longer than kAgentChannelLimit.
inline constexpr int kSilenceKeepalives = 3;
inline constexpr std::chrono::milliseconds kAgentChannelLimit{30000};
inline constexpr std::size_t kMaxLine = 128;  // longer lines are garbage
// A worker keeps at most this many bytes of its lines waiting for an agent that does not read.
inline constexpr std::size_t kMaxUnsent = 64 * kMaxLine;
// A record larger than this is garbage (12,500 nodes take ~1.4 MB).
inline constexpr std::size_t kMaxRecordBytes = 256u << 20;
// A worker the agent started counts as preparing until it says `preparing` or `ready`, for at most
// this long: a worker that has not spoken by then is taken for one that never will (a command that
// is no hdp worker), and its node for ready.
inline constexpr std::chrono::milliseconds kFirstLineGrace{2000};

std::string hello_line(std::chrono::milliseconds keepalive);
std::string generation_line(std::int64_t generation);
std::string record_line(std::int64_t generation, std::size_t bytes);
std::string broken_line(std::int64_t generation);
std::string preparing_line();
std::string ready_line();

// One line a worker wrote. Throws InvalidArgument for a line that is none of them (quoted, cut at
// kMaxLine).
struct WorkerLine {
  enum class Kind { kPreparing, kReady, kBroken };
  Kind kind = Kind::kBroken;
  std::int64_t generation = 0;  // kBroken: the generation that broke (>= 1)
};
WorkerLine parse_worker_line(std::string_view line);

// One parsed line. Throws InvalidArgument for a line that is none of these (quoted, cut at kMaxLine).
struct Line {
  enum class Kind { kHello, kGeneration, kRecord };
  Kind kind = Kind::kGeneration;
  std::chrono::milliseconds keepalive{0};  // kHello
  std::int64_t generation = 0;             // kGeneration, kRecord
  std::size_t bytes = 0;                   // kRecord: the record's size, which follows the line
};
Line parse_line(std::string_view line);
}  // namespace agent_channel

class AgentChannel {
 public:
  using Clock = std::chrono::steady_clock;

  // `name`: the value of HDP_AGENT_CHANNEL ("@<abstract name>"). Starts connecting at once, on a
  // thread of its own; never throws for an agent that cannot be reached (that is a lost channel).
  explicit AgentChannel(std::string name);
  ~AgentChannel();
  AgentChannel(const AgentChannel&) = delete;
  AgentChannel& operator=(const AgentChannel&) = delete;

  const std::string& name() const { return name_; }
  // The newest generation the agent announced; nullopt while the channel is lost (or before the
  // agent's first line).
  std::optional<std::int64_t> generation() const;
  // How long the channel has been lost (zero while it is not), and why (empty while it is not).
  std::chrono::milliseconds lost_for() const;
  std::string lost_because() const;
  // The record of generation g the agent sent, when it sent that generation's.
  std::shared_ptr<const std::string> record(std::int64_t g) const;
  // Blocks until the announced generation differs from `known` (or the channel's state changes),
  // at most `timeout`.
  void wait_for_change(std::int64_t known, std::chrono::milliseconds timeout) const;
  // Lines that did not parse, in all.
  std::int64_t bad_lines() const { return bad_lines_; }
  // Tells the agent that generation g broke under this worker (`broken <g>`); never blocks. A line
  // the connection's buffer cannot take now is written by the channel's thread once it can (within
  // its 100 ms poll), in order; it is dropped while the channel is lost, or when
  // agent_channel::kMaxUnsent bytes wait already.
  void report_broken(std::int64_t g);
  // Tells the agent that this worker is set up and waits for a generation (`ready`), now and at
  // every later connection (before it, each connection says `preparing`). Idempotent; never blocks;
  // never dropped while connected (written later as above), and said again at a new connection.
  void report_ready();
  // The bytes of lines not written to the agent yet (a full buffer); for tests.
  std::size_t unsent() const;

 private:
  void run();
  void serve(int socket);  // reads lines until the connection breaks, goes silent, or stop_
  void lose(const std::string& why);
  void heard(std::optional<std::int64_t> generation);
  // Queues one line for the agent and writes what the connection takes now, without blocking: a
  // line not `essential` is dropped (logged at debug) when there is no connection or
  // agent_channel::kMaxUnsent bytes wait already. The caller holds mutex_.
  void send_locked(const std::string& line, bool essential = false);
  // Writes what waits, as far as the connection takes it now. The caller holds mutex_.
  void flush_locked();

  const std::string name_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  bool connected_ = false;                        // guarded by mutex_
  int socket_ = -1;                               // the connection while serve() runs; guarded by mutex_
  std::string unsent_;                            // lines (or a line's rest) not written yet; guarded by mutex_
  std::optional<std::int64_t> generation_;        // guarded by mutex_
  std::int64_t record_generation_ = 0;              // guarded by mutex_
  std::shared_ptr<const std::string> record_;     // guarded by mutex_
  bool ready_ = false;                            // report_ready() was called; guarded by mutex_
  std::chrono::milliseconds keepalive_{1000};     // guarded by mutex_
  Clock::time_point last_line_{};                 // guarded by mutex_
  Clock::time_point lost_since_ = Clock::now();   // guarded by mutex_
  std::string lost_because_ = "not connected yet";  // guarded by mutex_
  std::atomic<std::int64_t> bad_lines_{0};
  Clock::time_point bad_logged_{};
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace hdp::elastic
