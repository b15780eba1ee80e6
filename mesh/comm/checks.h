// File: mesh/comm/checks.h
//
// The argument checks every Communicator implementation makes on the caller's thread before
// anything is sent (TcpCommunicator with the CPU, NcclCommunicator with its backend's device), and
// the checks of their connects' options (TcpCommunicator, its TcpNetwork, NcclCommunicator, the
// factory): each throws InvalidArgument naming the operation (`what`) and the value, written once
// here so that every implementation refuses the same values with the same words.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "mesh/comm/communicator.h"
#include "ops/tensor.h"

namespace hdp::mesh {

// offsets[i] = counts[0] + ... + counts[i-1]; one more entry than counts (the sum).
std::vector<std::int64_t> offsets_of(const std::vector<std::int64_t>& counts);

inline std::byte* bytes_of(const ops::Tensor& t) { return static_cast<std::byte*>(t.raw()); }

// ---- a connect's options ----------------------------------------------------------------------

// The group a communicator is made for: size in [1, max_size], rank in [0, size).
void check_group(const std::string& what, int rank, int size, int max_size = std::numeric_limits<int>::max());

// A duration an option gives (`name`: the timeout, the watchdog tick): positive.
void check_positive(const std::string& what, const char* name, std::chrono::milliseconds value);

// Something a connect needs (`name`: the store, the backend): `given`, else "<what>: no <name>".
void check_given(bool given, const std::string& what, const char* name);

// ---- a call's arguments ------------------------------------------------------------------------

// A rank a call names (`name`: a send's "dst", a broadcast's "root"): in [0, size).
void check_rank(const std::string& what, const char* name, int r, int size);

// A point-to-point tag of the caller's: below kMaxTag (the values above are the implementation's).
void check_tag(const std::string& what, Tag tag);

// A send's or a recv's: the buffer (check_tensor), the peer (check_rank, named "rank" for a send's
// destination and a recv's source alike), the tag.
void check_p2p(const std::string& what, const ops::Tensor& buffer, int peer, Tag tag, int size, ops::Device device);

// Defined, and on `device`.
void check_tensor(const ops::Tensor& t, const std::string& what, const char* name, ops::Device device);

// One entry per rank, none negative; returns a copy.
std::vector<std::int64_t> check_counts(std::span<const std::int64_t> counts, int size, const std::string& what);

// The checks reduce_scatter (whole = input, part = output) and allgather (part = input, whole =
// output) share: the same dtype, the part holds counts[rank], the whole sum(counts), and the two
// overlap only where the part is this rank's own block of the whole.
struct Blocks {
  std::vector<std::int64_t> counts, offsets;
  std::size_t elem = 0;
};
Blocks check_blocks(const std::string& what, const ops::Tensor& whole, const char* whole_name, const ops::Tensor& part,
                    const char* part_name, std::span<const std::int64_t> counts_in, int rank, int size,
                    ops::Device device);

}  // namespace hdp::mesh
