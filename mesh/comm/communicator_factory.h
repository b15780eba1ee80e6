// File: mesh/comm/communicator_factory.h
//
// Building communicators for a generation (its data plane chosen from where the ranks' tensors
// live: data_plane.h), for one rank of a group bootstrapped through any Store, and for n ranks as
// threads of one process (tests, benches); the last two are TcpCommunicator, on the CPU.
//
// Example (the worker's loop, trainer/elastic_loop.cc):
//   auto comm = mesh::connect_communicator(ctx.bootstrap(m), "main", 30s);
//   auto ckpt = mesh::connect_communicator(ctx.bootstrap(m), "ckpt", 600s, Connect::kOnFirstUse);
//   // a rank training on GPU 2 of its host:
//   auto gpu = mesh::connect_communicator(ctx.bootstrap(m), "main", 30s, Connect::kRingNow,
//                                         {.device = ops::Device::kCuda, .device_id = "2"});
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "elastic/bootstrap.h"
#include "elastic/store.h"
#include "mesh/comm/communicator.h"
#include "mesh/comm/data_plane.h"
#include "mesh/comm/nccl_backend.h"

namespace hdp::mesh {

// When a communicator connects its ring neighbours: before connect_communicator returns (the
// training channel: its first collective follows at once, and a missing peer is best found while
// `superseded` is still asked), or on its first message like every other pair (a channel used
// later, the checkpoint writer's: its bootstrap is then one record, and a generation's cost does
// not double).
enum class Connect { kRingNow, kOnFirstUse };

// What tests change in connect_communicator's choice of a data plane; production passes none.
struct DataPlaneHooks {
  // Whether this build has NCCL; nullopt: HDP_HAVE_NCCL (tests take the NCCL path through a fake).
  std::optional<bool> nccl_built;
  // NCCL for this rank when the plane is NCCL; empty: nccl::make_cuda_backend with the CUDA
  // ordinal in device.device_id (InvalidArgument when it is not one).
  std::function<std::shared_ptr<nccl::Backend>(const RankDevice&)> nccl_backend;
  // When staging, stage CPU tensors too (StagingOptions::stage_all).
  bool stage_all = false;
};

// The generation's communicator on `channel`: it bootstraps under boot.store's namespace +
// "<channel>/", so one generation can have several independent communicators (one per channel;
// a channel is used once per generation). `timeout` bounds the bootstrap and is the default of
// every call. Throws PeerLost as soon as boot.superseded() says a newer generation exists while
// the bootstrap still waits for a peer, TimeoutError after `timeout`, InvalidArgument for an
// empty channel or one containing '/'.
//
// `device` is where this rank's tensors live (its host, when empty, is boot.advertise_address).
// The ranks agree on the data plane (data_plane_exchange.h; with every rank on the CPU this costs
// nothing: the bootstrap is exactly TcpCommunicator's) and rank 0 logs it with its reason, once
// per generation and channel. NCCL: an NcclCommunicator (its id under the same namespace). TCP: a
// TcpCommunicator, wrapped in a StagingCommunicator on a rank whose device is CUDA. A CUDA rank's
// bootstrap may take up to twice `timeout`: the agreement, then the communicator's own.
std::unique_ptr<Communicator> connect_communicator(const elastic::Bootstrap& boot, std::string_view channel,
                                                   std::chrono::milliseconds timeout,
                                                   Connect connect = Connect::kRingNow, RankDevice device = {},
                                                   const DataPlaneHooks& hooks = {});

// One rank of a group of `size`, bootstrapped under `prefix` of `store` (a fresh prefix per group: it names
// the group in the connection handshake). For processes that share a store (e.g. a redis-server).
std::unique_ptr<Communicator> connect_rank(std::shared_ptr<elastic::Store> store, std::string prefix, int rank,
                                           int size, std::chrono::milliseconds timeout,
                                           std::string hostname = "127.0.0.1");

// `n` ranks as one process's threads over loopback, bootstrapped through a private MemoryStore
// (each connects on a thread of its own, since connecting blocks until all have arrived).
// Element r is rank r. Rethrows the first rank's failure.
std::vector<std::unique_ptr<Communicator>> connect_local(int n, std::chrono::milliseconds timeout);

}  // namespace hdp::mesh
