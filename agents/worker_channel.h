// File: agents/worker_channel.h
//
// The agent's end of its channel to its workers (the protocol is elastic/agent_channel.h): an
// abstract unix socket, named after the agent's pid and a random suffix, on the agent's Asio
// thread. Every worker that connects gets the hello line and the newest generation at once, then
// each change (publish()) and, every keepalive interval, the newest generation again, so that a
// worker tells a stopped agent from a quiet job. With the generation goes its record, once per
// worker, when the agent holds it. Writes never block the agent: a worker that does not read
// (stopped) has at most one message in flight, and gets the newest state when it reads again (the
// message is composed when its write starts); a worker that closes its end is forgotten. What a
// worker writes: `broken <g>` goes to `on_broken`; `preparing` and `ready` say where the worker
// stands. The node's workers are preparing while a connected worker said `preparing` and not yet
// `ready`, or a worker the agent started (expect_worker()) has not said either yet, for at most
// agent_channel::kFirstLineGrace; `on_preparing` hears when that changes (never from inside a call
// of the caller's: posted to `io`); a worker that closes its end while preparing is no longer
// counted. Other lines are logged (at most every 5 s) and dropped. It may be destroyed while `io`
// still runs.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>

#include "elastic/generation_records.h"

namespace hdp::agents {

class WorkerChannel {
 public:
  // Called on `io`'s thread with the generation a worker said broke (`broken <g>`).
  using OnBroken = std::function<void(std::int64_t generation)>;
  // Called on `io`'s thread when whether the node's workers are preparing changes (below).
  using OnPreparing = std::function<void(bool preparing)>;
  // Binds the socket and starts accepting on `io`. Throws hdp::Error when it cannot be bound.
  WorkerChannel(boost::asio::io_context& io, std::chrono::milliseconds keepalive, OnBroken on_broken = {},
                OnPreparing on_preparing = {});
  ~WorkerChannel();
  WorkerChannel(const WorkerChannel&) = delete;
  WorkerChannel& operator=(const WorkerChannel&) = delete;

  // The value of HDP_AGENT_CHANNEL: "@<abstract name>".
  const std::string& name() const { return name_; }
  // Tells every worker the newest generation, and its record when `record` is that generation's (a
  // no-op unless the generation is newer than the last one told, or its record is new).
  void publish(std::int64_t generation, std::shared_ptr<const elastic::HeldRecord> record = nullptr);
  std::int64_t generation() const { return generation_; }
  std::size_t workers() const { return peers_.size(); }
  // Whether the node's workers are preparing (above).
  bool preparing() const { return preparing_ > 0 || !awaiting_.empty(); }
  // Connected workers that said `preparing` and not yet `ready`.
  int preparing_workers() const { return preparing_; }
  // A worker was just started (not a standby): it counts as preparing until its first line, at
  // most agent_channel::kFirstLineGrace. Its first line is taken as any new worker's (the lines do
  // not name a slot): the earliest expectation ends first.
  void expect_worker();
  // Closes the socket and every worker's connection.
  void close();

 private:
  struct Peer;
  void accept();
  void read_input(const std::shared_ptr<Peer>& peer);
  void take_lines(Peer& peer);
  void send(const std::shared_ptr<Peer>& peer);
  std::string message_for(Peer& peer) const;
  void send_all();
  void keep_alive();
  // The peer said `preparing` (true) or `ready`, or it left (false): counts it (a peer already
  // forgotten counts no more), ends an expectation at its first line, and tells on_preparing_ of a
  // change.
  void set_preparing(Peer& peer, bool preparing);
  void forget(const std::shared_ptr<Peer>& peer);
  // Drops the expectations whose grace ran out, re-arms their timer, and calls on_preparing_ when
  // preparing() differs from what it was last told.
  void review_preparing();

  boost::asio::io_context& io_;
  std::chrono::milliseconds keepalive_;
  OnBroken on_broken_;
  OnPreparing on_preparing_;
  int preparing_ = 0;  // connected workers that said `preparing` and not yet `ready`
  std::deque<std::chrono::steady_clock::time_point> awaiting_;  // started workers' first-line deadlines, in order
  bool told_preparing_ = false;  // what on_preparing_ was last told
  bool closed_ = false;          // close() ran: on_preparing_ is told nothing more
  std::string name_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  boost::asio::steady_timer timer_;
  boost::asio::steady_timer grace_timer_;  // the first expectation's deadline
  std::vector<std::shared_ptr<Peer>> peers_;
  std::int64_t generation_ = 0;
  std::shared_ptr<const elastic::HeldRecord> record_;  // generation_'s, when held
  std::chrono::steady_clock::time_point bad_logged_{};  // the last line from a worker that did not parse, logged
  // Expires when the channel is destroyed: a handler that io_ runs after that (an aborted accept,
  // read or write) returns at once.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace hdp::agents
