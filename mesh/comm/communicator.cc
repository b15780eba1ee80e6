#include "mesh/comm/communicator.h"

namespace hdp::mesh {

void Communicator::send(const ops::Tensor& buffer, int dst, Tag tag, Duration timeout) {
  isend(buffer, dst, tag)->wait(resolve(timeout));
}

void Communicator::recv(const ops::Tensor& buffer, int src, Tag tag, Duration timeout) {
  irecv(buffer, src, tag)->wait(resolve(timeout));
}

void Communicator::allreduce(const ops::Tensor& buffer, ReduceOp op, Duration timeout) {
  iallreduce(buffer, op)->wait(resolve(timeout));
}

void Communicator::reduce_scatter(const ops::Tensor& input, const ops::Tensor& output,
                                  std::span<const std::int64_t> counts, ReduceOp op, Duration timeout) {
  ireduce_scatter(input, output, counts, op)->wait(resolve(timeout));
}

void Communicator::allgather(const ops::Tensor& input, const ops::Tensor& output, std::span<const std::int64_t> counts,
                             Duration timeout) {
  iallgather(input, output, counts)->wait(resolve(timeout));
}

void Communicator::broadcast(const ops::Tensor& buffer, int root, Duration timeout) {
  ibroadcast(buffer, root)->wait(resolve(timeout));
}

void Communicator::barrier(Duration timeout) { ibarrier()->wait(resolve(timeout)); }

namespace {

template <typename T>
T allreduce_scalar(Communicator& comm, T value, ReduceOp op, Communicator::Duration timeout) {
  const ops::Tensor t = ops::Tensor::from_vector<T>({value}, {1}).to(comm.home());
  comm.allreduce(t, op, timeout);
  return t.to_vector<T>()[0];
}

}  // namespace

double Communicator::allreduce_sum(double value, Duration timeout) {
  return allreduce_scalar(*this, value, ReduceOp::kSum, timeout);
}

std::int64_t Communicator::allreduce_sum(std::int64_t value, Duration timeout) {
  return allreduce_scalar(*this, value, ReduceOp::kSum, timeout);
}

std::int64_t Communicator::allreduce_max(std::int64_t value, Duration timeout) {
  return allreduce_scalar(*this, value, ReduceOp::kMax, timeout);
}

}  // namespace hdp::mesh
