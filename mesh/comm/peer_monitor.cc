#include "mesh/comm/peer_monitor.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "common/error.h"
#include "common/sigpipe.h"

namespace hdp::mesh {

PeerMonitor::PeerMonitor(gloo::Context& context, int rank, int size, std::uint64_t slot, Callbacks callbacks)
    : context_(context), rank_(rank), size_(size), slot_(slot), callbacks_(std::move(callbacks)) {
  lost_.assign(static_cast<std::size_t>(size), false);
}

PeerMonitor::~PeerMonitor() {
  stop();
  join();
}

void PeerMonitor::start() {
  if (size_ == 1) return;
  if (!arm().empty()) throw PeerLost("a connection failed right after the bootstrap");
  thread_ = std::thread([this] {
    block_sigpipe_in_this_thread();
    run();
  });
}

void PeerMonitor::stop() {
  std::lock_guard lock(mutex_);
  stopped_ = true;
  if (!probes_.empty()) probes_.back()->abortWaitRecv();
}

void PeerMonitor::join() {
  if (thread_.joinable()) thread_.join();
}

// Posts a new probe to every peer not yet lost; returns the peers whose pair refused it.
std::vector<int> PeerMonitor::arm() {
  auto probe = context_.createUnboundBuffer(&probe_byte_, 1);
  std::vector<int> failed;
  SigpipeBlock no_sigpipe;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_ || lost_[static_cast<std::size_t>(peer)]) continue;
    try {
      probe->recv(peer, slot_, 0, 0);
    } catch (const std::exception&) {  // gloo::IoException, or EnforceNotMet on a closed pair
      failed.push_back(peer);
    }
  }
  std::lock_guard lock(mutex_);
  probes_.push_back(std::move(probe));
  return failed;
}

void PeerMonitor::run() {
  // No deadline of its own (a year): it ends when the communicator dies or shuts down (stop()), or
  // every peer is lost. Gloo's wait_for(huge) would overflow, hence not "max".
  constexpr auto kForever = std::chrono::hours(24 * 365);
  for (;;) {
    gloo::transport::UnboundBuffer* probe = nullptr;
    {
      std::lock_guard lock(mutex_);
      if (stopped_) return;
      probe = probes_.back().get();
    }
    std::string message;
    try {
      if (!probe->waitRecv(nullptr, kForever)) return;  // aborted by stop()
      callbacks_.fail("a peer sent on the probe slot, which no hdp code uses");
      return;
    } catch (const std::exception& e) {  // gloo::EnforceNotMet included
      message = e.what();
    }
    const std::vector<int> failed = arm();
    {
      std::lock_guard lock(mutex_);
      if (stopped_) return;
    }
    if (failed.empty()) {
      callbacks_.fail("peer lost: " + message);  // cannot tell which: give up on all
      return;
    }
    for (int peer : failed) lost_[static_cast<std::size_t>(peer)] = true;
    callbacks_.lost(failed, message);
    if (std::count(lost_.begin(), lost_.end(), true) == size_ - 1) return;  // nothing left to watch
  }
}

}  // namespace hdp::mesh
