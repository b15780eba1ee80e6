// File: bench/sim_agents.h
//
// Simulated `hdp agent`s for bench/rendezvous: each with its own Redis connection (as a real agent
// has exactly one), all driven by one epoll thread, doing on the wire what a follower agent does
// against the store (agents/agent.cc, elastic/membership_agent.h, elastic/generation_watch.h):
//   - every heartbeat period, one round trip: PEXPIRE of its lease pipelined with MGET leader gen control
//     refusal:<id>/<incarnation>;
//   - between heartbeats, XREAD BLOCK on the job's `generations` stream from the last entry seen,
//     until shortly before the next heartbeat (min(100 ms, period/10) before), read again at once
//     after an entry arrives;
//   - a generation learned either way is recorded with the time it was learned; then the agent
//     knows its record: from the stream entry's delta when it holds the record the delta is over
//     (GenerationRecords::apply, no command); when it learned g from the heartbeat, from the
//     stream's tail (XREVRANGE, elastic::catch_up); else by reading it (GET gen:<g>), as
//     MembershipAgent::check_membership does. The time it knew the record is recorded too.
// Commands are formatted and replies parsed by hiredis (redisFormatCommandArgv, redisReader).
// The workers are not simulated here: a real agent relays the generation to its workers over a
// unix socket, which costs Redis nothing (tests/agents/notification_test.cc checks that workers
// leave Redis alone).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <vector>

struct redisReply;  // hiredis

namespace hdp::bench {

struct SimAgentsOptions {
  int port = 0;                    // redis-server on 127.0.0.1
  std::string prefix;              // the job's namespace, "hdp:<job>:"
  std::chrono::milliseconds lease{5000};
  std::chrono::milliseconds heartbeat{1666};
  bool read_records = true;  // read gen:<g> after learning g, as the agent does
  // false: the first record an agent learns of is given to it, not read (bench/rendezvous
  // --first-record-given: at 12,500 nodes its distribution through this one bench process takes
  // longer than the phases after it are about; docs/performance.md).
  bool read_first_record = true;
};

class SimulatedAgents {
 public:
  using Clock = std::chrono::steady_clock;

  // Opens one connection per lease key (the agents' leases, already registered). Throws
  // std::runtime_error when a connection cannot be opened.
  SimulatedAgents(SimAgentsOptions options, std::vector<std::string> lease_keys);
  ~SimulatedAgents();
  SimulatedAgents(const SimulatedAgents&) = delete;
  SimulatedAgents& operator=(const SimulatedAgents&) = delete;

  // Agent i dies: its connection is closed, it heartbeats no more. Returns when its lease was last
  // refreshed (the time its PEXPIRE's reply arrived).
  Clock::time_point kill(int i);

  // Generation g: how many live agents know it (or a newer one), the time the last of them learned
  // it, and how many learned it from the stream (the others from a heartbeat's read of `gen`).
  struct Known {
    int agents = 0;
    int by_stream = 0;
    Clock::time_point last{};
    int records_read = 0;            // agents whose GET gen:<g> was answered
    int records_derived = 0;         // agents that derived it from the stream's deltas
    int records_given = 0;           // agents given it (read_first_record false)
    Clock::time_point last_record{};  // when the last of them (read or derived) knew it
    std::size_t record_bytes = 0;    // the record's size, as read
  };
  Known known(std::int64_t g) const;
  int live() const { return live_; }

 private:
  struct Agent;
  void run();
  void on_readable(Agent& agent);
  void on_reply(Agent& agent, ::redisReply* reply, Clock::time_point now);
  void heartbeat(Agent& agent, Clock::time_point now);
  void watch(Agent& agent, Clock::time_point now);
  void send(Agent& agent, const std::vector<std::vector<std::string>>& commands);
  void learned(Agent& agent, std::int64_t g, bool by_stream, Clock::time_point now, std::int64_t delta_base = 0);
  // After a reply was handled: reads the record of a generation just learned, else goes on
  // (a heartbeat when it is due, else the stream).
  void next(Agent& agent, Clock::time_point now);

  SimAgentsOptions options_;
  int epoll_ = -1;
  std::vector<std::unique_ptr<Agent>> agents_;
  using Due = std::pair<Clock::time_point, int>;  // an agent's heartbeat time (the loop thread's)
  std::priority_queue<Due, std::vector<Due>, std::greater<>> due_;
  mutable std::mutex mutex_;                  // guards learned_ and the kill requests
  std::map<std::int64_t, Known> learned_;     // by generation
  std::vector<int> kill_requests_;
  std::map<int, Clock::time_point> killed_;   // agent -> last refresh, answered to kill()
  std::atomic<bool> stop_{false};
  std::atomic<int> live_{0};
  std::thread thread_;
};

}  // namespace hdp::bench
