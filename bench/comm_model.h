// File: bench/comm_model.h
//
// bench_comm's rows that run the model's data plane (bench/comm.cc has the collectives' rows):
//  - ring attention: one micro-batch of one sequence sharded over D ranks (tokens_per_rank each),
//    forward + backward through mesh::RingAttention, beside the same micro-batch's compute alone
//    (the time the ranks did not spend waiting for transfers) and beside the same transfers alone
//    (the ring's K/V and dK/dV exchanges with no compute); hidden = 1 - wait / transfers alone;
//  - the distributed step (mesh::DistributedStep: plan, micro-batches, ring attention, ZeRO-1) of
//    the bench_ops model on a fixed global batch, tokens/s at each rank count beside 1 rank.
// Ranks are threads of this process with their own Gloo devices and loopback TCP connections,
// each rank with one OpenMP thread (the 1-rank step runs with as many as the machine has cores,
// so that the baseline is the whole machine's single-process throughput).
#pragma once

#include <cstdint>
#include <vector>

#include "bench/report.h"

namespace hdp::bench {

void add_ring_attention_rows(Report& report, const std::vector<int>& ranks, std::int64_t tokens_per_rank, int reps);
void add_step_rows(Report& report, const std::vector<int>& ranks, std::int64_t batch_tokens, int reps);

}  // namespace hdp::bench
