// File: mesh/comm/bootstrap.h
//
// The Gloo rendezvous of one communicator, standing alone: the checks of its options, the TCP
// device it listens on, and Gloo's connectFullMesh through hdp's Store (gloo_store.h), run on a
// thread of its own so that a superseded generation or a stuck pair connect gives up in time
// (bootstrap.cc, bootstrap_context, has the details).
//
// An internal header of mesh/comm: it names Gloo types, as gloo_store.h and peer_monitor.h do.
// Only mesh/comm/gloo_communicator.cc includes it; no header outside mesh/comm names a Gloo type.
#pragma once

#include <memory>

#include "mesh/comm/gloo_communicator.h"

namespace gloo::rendezvous {
class Context;
}  // namespace gloo::rendezvous
namespace gloo::transport {
class Device;
}  // namespace gloo::transport

namespace hdp::mesh {

struct Bootstrapped {
  // Destroyed in reverse order: the context (its pairs) before the device (the network thread).
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;  // connected to every peer (a full mesh)
};

// Connects options.rank to every peer. InvalidArgument for a bad rank, size, timeout or store, or
// an address it cannot listen on; TimeoutError when the peers do not all arrive within the
// timeout; PeerLost when `options.superseded` says so or a peer fails while connecting. No Gloo
// exception leaves it. The device's network thread inherits the caller's signal mask with SIGPIPE
// blocked.
Bootstrapped bootstrap(const GlooConnectOptions& options);

}  // namespace hdp::mesh
