#include "ops/add.h"

#include "kernels/cpu/blas.h"
#include "kernels/cuda/blas.h"
#include "ops/check.h"
#include "ops/dispatch.h"

namespace hdp::ops {

void add_(const Tensor& dst, const Tensor& src) {
  detail::expect_compute("add_", "dst", dst);
  detail::expect_args("add_", dst, {{"src", src, dst.shape()}});
  detail::dispatch(
      dst,
      [&](auto tag) {
        using T = decltype(tag);
        kernels::cpu::axpy<T>(dst.numel(), T(1), src.data<T>(), dst.data<T>());
      },
      [&](auto stream) {
        kernels::cuda::axpy(dst.numel(), 1.0f, src.data<float>(), dst.data<float>(), stream);
      });
}

}  // namespace hdp::ops
