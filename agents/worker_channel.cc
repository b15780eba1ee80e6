#include "agents/worker_channel.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include "common/error.h"
#include "common/log.h"
#include "elastic/agent_channel.h"

namespace hdp::agents {

namespace asio = boost::asio;
using local = asio::local::stream_protocol;

struct WorkerChannel::Peer {
  explicit Peer(local::socket s) : socket(std::move(s)) {}
  local::socket socket;
  bool writing = false;        // a message is in flight
  bool dirty = false;          // the state changed meanwhile: send it once the write completes
  bool greeted = false;        // the hello line went out
  bool preparing = false;      // it said `preparing`, and not `ready` since
  bool spoke = false;          // it said `preparing` or `ready`
  bool gone = false;           // forgotten: what it still sends counts no more
  std::int64_t record_for = 0;  // the generation whose record this worker was sent
  std::string in_flight;
  char chunk[256];            // what the worker writes, as read
  std::string input;          // ... not yet a whole line
};

namespace {

std::string channel_name() {
  std::random_device random;
  char suffix[17];
  std::snprintf(suffix, sizeof suffix, "%08x%08x", random(), random());
  return "@hdp-agent-" + std::to_string(getpid()) + "-" + suffix;
}

}  // namespace

WorkerChannel::WorkerChannel(asio::io_context& io, std::chrono::milliseconds keepalive, OnBroken on_broken,
                             OnPreparing on_preparing)
    : io_(io),
      keepalive_(keepalive),
      on_broken_(std::move(on_broken)),
      on_preparing_(std::move(on_preparing)),
      name_(channel_name()),
      acceptor_(io),
      timer_(io),
      grace_timer_(io) {
  // An abstract socket ('\0' first): no file to clean up, gone with the agent.
  const std::string path = std::string(1, '\0') + name_.substr(1);
  boost::system::error_code error;
  acceptor_.open(local(), error);
  if (!error) acceptor_.bind(local::endpoint(path), error);
  if (!error) acceptor_.listen(asio::socket_base::max_listen_connections, error);
  if (error) throw Error("cannot open the agent's worker channel " + name_ + ": " + error.message());
  accept();
  keep_alive();
}

WorkerChannel::~WorkerChannel() {
  close();
  alive_.reset();  // handlers still queued on io_ find it expired and touch nothing
}

void WorkerChannel::close() {
  boost::system::error_code ignored;
  timer_.cancel();
  grace_timer_.cancel();
  acceptor_.close(ignored);
  for (auto& peer : peers_) {
    peer->gone = true;
    peer->socket.close(ignored);
  }
  peers_.clear();
  preparing_ = 0;  // nobody is told: the agent is closing
  awaiting_.clear();
  closed_ = true;
}

void WorkerChannel::accept() {
  acceptor_.async_accept([this, alive = std::weak_ptr<bool>(alive_)](const boost::system::error_code& error,
                                                                     local::socket socket) {
    if (alive.expired()) return;  // the channel was destroyed; this handler ran later
    if (error) {
      if (error != asio::error::operation_aborted) log()->warn("worker channel {}: accept failed: {}", name_, error.message());
      if (acceptor_.is_open() && error != asio::error::operation_aborted) accept();
      return;
    }
    auto peer = std::make_shared<Peer>(std::move(socket));
    peers_.push_back(peer);
    log()->debug("worker channel {}: a worker connected ({} now); generation {}", name_, peers_.size(), generation_);
    send(peer);
    read_input(peer);
    accept();
  });
}

// Reads what the worker writes until it closes its end: that is also how a worker that is gone
// is noticed and forgotten.
void WorkerChannel::read_input(const std::shared_ptr<Peer>& peer) {
  peer->socket.async_read_some(asio::buffer(peer->chunk), [this, peer, alive = std::weak_ptr<bool>(alive_)](
                                                              const boost::system::error_code& error, std::size_t got) {
    if (alive.expired()) return;
    if (error) {
      forget(peer);
      return;
    }
    peer->input.append(peer->chunk, got);
    take_lines(*peer);
    read_input(peer);
  });
}

void WorkerChannel::take_lines(Peer& peer) {
  for (std::size_t newline; (newline = peer.input.find('\n')) != std::string::npos;) {
    const std::string line = peer.input.substr(0, newline);
    peer.input.erase(0, newline + 1);
    try {
      using Kind = elastic::agent_channel::WorkerLine::Kind;
      const auto parsed = elastic::agent_channel::parse_worker_line(line);
      if (parsed.kind == Kind::kBroken) {
        if (on_broken_) on_broken_(parsed.generation);
      } else {
        set_preparing(peer, parsed.kind == Kind::kPreparing);
      }
    } catch (const InvalidArgument& e) {
      if (const auto now = std::chrono::steady_clock::now(); now - bad_logged_ >= std::chrono::seconds(5)) {
        bad_logged_ = now;
        log()->warn("worker channel {}: {} (ignored)", name_, e.what());
      }
    }
  }
  if (peer.input.size() > elastic::agent_channel::kMaxLine) peer.input.clear();  // no line end: garbage
}

void WorkerChannel::forget(const std::shared_ptr<Peer>& peer) {
  if (peer->gone) return;
  std::erase(peers_, peer);
  if (peer->preparing) {
    peer->preparing = false;
    --preparing_;
  }
  peer->gone = true;
  review_preparing();
}

void WorkerChannel::set_preparing(Peer& peer, bool preparing) {
  if (peer.gone) return;
  if (!std::exchange(peer.spoke, true) && !awaiting_.empty()) awaiting_.pop_front();
  if (peer.preparing != preparing) {
    peer.preparing = preparing;
    preparing_ += preparing ? 1 : -1;
  }
  review_preparing();
}

void WorkerChannel::expect_worker() {
  if (closed_) return;
  awaiting_.push_back(std::chrono::steady_clock::now() + elastic::agent_channel::kFirstLineGrace);
  // Told from io_'s loop, not from inside the caller's call (the agent starts workers from its
  // control plane, which on_preparing_ calls into).
  asio::post(io_, [this, alive = std::weak_ptr<bool>(alive_)] {
    if (!alive.expired()) review_preparing();
  });
}

void WorkerChannel::review_preparing() {
  if (closed_) return;
  const auto now = std::chrono::steady_clock::now();
  while (!awaiting_.empty() && awaiting_.front() <= now) awaiting_.pop_front();
  if (!awaiting_.empty()) {
    grace_timer_.expires_at(awaiting_.front());
    grace_timer_.async_wait([this, alive = std::weak_ptr<bool>(alive_)](const boost::system::error_code& error) {
      if (!alive.expired() && !error) review_preparing();
    });
  }
  if (preparing() == told_preparing_) return;
  told_preparing_ = preparing();
  if (on_preparing_) on_preparing_(told_preparing_);
}

// The whole state for this worker: the hello line first, the record of the generation when held
// and not yet sent to it, then the generation line (after the record, so that a worker that reads
// the generation already has its record).
std::string WorkerChannel::message_for(Peer& peer) const {
  std::string message;
  if (!peer.greeted) message = elastic::agent_channel::hello_line(keepalive_);
  peer.greeted = true;
  if (record_ && peer.record_for != generation_) {
    message += elastic::agent_channel::record_line(generation_, record_->encoded.size());
    message += record_->encoded;
    peer.record_for = generation_;
  }
  return message + elastic::agent_channel::generation_line(generation_);
}

void WorkerChannel::send(const std::shared_ptr<Peer>& peer) {
  if (peer->writing) {
    peer->dirty = true;  // composed when the write in flight completes: the newest state is enough
    return;
  }
  peer->writing = true;
  peer->dirty = false;
  peer->in_flight = message_for(*peer);
  asio::async_write(peer->socket, asio::buffer(peer->in_flight), [this, peer, alive = std::weak_ptr<bool>(alive_)](
                                                                     const boost::system::error_code& error, std::size_t) {
    if (alive.expired()) return;
    peer->writing = false;
    if (error) {
      boost::system::error_code ignored;
      peer->socket.close(ignored);
      forget(peer);
      return;
    }
    if (peer->dirty) send(peer);
  });
}

void WorkerChannel::send_all() {
  const auto peers = peers_;  // send() may erase from peers_
  for (const auto& peer : peers) send(peer);
}

void WorkerChannel::publish(std::int64_t generation, std::shared_ptr<const elastic::HeldRecord> record) {
  if (record && record->generation.number != generation) record.reset();
  if (generation < generation_ || (generation == generation_ && (!record || record_))) return;
  log()->debug("worker channel {}: generation {}{} to {} worker(s)", name_, generation, record ? " and its record" : "",
               peers_.size());
  if (generation > generation_) record_.reset();
  generation_ = generation;
  if (record) record_ = std::move(record);
  send_all();
}

void WorkerChannel::keep_alive() {
  timer_.expires_after(keepalive_);
  timer_.async_wait([this, alive = std::weak_ptr<bool>(alive_)](const boost::system::error_code& error) {
    if (error || alive.expired()) return;
    send_all();
    keep_alive();
  });
}

}  // namespace hdp::agents
