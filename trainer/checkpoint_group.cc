#include "trainer/checkpoint_group.h"

#include "ops/tensor.h"

namespace hdp::trainer {

void CommunicatorGroup::barrier() { comm_.barrier(timeout_); }

bool CommunicatorGroup::all_true(bool local) {
  const ops::Tensor vote = ops::Tensor::from_vector<std::int32_t>({local ? 1 : 0}, {1});
  comm_.allreduce(vote, mesh::ReduceOp::kMin, timeout_);
  return vote.data<std::int32_t>()[0] == 1;
}

}  // namespace hdp::trainer
