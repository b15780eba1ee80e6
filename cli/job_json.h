// File: cli/job_json.h
//
// A job's snapshot (elastic/job_state.h) as JSON: what `hdp status --json` prints and what the
// dashboard's /api/job serves. Fields: job, generation, generation_status, world_size, leader,
// store ({primary: "host:port", failovers: N} as the agents recorded them; null before any record),
// state (the hash; numbers as JSON numbers, `speeds` an array), members (each with `lease`: whether
// its lease is alive), evictions (with `active` while the cool-down runs), events (newest last) and
// samples (the per-step history, oldest first; empty unless the snapshot read it); goodput (the
// job's ETTR now, elastic/goodput.h: {ettr, productive_s, wall_s, lost_s, recomputed_steps,
// recomputed_s, text}; null before the first step accounted) and recoveries (the last
// kRecoveriesShown, oldest first: {kind, seconds, lost_steps, step, generation, time_ms}).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "elastic/job_state.h"

namespace hdp::cli {

inline constexpr std::size_t kRecoveriesShown = 5;

// `recoveries`: as read from more events than the snapshot keeps (null: from its events).
nlohmann::json job_json(const std::string& job, const elastic::JobSnapshot& snapshot,
                        const std::vector<elastic::RecoveryRecord>* recoveries = nullptr);

}  // namespace hdp::cli
