// File: cli/job_json.h
//
// A job's snapshot (elastic/job_state.h) as JSON: what `hdp status --json` prints and what the
// dashboard's /api/job serves. Fields: job, generation, generation_status, world_size, leader,
// store ({primary: "host:port", failovers: N} as the agents recorded them; null before any record),
// state (the hash; numbers as JSON numbers, `speeds` an array), members (each with `lease`: whether
// its lease is alive), evictions (with `active` while the cool-down runs), events (newest last) and
// samples (the per-step history, oldest first; empty unless the snapshot read it).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "elastic/job_state.h"

namespace hdp::cli {

nlohmann::json job_json(const std::string& job, const elastic::JobSnapshot& snapshot);

}  // namespace hdp::cli
