// File: kernels/cpu/swiglu.h
//
// The gated activation of the LLaMA MLP: h = silu(gate) * up, elementwise over n values
// (the projections around it are GEMMs).
#pragma once

#include <cstdint>

namespace hdp::kernels::cpu {

template <typename T>
void swiglu_forward(const T* gate, const T* up, T* h, int64_t n);

// Adds into dgate and dup.
template <typename T>
void swiglu_backward(const T* gate, const T* up, const T* dh, T* dgate, T* dup, int64_t n);

}  // namespace hdp::kernels::cpu
