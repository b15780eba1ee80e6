// File: mesh/comm/peer_monitor.h
//
// GlooCommunicator's failure detector. When a connection fails, Gloo signals the operations queued
// on it, but not one whose bytes are moving at that moment (tcp/pair.cc signalException visits the
// pending queues, and the message being read or written has left them; unbound sends in the write
// queue are skipped too), so a recv or send cut mid-transfer would wait out its whole timeout. A
// probe is one 0-byte recv from every live peer on a slot nobody sends to (kProbeSlot,
// collectives.h): it stays queued on every pair, so any pair's failure reaches it. The monitor
// thread waits on the newest probe; when it fires, it posts a new one (posting to a failed pair
// throws: that names the lost peers) and reports those peers lost through a callback; the
// communicator then aborts the waits of its operations with them. Those waits then fail the
// communicator unless their operation had completed before (a peer that sent its last message and
// closed cleanly, at the end of a generation). A peer that leaves while nothing of ours involves
// it fails nothing: the next operation with it does (Gloo refuses to post to it). Old probes stay
// queued on the live pairs until the end (nothing ever arrives for them).
//
// An internal header of mesh/comm: it names Gloo types, as gloo_store.h and bootstrap.h do. Only
// mesh/comm/gloo_communicator.cc includes it; no header outside mesh/comm names a Gloo type.
#pragma once

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hdp::mesh {

class PeerMonitor {
 public:
  // What the monitor reports, from its own thread (never while it holds its mutex).
  struct Callbacks {
    // The connections to `peers` failed at once (`why`: Gloo's message).
    std::function<void(const std::vector<int>& peers, const std::string& why)> lost;
    // A failure that names no peer, or a message on the probe slot: the communicator must die.
    std::function<void(const std::string& why)> fail;
  };

  // `context` (its pairs) must outlive the monitor.
  PeerMonitor(gloo::Context& context, int rank, int size, std::uint64_t slot, Callbacks callbacks);
  // Stops and joins the thread; destroys the probes (safe on open pairs: nothing is ever sent to
  // their slot, and what makes a destroyed buffer wedge a pair is data arriving for it).
  ~PeerMonitor();
  PeerMonitor(const PeerMonitor&) = delete;
  PeerMonitor& operator=(const PeerMonitor&) = delete;

  // Posts the first probe and starts the thread (nothing to watch with one rank). PeerLost when a
  // pair refuses the probe.
  void start();
  // Ends the thread soon: it reports nothing more, and its wait on the newest probe is aborted.
  // From any thread, more than once.
  void stop();
  void join();

 private:
  // Posts a new probe to every peer not yet lost; returns the peers whose pair refused it.
  std::vector<int> arm();
  void run();

  gloo::Context& context_;
  const int rank_;
  const int size_;
  const std::uint64_t slot_;
  const Callbacks callbacks_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> probes_;  // guarded by mutex_
  bool stopped_ = false;                                                 // guarded by mutex_
  std::byte probe_byte_{};
  std::vector<bool> lost_;  // by peer; the monitor thread's own once it runs
  std::thread thread_;
};

}  // namespace hdp::mesh
