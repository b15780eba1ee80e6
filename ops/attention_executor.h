// File: ops/attention_executor.h
//
// How LlamaModel runs each layer's attention: through an executor, so that the rows of one
// micro-batch can be whole sequences attended locally (PackedAttention, the default) or shards of
// sequences whose other keys live on other ranks (mesh/step/ring_attention.h implements that one, above
// ops/ in the layering: ops/ defines the hook, mesh/ the distributed attention).
//
// The model calls forward(layer, ...) for layers 0..n-1 in its forward pass and backward(layer, ...)
// for layers n-1..0 in its backward pass, with the rotated q and k ([T, n_heads, hd] and
// [T, n_kv_heads, hd]) of the micro-batch's T rows. An executor may communicate inside these calls;
// it must produce, for every row, the output and LSE of attention over all keys the row's token
// sees in its whole sequence, and in backward add into dq, dk and dv the gradients of this rank's
// rows (the gradients that other ranks' queries send to this rank's keys included).
#pragma once

#include <cstdint>
#include <vector>

#include "ops/attention.h"
#include "ops/tensor.h"

namespace hdp::ops {

class AttentionExecutor {
 public:
  virtual ~AttentionExecutor() = default;
  virtual AttentionOutput forward(int layer, const Tensor& q, const Tensor& k, const Tensor& v) = 0;
  // `fwd` is what forward() returned for this layer; adds into dq, dk, dv. dq is complete on
  // return; dk and dv may be completed only by finish_backward(layer), which the caller calls
  // before it reads them and before the next backward() (so an executor can leave its last
  // transfer in flight while the caller works on dq).
  virtual void backward(int layer, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOutput& fwd,
                        const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv) = 0;
  virtual void finish_backward(int /*layer*/) {}
};

// Causal attention within each packed sequence (cu_seqlens), no communication.
class PackedAttention final : public AttentionExecutor {
 public:
  explicit PackedAttention(const std::vector<int32_t>& cu_seqlens) : spec_(AttentionSpec::packed(cu_seqlens)) {}
  AttentionOutput forward(int, const Tensor& q, const Tensor& k, const Tensor& v) override {
    return attention_forward(q, k, v, spec_);
  }
  void backward(int, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOutput& fwd, const Tensor& dout,
                const Tensor& dq, const Tensor& dk, const Tensor& dv) override {
    attention_backward(q, k, v, spec_, fwd, dout, Tensor(), dq, dk, dv);
  }

 private:
  AttentionSpec spec_;
};

}  // namespace hdp::ops
