#include "trainer/checkpoint_group.h"

#include "ops/tensor.h"

namespace hdp::trainer {

// An allreduce of one element, not the communicator's dissemination barrier: the saver's channel
// connects on first use (mesh::Connect::kOnFirstUse), and an allreduce needs only the ring
// neighbours, where the dissemination barrier would connect log2(N) more peers per rank, each a
// record read from the store. A save's barrier is not on the step's critical path.
void CommunicatorGroup::barrier() {
  const ops::Tensor token = ops::Tensor::from_vector<std::int32_t>({1}, {1}).to(comm_.home());
  comm_.allreduce(token, mesh::ReduceOp::kSum, timeout_);
}

bool CommunicatorGroup::all_true(bool local) {
  const ops::Tensor vote = ops::Tensor::from_vector<std::int32_t>({local ? 1 : 0}, {1}).to(comm_.home());
  comm_.allreduce(vote, mesh::ReduceOp::kMin, timeout_);
  return vote.to_vector<std::int32_t>()[0] == 1;
}

}  // namespace hdp::trainer
