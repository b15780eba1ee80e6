#include "ops/convert.h"

#include "kernels/cpu/bf16.h"
#include "kernels/cuda/convert.h"
#include "ops/check.h"
#include "ops/dispatch.h"

namespace hdp::ops {

void convert_into(const Tensor& src, const Tensor& dst) {
  constexpr const char* kOp = "convert_into";
  detail::expect(src.defined() && dst.defined() && src.numel() == dst.numel() && src.device() == dst.device(), kOp,
                 "cannot convert " + src.describe() + " into " + dst.describe() +
                     " (same element count and device needed)");
  if (src.dtype() == dst.dtype()) {
    dst.copy_from(src);
    return;
  }
  const bool down = src.dtype() == DType::kF32 && dst.dtype() == DType::kBF16;
  const bool up = src.dtype() == DType::kBF16 && dst.dtype() == DType::kF32;
  detail::expect(down || up, kOp, "converts between f32 and bf16 only, not " + src.describe() + " into " + dst.describe());
  const int64_t n = src.numel();
  detail::dispatch_device(
      src,
      [&] {
        if (down)
          kernels::cpu::f32_to_bf16(src.data<float>(), dst.data<uint16_t>(), n);
        else
          kernels::cpu::bf16_to_f32(src.data<uint16_t>(), dst.data<float>(), n);
      },
      [&](auto stream) {
        if (down)
          kernels::cuda::f32_to_bf16(src.data<float>(), dst.data<uint16_t>(), n, stream);
        else
          kernels::cuda::bf16_to_f32(src.data<uint16_t>(), dst.data<float>(), n, stream);
      });
}

Tensor to_dtype(const Tensor& src, DType dtype) {
  detail::expect(src.defined(), "to_dtype", "src is undefined");
  Tensor out = Tensor::empty(src.shape(), dtype, src.device());
  convert_into(src, out);
  return out;
}

}  // namespace hdp::ops
