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
// worker writes (`broken <g>` lines) goes to `on_broken`; other lines are logged (at most every
// 5 s) and dropped. It may be destroyed while `io` still runs.
#pragma once

#include <chrono>
#include <cstdint>
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
  // Binds the socket and starts accepting on `io`. Throws hdp::Error when it cannot be bound.
  WorkerChannel(boost::asio::io_context& io, std::chrono::milliseconds keepalive, OnBroken on_broken = {});
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

  boost::asio::io_context& io_;
  std::chrono::milliseconds keepalive_;
  OnBroken on_broken_;
  std::string name_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  boost::asio::steady_timer timer_;
  std::vector<std::shared_ptr<Peer>> peers_;
  std::int64_t generation_ = 0;
  std::shared_ptr<const elastic::HeldRecord> record_;  // generation_'s, when held
  std::chrono::steady_clock::time_point bad_logged_{};  // the last line from a worker that did not parse, logged
  // Expires when the channel is destroyed: a handler that io_ runs after that (an aborted accept,
  // read or write) returns at once.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace hdp::agents
