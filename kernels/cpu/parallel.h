// File: kernels/cpu/parallel.h
//
// When a CPU loop is worth an OpenMP team: below kParallelMinWork elements (or multiply-adds) the
// fork/join and the workers' spin-wait cost more than the loop, and on a loaded machine a spinning
// worker steals the core the serial code needs. Every `omp parallel` in kernels/cpu/ carries
// `if(worth_parallel(work))`.
#pragma once

#include <cstdint>

namespace hdp::kernels::cpu {

constexpr int64_t kParallelMinWork = int64_t(1) << 16;

constexpr bool worth_parallel(int64_t work) { return work >= kParallelMinWork; }

}  // namespace hdp::kernels::cpu
