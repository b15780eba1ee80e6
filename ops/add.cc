#include "ops/add.h"

#include "hdp/config.h"
#include "kernels/cpu/blas.h"
#include "ops/check.h"
#include "ops/dispatch.h"
#if HDP_HAVE_CUDA
#include "kernels/cuda/blas.h"
#endif

namespace hdp::ops {

void add_(const Tensor& dst, const Tensor& src) {
  detail::expect_compute("add_", "dst", dst);
  detail::expect_args("add_", dst, {{"src", src, dst.shape()}});
  if (dst.device() == Device::kCuda) {
#if HDP_HAVE_CUDA
    kernels::cuda::axpy(dst.numel(), 1.0f, src.data<float>(), dst.data<float>());
#endif
    return;
  }
  detail::dispatch_cpu(dst, [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::axpy<T>(dst.numel(), T(1), src.data<T>(), dst.data<T>());
  });
}

}  // namespace hdp::ops
