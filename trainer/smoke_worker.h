// File: trainer/smoke_worker.h
//
// `hdp train --smoke`: a stand-in for the trainer that exercises every elastic path with real
// processes. Each step every rank all-reduces a vector of int64 whose exact sum is known
// (rank r contributes (r+1)*(i+1) + step at index i), and checks it; a wrong sum is a failed job
// (exit 3). Rank 0 reports the step to the job state every `report_every` steps, fenced by its
// generation. After `steps` steps rank 0 marks the job completed and every worker exits 0.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "elastic/elastic_context.h"

namespace hdp::trainer {

struct SmokeOptions {
  std::int64_t steps = 200;
  std::chrono::milliseconds step_time{50};  // pacing, so that faults land mid-run
  std::size_t elements = 1024;
  int report_every = 10;
  std::chrono::milliseconds timeout{10000};  // rendezvous and collectives
};

enum class SmokeResult { kCompleted, kStopped, kWrongSum };

SmokeResult run_smoke_worker(elastic::ElasticContext& ctx, const SmokeOptions& options, const std::atomic<bool>& stop);

}  // namespace hdp::trainer
