// File: mesh/comm/gather_rows.h
//
// The small all-gather the trainer and the step's helpers make several times a generation or a
// step: every rank contributes a row of the same length (a handful of numbers: its stop request
// and timings, its speed record, its checksums) and every rank gets all rows, rank after rank.
//
// Example:
//   const std::vector<std::int64_t> rows = allgather_rows<std::int64_t>(comm, {stop, changed});
//   rows[2 * r + 1]   // rank r's `changed`
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "mesh/comm/communicator.h"
#include "ops/tensor.h"

namespace hdp::mesh {

// Collective: every rank must pass a row of the same length (the descriptor check of the
// communicator refuses a mismatch). The row travels on comm.home(). Returns comm.size() rows of row.size() elements, in rank order.
// `timeout` zero: the communicator's own.
template <typename T>
std::vector<T> allgather_rows(Communicator& comm, std::span<const T> row,
                              Communicator::Duration timeout = Communicator::Duration::zero()) {
  const auto width = static_cast<std::int64_t>(row.size());
  const ops::Tensor own = ops::Tensor::from_vector<T>(std::vector<T>(row.begin(), row.end()), {width}).to(comm.home());
  const ops::Tensor all = ops::Tensor::zeros({width * comm.size()}, ops::dtype_of<T>(), comm.home());
  comm.allgather(own, all, std::vector<std::int64_t>(static_cast<std::size_t>(comm.size()), width), timeout);
  return all.to_vector<T>();
}

template <typename T>
std::vector<T> allgather_rows(Communicator& comm, const std::vector<T>& row,
                              Communicator::Duration timeout = Communicator::Duration::zero()) {
  return allgather_rows<T>(comm, std::span<const T>(row), timeout);
}

}  // namespace hdp::mesh
