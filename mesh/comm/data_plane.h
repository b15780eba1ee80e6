// File: mesh/comm/data_plane.h
//
// Which communicator carries a generation's tensors, decided in this one place from where every
// rank's tensors live (pure functions; the exchange of the ranks' records through the Store is
// data_plane_exchange.h, the factory that acts on the choice communicator_factory.h).
//
//  - NCCL (NcclCommunicator) iff this build has NCCL, every rank is on a CUDA device, and no two
//    ranks share one (the same host and device id): NCCL needs a GPU of its own per rank.
//  - Otherwise TCP (TcpCommunicator). A rank whose tensors are on a CUDA device then carries them
//    through host buffers (StagingCommunicator, staging_communicator.h): needs_staging().
//
// Example:
//   std::vector<RankDevice> ranks = ...;  // one per rank, in rank order
//   DataPlaneChoice c = choose_data_plane(ranks, HDP_HAVE_NCCL);
//   log()->info("{} data plane ({})", data_plane_name(c.plane), c.reason);
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "ops/dtype.h"

namespace hdp::mesh {

// Where one rank's tensors live.
struct RankDevice {
  std::string host;       // the host the rank runs on (its advertised address): GPUs are per host
  ops::Device device = ops::Device::kCpu;
  // The GPU's identity on that host, the same for every process of the host that uses it: its
  // CUDA ordinal in the host's numbering ("0", "1", ...; agents hand every worker the same
  // CUDA_VISIBLE_DEVICES) or its UUID. Empty on the CPU.
  std::string device_id;

  bool operator==(const RankDevice&) const = default;
};

// "dev1 cpu <host>" or "dev1 cuda <host> <device_id>": host and device id are non-empty and hold
// no whitespace (a host may be empty on the CPU: "dev1 cpu"). encode throws InvalidArgument for a
// RankDevice it cannot write (a CUDA rank without device id, a CPU rank with one, whitespace);
// decode throws InvalidArgument quoting a record that is not one.
std::string encode_rank_device(const RankDevice& device);
RankDevice decode_rank_device(std::string_view record);

enum class DataPlane { kTcp, kNccl };
// "TCP", "NCCL".
std::string data_plane_name(DataPlane plane);

struct DataPlaneChoice {
  DataPlane plane = DataPlane::kTcp;
  std::string reason;  // for a person: why this plane ("rank 3 is on the CPU")
};

// ranks[r] is rank r's device. NCCL iff nccl_built, every rank is on CUDA and no two ranks share
// (host, device_id); else TCP, and the reason names the first rank (in rank order) that rules
// NCCL out. Linear in the ranks. Monotone: a choice of TCP over some ranks stays TCP whatever
// ranks are added (the exchange stops reading early on it).
DataPlaneChoice choose_data_plane(std::span<const RankDevice> ranks, bool nccl_built);

// Whether this rank carries its tensors through host buffers: the plane is TCP and its tensors are
// on a CUDA device.
bool needs_staging(const RankDevice& mine, DataPlane plane);

}  // namespace hdp::mesh
