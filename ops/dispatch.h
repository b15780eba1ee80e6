// File: ops/dispatch.h
//
// The one place an op's kernel is chosen by device and dtype. An op passes both branches:
//   detail::dispatch(x,
//       [&](auto tag) { using T = decltype(tag); kernels::cpu::f<T>(x.data<T>(), ...); },  // CPU, f32 or f64
//       [&](auto stream) { kernels::cuda::f(x.data<float>(), ..., stream); });            // CUDA, f32
// The CUDA branch gets the thread's current stream (ops/current_stream.h). It is a generic lambda,
// so a build without CUDA never instantiates it and needs no kernels/cuda definitions (their
// headers are plain C++); no op writes `#if HDP_HAVE_CUDA`.
#pragma once

#include <utility>

#include "common/error.h"
#include "hdp/config.h"
#include "ops/current_stream.h"
#include "ops/tensor.h"

namespace hdp::ops::detail {

template <typename F>
decltype(auto) dispatch_cpu(const Tensor& x, F&& f) {
  if (x.dtype() == DType::kF64) return f(double{});
  if (x.dtype() == DType::kF32) return f(float{});
  throw InvariantViolation("dispatch_cpu: " + x.describe() + " passed the op's checks but is not f32/f64");
}

template <typename Cpu, typename Cuda>
decltype(auto) dispatch(const Tensor& x, Cpu&& cpu, Cuda&& cuda) {
  if (x.device() == Device::kCuda) {
    if constexpr (HDP_HAVE_CUDA == 1) {
      return std::forward<Cuda>(cuda)(current_stream());
    } else {
      // Unreachable: Tensor::empty refuses kCuda in a build without CUDA.
      throw InvariantViolation("dispatch: " + x.describe() + " in a build without CUDA");
    }
  }
  return dispatch_cpu(x, std::forward<Cpu>(cpu));
}

// The device alone (ops whose CPU branch handles its dtypes itself, such as ops/convert.h's):
// cpu() or cuda(stream), the CUDA branch a generic lambda as above.
template <typename Cpu, typename Cuda>
decltype(auto) dispatch_device(const Tensor& x, Cpu&& cpu, Cuda&& cuda) {
  if (x.device() == Device::kCuda) {
    if constexpr (HDP_HAVE_CUDA == 1) {
      return std::forward<Cuda>(cuda)(current_stream());
    } else {
      throw InvariantViolation("dispatch_device: " + x.describe() + " in a build without CUDA");
    }
  }
  return std::forward<Cpu>(cpu)();
}

}  // namespace hdp::ops::detail
