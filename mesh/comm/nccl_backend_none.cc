// make_cuda_backend for a build without NCCL (HDP_HAVE_NCCL 0): NcclCommunicator's logic is still
// built and tested (through a fake backend), but there is no NCCL to run it on.
#include "common/error.h"
#include "mesh/comm/nccl_backend.h"

namespace hdp::mesh::nccl {

std::shared_ptr<Backend> make_cuda_backend(int device) {
  throw InvalidArgument("NCCL: this build of hdp has no NCCL (CUDA device " + std::to_string(device) + " asked for)");
}

std::string library_version() { return {}; }

}  // namespace hdp::mesh::nccl
