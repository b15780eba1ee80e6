// staging_memory.h for a build without CUDA (HDP_HAVE_CUDA 0): every tensor is on the CPU, a copy
// is a memcpy and nothing is page-locked.
#include "mesh/comm/staging_memory.h"

namespace hdp::mesh::staging {

bool pin(const ops::Tensor&) { return false; }

void unpin(const ops::Tensor&) noexcept {}

void to_host(const ops::Tensor& host, const ops::Tensor& src, Stream) { host.copy_from(src); }

void from_host(const ops::Tensor& dst, const ops::Tensor& host, Stream) { dst.copy_from(host); }

}  // namespace hdp::mesh::staging
