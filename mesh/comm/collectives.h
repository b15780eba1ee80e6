// File: mesh/comm/collectives.h
//
// hdp's own collective algorithms, written over a small transport of hdp's own (Transport: post a
// send or a recv of one message on a slot, wait for it with a deadline, kill the transport) that
// names no socket. TcpCommunicator implements it over its network (tcp_communicator.cc,
// tcp_network.h); tests/mesh/collectives_test.cc runs the same algorithms over an
// in-memory transport, ranks as threads.
//   - exchange_descriptor: every collective's first step (descriptor.h), with both ring neighbours;
//   - ring reduce-scatter and allgather (ring, or Bruck's for small equal blocks), uneven counts,
//     zeros included;
//   - allreduce as reduce-scatter plus allgather over an even split of the buffer (the result is
//     bit-identical on every rank: each block is reduced on one rank only);
//   - a binomial tree broadcast, a dissemination barrier.
// Every rank calls the same algorithm with the same sequence number, counts and sizes (the
// descriptor exchange checks that). Each wait ends at the caller's deadline; a failure is the
// transport's to report (it throws from post or wait), and after one every later call throws.
// The slots every hdp message uses, point to point included, are here.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mesh/comm/checks.h"
#include "mesh/comm/descriptor.h"
#include "mesh/comm/reductions.h"
#include "ops/tensor.h"

namespace hdp::mesh {

// Slots: top bytes 0x10 and up (0x01-0x08 were Gloo's own collectives', data-plane.md §1.4).
inline constexpr std::uint64_t kP2pSlot = std::uint64_t{0x10} << 56;         // | tag (< 2^56)
inline constexpr std::uint64_t kDescriptorSlot = std::uint64_t{0x11} << 56;  // every collective's descriptor
inline constexpr std::uint64_t kCollectiveSlot = std::uint64_t{0x12} << 56;  // | seq << 20 | phase
inline constexpr int kPhaseBits = 20;
inline constexpr std::uint64_t kSeqMask = (std::uint64_t{1} << (56 - kPhaseBits)) - 1;
inline constexpr int kMaxSize = 1 << (kPhaseBits - 2);  // allreduce uses 2(n-1) phases

inline std::uint64_t collective_slot(std::uint64_t seq, int phase) {
  return kCollectiveSlot | ((seq & kSeqMask) << kPhaseBits) | static_cast<std::uint64_t>(phase);
}

// Point-to-point messages between the ranks 0..size-1 of one group. A send to rank d on slot s
// matches the recv from this rank on slot s on d; messages with the same (peer, slot) match in the
// order they were posted; both sides post the same byte count.
class Transport {
 public:
  using Clock = std::chrono::steady_clock;

  // One posted message; the algorithms only hand it back to wait().
  struct Message {
    virtual ~Message() = default;
  };

  Transport(int rank, int size) : rank(rank), size(size) {}
  virtual ~Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  const int rank;
  const int size;

  // Post one message of `bytes` bytes at `data` to or from `peer` on `slot` and return at once.
  // `keep` owns the memory until the message completed (or for as long as the transport needs).
  // `what` names the operation in error messages.
  virtual std::shared_ptr<Message> post_send(std::shared_ptr<const void> keep, const void* data, std::size_t bytes,
                                             int peer, std::uint64_t slot, const std::string& what) = 0;
  virtual std::shared_ptr<Message> post_recv(std::shared_ptr<const void> keep, void* data, std::size_t bytes,
                                             int peer, std::uint64_t slot, const std::string& what) = 0;
  // Blocks until `message` completed: TimeoutError at `deadline`, PeerLost when the transport died
  // (both kill the transport first).
  virtual void wait(const std::shared_ptr<Message>& message, Clock::time_point deadline, const std::string& what) = 0;
  // Kills the transport for a reason found above it (collectives that differ across ranks): every
  // pending and later post or wait throws, here and, soon, on the peers.
  virtual void fail(const std::string& why) = 0;
};

// Every collective's first step: the same fixed-size message to and from both ring neighbours,
// on one slot for all collectives (FIFO per peer and slot keeps them in collective order).
// InvalidArgument naming both descriptors (the transport killed first) when they differ.
void exchange_descriptor(Transport& t, const Descriptor& mine, Transport::Clock::time_point deadline,
                         const std::string& what);

// Ring reduce-scatter (data-plane.md §4): at step s, send block (r-s-1) to r+1 and receive block
// (r-s-2) from r-1, adding this rank's own part; block r ends fully reduced. `in` is never
// written; `out` may be in's block r. Messages of zero elements are skipped on both sides (the
// counts are the same everywhere, the descriptor checked that). Phases phase0 .. phase0+size-2.
void reduce_scatter(Transport& t, std::uint64_t seq, int phase0, const std::shared_ptr<const void>& keep_in,
                    const std::byte* in, std::byte* out, const std::vector<std::int64_t>& counts, ops::DType dtype,
                    Combine combine, Transport::Clock::time_point deadline, const std::string& what);

// Allgather: `out` holds sum(counts) elements of `elem` bytes; `in` (this rank's block) may
// already be in place. Phases phase0 .. phase0+size-2. Two algorithms, chosen from the counts
// alone (the same on every rank):
//   - equal blocks, more than 2 ranks, at most kDoublingAllgatherBytes in all (the step
//     boundary's rows, a small allreduce's second half): Bruck's, ceil(log2 size) rounds, each
//     one message to rank - 2^k and one from rank + 2^k; a latency-bound gather takes log2(n)
//     round trips instead of n - 1 (2 instead of 3 at 4 ranks, 14 instead of 12,287 at 12,288);
//   - otherwise the ring: at step s, send block (r-s) to r+1 and receive block (r-s-1) from r-1,
//     each byte sent once per link, which is what a large gather is bound by.
inline constexpr std::size_t kDoublingAllgatherBytes = 64 * 1024;
// Whether allgather() takes Bruck's algorithm for these counts.
bool gathers_by_doubling(const std::vector<std::int64_t>& counts, std::size_t elem);
void allgather(Transport& t, std::uint64_t seq, int phase0, const std::shared_ptr<const void>& keep_out,
               const std::byte* in, std::byte* out, const std::vector<std::int64_t>& counts, std::size_t elem,
               Transport::Clock::time_point deadline, const std::string& what);

// In place over `elements` elements at `data`: reduce-scatter then allgather over an even split
// (the first elements % size ranks one element more), so each block is reduced on one rank only.
void allreduce(Transport& t, std::uint64_t seq, const std::shared_ptr<const void>& keep, std::byte* data,
               std::int64_t elements, ops::DType dtype, Combine combine, Transport::Clock::time_point deadline,
               const std::string& what);

// Binomial tree from `root`: in round k, relative ranks below 2^k send to v + 2^k.
void broadcast(Transport& t, std::uint64_t seq, const std::shared_ptr<const void>& keep, std::byte* data,
               std::size_t bytes, int root, Transport::Clock::time_point deadline, const std::string& what);

// Dissemination: in round k, one byte to r + 2^k and one from r - 2^k.
void barrier(Transport& t, std::uint64_t seq, Transport::Clock::time_point deadline, const std::string& what);

}  // namespace hdp::mesh
