// File: mesh/comm/data_plane_exchange.h
//
// How the ranks of one communicator agree on its data plane (data_plane.h) through the Store,
// linear in the ranks, and free when every rank is on the CPU (every caller before GPUs).
//
// Keys, in the communicator's namespace (gen:<g>:boot:<channel>/, the one TcpCommunicator and
// NcclCommunicator bootstrap in):
//   plane/dev/<r>  rank r's RankDevice record, written by a rank r > 0 on a CUDA device only;
//   plane/choice   the decision, "plane1 <size> tcp|nccl <reason>", written by rank 0 unless it is
//                  on the CPU;
//   addr/<r>       TcpCommunicator's address record (wire.h), which every rank that takes TCP
//                  writes as its connect starts, anyway.
//
// The protocol, and why it is enough:
//  - A rank on the CPU knows alone that the plane is TCP (choose_data_plane: a CPU rank rules NCCL
//    out), and says so the way it always has: it builds its TcpCommunicator, whose address record
//    appears at once. It writes and reads nothing more. So with every rank on the CPU the
//    bootstrap costs exactly what it did before GPUs.
//  - A CUDA rank r > 0 writes plane/dev/<r>, then waits for plane/choice or addr/0, whichever
//    comes first (addr/0 alone means rank 0 is on the CPU: TCP). Two keys per look, whatever the
//    size.
//  - Rank 0 on CUDA reads, for every rank not yet known, plane/dev/<r> and addr/<r> in one
//    multi_get per look (a CUDA rank writes its record before it could ever write its address, so
//    an address without a record is a CPU rank), dropping the ranks it knows, until
//    choose_data_plane has every rank or rules NCCL out early (a CPU rank, a shared GPU, no NCCL
//    in this build: nothing read later can change that); then it writes plane/choice.
// So at 20,000 ranks no rank but rank 0 reads more than two keys a look, and rank 0 reads each
// rank's keys until it has seen them (the first look usually all of them, in one round trip).
// Every wait polls the store 2 to 100 ms apart, asks `superseded` between looks (PeerLost), and
// ends after `timeout` (TimeoutError naming what it waited for); a store that is briefly
// unreachable is retried until then. Every rank of a job runs the same hdp build, so rank 0's
// "this build has NCCL" is everyone's (a rank without NCCL that is told NCCL fails its connect with
// InvalidArgument saying so, it does not hang).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "elastic/store.h"
#include "mesh/comm/data_plane.h"

namespace hdp::mesh {

struct PlaneExchangeOptions {
  int rank = 0;
  int size = 1;
  RankDevice mine;
  bool nccl_built = false;
  // The communicator's namespace (the one its address records go to).
  std::shared_ptr<elastic::Store> store;
  // Asked between looks; true: give up with PeerLost. May be empty.
  std::function<bool()> superseded;
  std::chrono::milliseconds timeout{30000};
};

inline constexpr std::string_view kPlaneChoiceKey = "plane/choice";
std::string plane_device_key(int rank);

// This rank's view of the choice: the same plane on every rank (the reason is rank 0's, or, on a
// rank that decided alone or read only the plane, a true one of its own). Throws as above, and
// InvalidArgument naming the key for a record that is not one.
DataPlaneChoice agree_data_plane(const PlaneExchangeOptions& options);

// The decision record and its reader (InvalidArgument naming what is wrong), exposed for tests.
std::string encode_plane_choice(int size, const DataPlaneChoice& choice);
DataPlaneChoice decode_plane_choice(std::string_view record, int size);

}  // namespace hdp::mesh
