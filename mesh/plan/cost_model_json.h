// File: mesh/plan/cost_model_json.h
//
// The cost model as a small JSON file, the form the trainer reads (and `hdp plan --cost-model`):
//
//   {"format": "hdp-cost-model", "version": 1, "name": "gpu-7b",
//    "alpha_ms": 5.128e-06, "beta_ms": 0.1839576, "gamma_ms": 629.36,
//    "ring_bytes_per_token": 393216, "link_gbps": 20,
//    "offload": {"layers": 32, "act_bytes_per_token": 139264, "act_bytes_fixed": 0,
//                "d2h_gbps": 25, "h2d_gbps": 25},       <- "offload" is optional
//    "calibration": {...}}                              <- optional, see below
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "mesh/plan/cost_model.h"

namespace hdp::mesh {

nlohmann::json cost_model_to_json(const CostModel& model);
// Throws InvalidArgument naming a missing or mistyped field, a wrong format or version, or a
// coefficient CostModel::validate rejects.
CostModel cost_model_from_json(const nlohmann::json& json);

// Reads a file written by save_cost_model; throws InvalidArgument naming the path on any problem.
CostModel load_cost_model(const std::string& path);
// Writes to a temporary file beside `path` and renames it, so a reader never sees half a file.
// `calibration`, when not null, is stored as the field "calibration": how and where the coefficients
// were measured (mesh/plan/calibration.h), for people and tools; load_cost_model does not read it.
// Throws InvalidArgument naming the path when it cannot be written.
void save_cost_model(const CostModel& model, const std::string& path, const nlohmann::json& calibration = nullptr);

}  // namespace hdp::mesh
