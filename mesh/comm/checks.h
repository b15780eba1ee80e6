// File: mesh/comm/checks.h
//
// The argument checks every Communicator implementation makes on the caller's thread before
// anything is sent (TcpCommunicator with the CPU, NcclCommunicator with its backend's device): each
// throws InvalidArgument naming the operation (`what`) and the value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ops/tensor.h"

namespace hdp::mesh {

// offsets[i] = counts[0] + ... + counts[i-1]; one more entry than counts (the sum).
std::vector<std::int64_t> offsets_of(const std::vector<std::int64_t>& counts);

inline std::byte* bytes_of(const ops::Tensor& t) { return static_cast<std::byte*>(t.raw()); }

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
