#include "mesh/comm/tcp_network.h"

#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <cstring>

#include "common/error.h"
#include "common/log.h"
#include "common/sigpipe.h"
#include "mesh/comm/checks.h"
#include "mesh/comm/tcp_network_impl.h"

namespace hdp::mesh {

namespace asio = boost::asio;
using Link = TcpNetwork::Impl::Link;

void TcpNetwork::Impl::read_next(int peer, const Socket& socket) {
  Link& link = link_to(peer);
  asio::async_read(*socket, asio::buffer(&link.incoming, sizeof link.incoming),
                   [this, peer, socket](const boost::system::error_code& ec, std::size_t) {
                     if (ec) return lose(peer, closed_why(peer, ec));
                     on_header(peer, socket);
                   });
}

std::string TcpNetwork::Impl::closed_why(int peer, const boost::system::error_code& ec) const {
  if (ec == asio::error::eof) return "rank " + std::to_string(peer) + " closed its connection";
  return "the connection to rank " + std::to_string(peer) + " failed: " + ec.message();
}

void TcpNetwork::Impl::on_header(int peer, const Socket& socket) {
  Link& link = link_to(peer);
  const wire::FrameHeader header = link.incoming;
  if (header.slot == wire::kGoodbyeSlot) {
    {
      std::lock_guard lock(mutex);
      link.goodbye = true;
    }
    return read_next(peer, socket);  // then the end of the stream
  }
  std::shared_ptr<NetOp> op;
  std::shared_ptr<Unexpected> early;
  std::byte* target = nullptr;
  std::string error;
  {
    std::lock_guard lock(mutex);
    if (dead || link.state != Link::State::kUp) return;
    auto& queue = link.recvs[header.slot];
    if (!queue.empty()) {
      op = queue.front();
      queue.pop_front();
      if (op->bytes != header.bytes) {
        error = "rank " + std::to_string(peer) + " sent " + std::to_string(header.bytes) + " bytes on slot " +
                std::to_string(header.slot) + " for a recv of " + std::to_string(op->bytes) + " bytes";
      }
      target = op->data;
      link.reading = op;
    } else if (header.bytes > kMaxUnexpectedBytes) {
      error = "rank " + std::to_string(peer) + " announced a message of " + std::to_string(header.bytes) +
              " bytes on slot " + std::to_string(header.slot);
    } else {
      early = std::make_shared<Unexpected>();
      early->data.resize(header.bytes);
      target = early->data.data();
      link.unexpected[header.slot].push_back(early);
      link.reading_early = early;
    }
  }
  if (!error.empty()) return fail(error);
  auto done = [this, peer, socket, op, early](const boost::system::error_code& ec, std::size_t) {
    if (ec) return lose(peer, closed_why(peer, ec));
    on_payload(peer, op, early);
    read_next(peer, socket);
  };
  if (header.bytes == 0) return done({}, 0);
  asio::async_read(*socket, asio::buffer(target, header.bytes), std::move(done));
}

void TcpNetwork::Impl::on_payload(int peer, const std::shared_ptr<NetOp>& op, const std::shared_ptr<Unexpected>& early) {
  std::lock_guard lock(mutex);
  Link& link = link_to(peer);
  if (op) {
    if (op->state == NetOp::State::kPending) op->state = NetOp::State::kDone;
    link.reading.reset();
  }
  if (early) {
    early->complete = true;
    if (early->claimed) {
      if (!early->data.empty()) std::memcpy(early->claimed->data, early->data.data(), early->data.size());
      early->claimed->state = NetOp::State::kDone;
      early->claimed.reset();
    }
    link.reading_early.reset();
  }
  changed.notify_all();
}

void TcpNetwork::Impl::pump(int peer) {
  Link& link = link_to(peer);
  std::shared_ptr<NetOp> op;
  Socket socket;
  {
    std::lock_guard lock(mutex);
    if (dead || link.state != Link::State::kUp || link.writing || link.sends.empty()) return;
    op = link.sends.front();
    link.writing = true;
    socket = link.socket;
  }
  op->header = {op->slot, op->bytes};
  const std::array<asio::const_buffer, 2> buffers{asio::buffer(&op->header, sizeof op->header),
                                                  asio::buffer(op->data, op->bytes)};
  // The handler holds the socket, as the reads' do: async_write continues on the stream it was
  // given (a partial write issues the next write_some on it), so the socket must outlive the whole
  // write even when the read side lost the link and released its own reference meanwhile (ASan
  // caught a use after free there once, in CommunicatorFaultTest's ring-attention peer kill).
  asio::async_write(*socket, buffers, [this, peer, op, socket](const boost::system::error_code& ec, std::size_t) {
    if (ec) return lose(peer, closed_why(peer, ec));
    bytes_sent += static_cast<std::int64_t>(op->bytes);
    {
      std::lock_guard lock(mutex);
      Link& link = link_to(peer);
      link.writing = false;
      if (!link.sends.empty() && link.sends.front() == op) link.sends.pop_front();
      if (op->state == NetOp::State::kPending) op->state = NetOp::State::kDone;
      changed.notify_all();
    }
    pump(peer);
  });
}

void TcpNetwork::Impl::fail_op(const std::shared_ptr<NetOp>& op, const std::string& why, bool timed_out) {
  if (op && op->state == NetOp::State::kPending) {
    op->state = NetOp::State::kFailed;
    op->error = why;
    op->timed_out = timed_out;
  }
}

TcpNetwork::Impl::Socket TcpNetwork::Impl::clear_link(Link& link, const std::string& why, bool timed_out) {
  for (auto& op : link.sends) fail_op(op, why, timed_out);
  for (auto& [slot, queue] : link.recvs) {
    for (auto& op : queue) fail_op(op, why, timed_out);
  }
  // Messages that arrived whole stay: a recv posted later still gets them (a peer that sent its
  // last message and closed, at the end of a generation). One cut off mid-way is dropped.
  for (auto& [slot, queue] : link.unexpected) {
    std::erase_if(queue, [](const std::shared_ptr<Unexpected>& early) { return !early->complete; });
  }
  fail_op(link.reading, why);
  if (link.reading_early) fail_op(link.reading_early->claimed, why);
  link.sends.clear();
  link.recvs.clear();
  link.reading.reset();
  link.reading_early.reset();
  link.writing = false;
  return std::move(link.socket);
}

void TcpNetwork::Impl::lose(int peer, const std::string& why, bool timed_out) {
  Socket socket;
  {
    std::lock_guard lock(mutex);
    Link& link = link_to(peer);
    if (dead || link.state == Link::State::kLost) return;
    link.state = Link::State::kLost;
    link.why = why;
    link.timed_out = timed_out;
    if (first_loss.empty() && !timed_out && !link.goodbye) first_loss = "rank " + std::to_string(peer) + ": " + why;
    socket = clear_link(link, why, timed_out);
    changed.notify_all();
  }
  if (socket) close_hard(*socket);
  log()->debug("communicator {}: lost rank {}: {}", name(), peer, why);
}

void TcpNetwork::Impl::fail(const std::string& why) {
  bool inline_close = false;
  {
    std::unique_lock lock(mutex);
    if (dead) {
      if (!on_io_thread()) changed.wait(lock, [&] { return closed; });
      return;
    }
    dead = true;
    reason = why;
    inline_close = stopped || on_io_thread();
  }
  log()->warn("communicator {}: {}", name(), why);
  if (inline_close) {
    close_all(true);
    return;
  }
  asio::post(io, [this] { close_all(true); });
  std::unique_lock lock(mutex);
  changed.wait(lock, [&] { return closed; });
}

void TcpNetwork::Impl::close_all(bool hard) {
  std::vector<Socket> sockets, goodbyes;
  {
    std::lock_guard lock(mutex);
    const std::string why = reason.empty() ? "the communicator was closed" : reason;
    for (auto& link : links) {
      if (!link) continue;
      const bool up = link->state == Link::State::kUp;
      if (auto s = clear_link(*link, why)) {
        if (up && !hard) goodbyes.push_back(s);
        sockets.push_back(std::move(s));
      }
      link->unexpected.clear();
    }
    sockets.insert(sockets.end(), handshaking.begin(), handshaking.end());
    handshaking.clear();
  }
  boost::system::error_code ignored;
  acceptor.close(ignored);
  // Nothing is in flight (a gentle close): 16 bytes fit the socket's buffer, so this never waits
  // long; a peer that misses it takes the close for a loss, which costs a report, not a step.
  const wire::FrameHeader goodbye{.slot = wire::kGoodbyeSlot, .bytes = 0};
  for (auto& s : goodbyes) asio::write(*s, asio::buffer(&goodbye, sizeof goodbye), ignored);
  for (auto& s : sockets) {
    if (hard) {
      close_hard(*s);
    } else {
      s->close(ignored);
    }
  }
  {
    std::lock_guard lock(mutex);
    closed = true;
    changed.notify_all();
  }
  if (options.on_closed) options.on_closed();
}

bool TcpNetwork::Impl::busy() const {
  for (const auto& link : links) {
    if (!link) continue;
    if (!link->sends.empty() || link->reading || link->reading_early) return true;
    for (const auto& [slot, queue] : link->recvs) {
      if (!queue.empty()) return true;
    }
  }
  return false;
}

void TcpNetwork::Impl::shutdown() {
  {
    std::lock_guard lock(mutex);
    if (stopped) return;
  }
  if (thread.joinable()) {
    asio::post(io, [this] {
      bool gentle = false;
      {
        std::lock_guard lock(mutex);
        gentle = !dead && !busy();
        if (!dead) {
          dead = true;
          reason = "the communicator was destroyed";
        }
      }
      close_all(!gentle);
      io.stop();
    });
    thread.join();
  }
  std::lock_guard lock(mutex);
  stopped = true;
  if (!dead) {
    dead = true;
    reason = "the communicator was destroyed";
  }
  closed = true;
  changed.notify_all();
}

TcpNetwork::TcpNetwork(Options options) {
  check_group("communicator", options.identity.rank, options.identity.size);
  check_given(options.store != nullptr, "communicator bootstrap", "store");
  impl_ = std::make_unique<Impl>(std::move(options));
  impl_->listen();
  impl_->accept_next();
  Impl* impl = impl_.get();
  impl_->thread = std::thread([impl] {
    impl->io_thread_id = std::this_thread::get_id();
    block_sigpipe_in_this_thread();
    impl->io.run();
  });
}

TcpNetwork::~TcpNetwork() {
  if (impl_) impl_->shutdown();
}

std::shared_ptr<NetOp> TcpNetwork::post(bool send, int peer, std::uint64_t slot, std::byte* data, std::size_t bytes,
                                        std::shared_ptr<const void> keep, const std::string& what) {
  Impl& impl = *impl_;
  auto op = std::make_shared<NetOp>();
  op->send = send;
  op->peer = peer;
  op->slot = slot;
  op->data = data;
  op->bytes = bytes;
  op->keep = std::move(keep);
  bool connect = false, pump = false;
  std::string mismatch;
  {
    std::unique_lock lock(impl.mutex);
    if (impl.dead) {
      impl.changed.wait(lock, [&] { return impl.closed; });
      throw PeerLost(what + ": " + impl.reason);
    }
    Link& link = impl.link_to(peer);
    const bool arrived = !send && !link.unexpected[slot].empty();  // (whole, if the link is lost)
    if (link.state == Link::State::kLost && !arrived) {
      // Like a failed wait: the communicator dies with it (its other peers then fail fast).
      const std::string why = what + ": peer lost: " + link.why;
      lock.unlock();
      impl.fail(why);
      throw PeerLost(why);
    }
    if (send) {
      link.sends.push_back(op);
      pump = link.state == Link::State::kUp;
    } else {
      auto& early = link.unexpected[slot];
      if (early.empty()) {
        link.recvs[slot].push_back(op);
      } else {
        auto message = early.front();
        early.pop_front();
        if (message->data.size() != bytes) {
          mismatch = what + ": rank " + std::to_string(peer) + " sent " + std::to_string(message->data.size()) +
                     " bytes for a recv of " + std::to_string(bytes) + " bytes";
        } else if (message->complete) {
          if (bytes > 0) std::memcpy(data, message->data.data(), bytes);
          op->state = NetOp::State::kDone;
        } else {
          message->claimed = op;
        }
      }
    }
    if (link.state == Link::State::kNone) {
      connect = wire::initiates(impl.rank, peer);
      link.state = connect ? Link::State::kConnecting : Link::State::kAwaiting;
    }
  }
  if (!mismatch.empty()) {
    impl.fail(mismatch);
    throw InvalidArgument(mismatch);
  }
  if (pump) asio::post(impl.io, [&impl, peer] { impl.pump(peer); });
  if (connect) impl.start_connect(peer, Clock::now() + impl.options.timeout, {});
  return op;
}

TcpNetwork::Outcome TcpNetwork::wait(const NetOp& op, Clock::time_point deadline) {
  Impl& impl = *impl_;
  std::unique_lock lock(impl.mutex);
  impl.changed.wait_until(lock, deadline, [&] { return op.state != NetOp::State::kPending || impl.dead; });
  if (op.state == NetOp::State::kDone) return Outcome::kDone;
  if (impl.dead) {
    impl.changed.wait(lock, [&] { return impl.closed; });
    return op.state == NetOp::State::kDone ? Outcome::kDone : Outcome::kDead;
  }
  return op.state == NetOp::State::kFailed && !op.timed_out ? Outcome::kFailed : Outcome::kTimedOut;
}

void TcpNetwork::fail(const std::string& why) { impl_->fail(why); }

bool TcpNetwork::dead() const { return impl_->is_dead(); }

std::string TcpNetwork::first_loss() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->first_loss;
}

std::string TcpNetwork::reason() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->reason;
}

void TcpNetwork::shutdown() { impl_->shutdown(); }

std::int64_t TcpNetwork::refused() const { return impl_->refused.load(); }
std::int64_t TcpNetwork::connections() const { return impl_->connections.load(); }
std::int64_t TcpNetwork::bytes_sent() const { return impl_->bytes_sent.load(); }

}  // namespace hdp::mesh
