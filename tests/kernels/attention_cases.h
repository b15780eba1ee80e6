// File: tests/kernels/attention_cases.h
//
// The attention layouts the CUDA kernels are checked on against the CPU: packed sequences with GQA
// (one of length 1), a causal query block at an offset key block (a ring step), and a non-causal
// block. head_dim is the caller's (the fp32 kernel takes any up to 256, the tensor-core one 64/128).
#pragma once

#include <cstdint>
#include <vector>

#include "ops/attention.h"

namespace hdp::ops::testing {

struct AttentionCase {
  const char* name;
  AttentionSpec spec;
  int64_t tq, tk;
  int heads, kv_heads, head_dim;
};

inline std::vector<AttentionCase> ring_attention_cases(int packed_head_dim, int block_head_dim, int full_head_dim) {
  return {{"packed gqa", AttentionSpec::packed({0, 100, 101, 230}), 230, 230, 8, 2, packed_head_dim},
          {"offset block", AttentionSpec::block(70, 200, 90, 150, true), 70, 90, 4, 4, block_head_dim},
          {"full block", AttentionSpec::block(40, 0, 50, 900, false), 40, 50, 4, 1, full_head_dim}};
}

}  // namespace hdp::ops::testing
