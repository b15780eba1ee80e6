#include "mesh/comm/collectives.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>

#include "common/error.h"

namespace hdp::mesh {
namespace {

using Message = std::shared_ptr<Transport::Message>;

int mod(int a, int n) { return ((a % n) + n) % n; }

}  // namespace

// Every collective's first step: the same fixed-size message to and from both ring neighbours,
// on one slot for all collectives (FIFO per peer and slot keeps them in collective order).
void exchange_descriptor(Transport& t, const Descriptor& mine, Transport::Clock::time_point deadline,
                         const std::string& what) {
  if (t.size == 1) return;
  const int next = mod(t.rank + 1, t.size), prev = mod(t.rank - 1, t.size);
  auto space = std::make_shared<std::array<Descriptor, 3>>();
  (*space)[0] = mine;
  const int peers = t.size == 2 ? 1 : 2;
  std::vector<Message> ops;
  ops.push_back(t.post_recv(space, &(*space)[1], sizeof(Descriptor), prev, kDescriptorSlot, what));
  if (peers == 2) ops.push_back(t.post_recv(space, &(*space)[2], sizeof(Descriptor), next, kDescriptorSlot, what));
  ops.push_back(t.post_send(space, &(*space)[0], sizeof(Descriptor), next, kDescriptorSlot, what));
  if (peers == 2) ops.push_back(t.post_send(space, &(*space)[0], sizeof(Descriptor), prev, kDescriptorSlot, what));
  for (const auto& op : ops) t.wait(op, deadline, what);
  for (int i = 1; i <= peers; ++i) {
    const Descriptor& theirs = (*space)[i];
    const int peer = i == 1 ? prev : next;
    if (const auto why = mismatch(t.rank, mine, peer, theirs)) {
      t.fail(*why);
      throw InvalidArgument(*why);
    }
  }
}

// Ring reduce-scatter (data-plane.md §4): at step s, send block (r-s-1) to r+1 and receive block
// (r-s-2) from r-1, adding this rank's own part; block r ends fully reduced. `in` is never
// written; `out` may be in's block r. Messages of zero elements are skipped on both sides (the
// counts are the same everywhere, the descriptor checked that).
void reduce_scatter(Transport& t, std::uint64_t seq, int phase0, const std::shared_ptr<const void>& keep_in,
                    const std::byte* in, std::byte* out, const std::vector<std::int64_t>& counts, ops::DType dtype,
                    Combine combine, Transport::Clock::time_point deadline, const std::string& what) {
  const int rank = t.rank, size = t.size;
  const std::size_t elem = ops::dtype_size(dtype);
  const auto off = offsets_of(counts);
  if (size == 1) {
    if (out != in) std::memmove(out, in, static_cast<std::size_t>(counts[0]) * elem);
    return;
  }
  const int next = mod(rank + 1, size), prev = mod(rank - 1, size);
  const std::int64_t widest = *std::max_element(counts.begin(), counts.end());
  auto scratch = std::make_shared<ops::Tensor>(ops::Tensor::empty({2 * widest}, dtype));
  std::byte* half[2] = {bytes_of(*scratch), bytes_of(*scratch) + static_cast<std::size_t>(widest) * elem};
  for (int s = 0; s < size - 1; ++s) {
    const int sb = mod(rank - s - 1, size), rb = mod(rank - s - 2, size);
    const std::byte* src = s == 0 ? in + static_cast<std::size_t>(off[sb]) * elem : half[(s - 1) % 2];
    std::byte* dst = half[s % 2];
    const std::uint64_t slot = collective_slot(seq, phase0 + s);
    Message recv, send;
    if (counts[rb] > 0) recv = t.post_recv(scratch, dst, static_cast<std::size_t>(counts[rb]) * elem, prev, slot, what);
    if (counts[sb] > 0) {
      send = t.post_send(s == 0 ? keep_in : scratch, src, static_cast<std::size_t>(counts[sb]) * elem, next, slot, what);
    }
    if (recv) t.wait(recv, deadline, what);
    if (send) t.wait(send, deadline, what);
    const auto n = static_cast<std::size_t>(counts[rb]);
    if (s < size - 2) {
      combine(dst, dst, in + static_cast<std::size_t>(off[rb]) * elem, n);
    } else {
      combine(out, in + static_cast<std::size_t>(off[rank]) * elem, dst, n);  // rb == rank
    }
  }
}

bool gathers_by_doubling(const std::vector<std::int64_t>& counts, std::size_t elem) {
  if (counts.size() <= 2 || counts[0] <= 0) return false;
  if (std::adjacent_find(counts.begin(), counts.end(), std::not_equal_to<>()) != counts.end()) return false;
  return static_cast<std::size_t>(counts[0]) * elem * counts.size() <= kDoublingAllgatherBytes;
}

namespace {

// Bruck's allgather of equal blocks: in round k (d = 2^k), send the first min(d, size - d) blocks
// gathered so far to rank - d and append as many from rank + d; after ceil(log2 size) rounds block
// i of the gathered buffer is rank (rank + i)'s, and it is rotated into place.
void allgather_by_doubling(Transport& t, std::uint64_t seq, int phase0, const std::byte* in, std::byte* out,
                           std::size_t block, Transport::Clock::time_point deadline, const std::string& what) {
  const int rank = t.rank, size = t.size;
  // Owned by the messages too: a wait that throws may leave the transport holding them.
  auto gathered = std::make_shared<std::vector<std::byte>>(block * static_cast<std::size_t>(size));
  std::byte* g = gathered->data();
  std::memcpy(g, in, block);
  int round = 0;
  for (int d = 1; d < size; d *= 2, ++round) {
    const auto blocks = static_cast<std::size_t>(std::min(d, size - d));
    const std::uint64_t slot = collective_slot(seq, phase0 + round);
    Message recv = t.post_recv(gathered, g + block * static_cast<std::size_t>(d), block * blocks, mod(rank + d, size),
                               slot, what);
    Message send = t.post_send(gathered, g, block * blocks, mod(rank - d, size), slot, what);
    t.wait(recv, deadline, what);
    t.wait(send, deadline, what);
  }
  for (int i = 0; i < size; ++i) {
    std::memcpy(out + block * static_cast<std::size_t>(mod(rank + i, size)), g + block * static_cast<std::size_t>(i),
                block);
  }
}

}  // namespace

// Bruck's for small equal blocks; otherwise the ring: at step s, send block (r-s) to r+1 and
// receive block (r-s-1) from r-1.
void allgather(Transport& t, std::uint64_t seq, int phase0, const std::shared_ptr<const void>& keep_out,
               const std::byte* in, std::byte* out, const std::vector<std::int64_t>& counts, std::size_t elem,
               Transport::Clock::time_point deadline, const std::string& what) {
  const int rank = t.rank, size = t.size;
  if (gathers_by_doubling(counts, elem)) {
    return allgather_by_doubling(t, seq, phase0, in, out, static_cast<std::size_t>(counts[0]) * elem, deadline, what);
  }
  const auto off = offsets_of(counts);
  std::byte* own = out + static_cast<std::size_t>(off[rank]) * elem;
  if (own != in) std::memmove(own, in, static_cast<std::size_t>(counts[rank]) * elem);
  const int next = mod(rank + 1, size), prev = mod(rank - 1, size);
  for (int s = 0; s < size - 1; ++s) {
    const int sb = mod(rank - s, size), rb = mod(rank - s - 1, size);
    const std::uint64_t slot = collective_slot(seq, phase0 + s);
    Message recv, send;
    if (counts[rb] > 0) {
      recv = t.post_recv(keep_out, out + static_cast<std::size_t>(off[rb]) * elem,
                         static_cast<std::size_t>(counts[rb]) * elem, prev, slot, what);
    }
    if (counts[sb] > 0) {
      send = t.post_send(keep_out, out + static_cast<std::size_t>(off[sb]) * elem,
                         static_cast<std::size_t>(counts[sb]) * elem, next, slot, what);
    }
    if (recv) t.wait(recv, deadline, what);
    if (send) t.wait(send, deadline, what);
  }
}

// Allreduce: reduce-scatter, then allgather, over an even split of the buffer (the result is
// bit-identical on every rank: each block is reduced on one rank only). The allgather's phases
// follow the reduce-scatter's.
void allreduce(Transport& t, std::uint64_t seq, const std::shared_ptr<const void>& keep, std::byte* data,
               std::int64_t elements, ops::DType dtype, Combine combine, Transport::Clock::time_point deadline,
               const std::string& what) {
  const int n = t.size;
  std::vector<std::int64_t> counts(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) counts[static_cast<std::size_t>(i)] = elements / n + (i < elements % n ? 1 : 0);
  const std::size_t elem = ops::dtype_size(dtype);
  std::byte* own = data + static_cast<std::size_t>(offsets_of(counts)[static_cast<std::size_t>(t.rank)]) * elem;
  reduce_scatter(t, seq, 0, keep, data, own, counts, dtype, combine, deadline, what);
  if (n > 1) allgather(t, seq, n - 1, keep, own, data, counts, elem, deadline, what);
}

// Binomial tree from `root`: in round k, relative ranks below 2^k send to v + 2^k.
void broadcast(Transport& t, std::uint64_t seq, const std::shared_ptr<const void>& keep, std::byte* data,
               std::size_t bytes, int root, Transport::Clock::time_point deadline, const std::string& what) {
  if (bytes == 0) return;
  const int size = t.size;
  const int v = mod(t.rank - root, size);
  std::vector<Message> sends;
  int phase = 0;
  for (int mask = 1; mask < size; mask <<= 1, ++phase) {
    if (v < mask) {
      if (v + mask < size) sends.push_back(t.post_send(keep, data, bytes, mod(v + mask + root, size), collective_slot(seq, phase), what));
    } else if (v < 2 * mask) {
      t.wait(t.post_recv(keep, data, bytes, mod(v - mask + root, size), collective_slot(seq, phase), what), deadline, what);
    }
  }
  for (const auto& op : sends) t.wait(op, deadline, what);
}

// Dissemination: in round k, one byte to r + 2^k and one from r - 2^k.
void barrier(Transport& t, std::uint64_t seq, Transport::Clock::time_point deadline, const std::string& what) {
  auto token = std::make_shared<std::array<std::byte, 2>>();
  int phase = 0;
  for (int k = 1; k < t.size; k <<= 1, ++phase) {
    auto recv = t.post_recv(token, &(*token)[1], 1, mod(t.rank - k, t.size), collective_slot(seq, phase), what);
    auto send = t.post_send(token, &(*token)[0], 1, mod(t.rank + k, t.size), collective_slot(seq, phase), what);
    t.wait(recv, deadline, what);
    t.wait(send, deadline, what);
  }
}

}  // namespace hdp::mesh
