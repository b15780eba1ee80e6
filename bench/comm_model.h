// File: bench/comm_model.h
//
// bench_comm's rows that run the model's data plane (bench/comm.cc has the collectives' rows):
//  - ring attention: one micro-batch of one sequence sharded over D ranks (tokens_per_rank each),
//    forward + backward of a one-layer model whose attention is mesh::RingAttention, over Gloo
//    and again with the transfers done in memory (a mailbox between the rank threads: the same
//    compute, and the same waiting for a neighbour that computes late, with free transfers). The
//    communication the compute did not hide is exposed = wait(Gloo) - wait(in memory), against
//    the same transfers alone (the ring's K/V and dK/dV hops with no compute): hidden = 1 -
//    exposed / transfers alone;
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
