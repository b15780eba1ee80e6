// File: cli/plan_calibration.h
//
// `hdp plan --calibrate`: fits the cost model on this machine by timing the real model
// (mesh/plan/calibration.h), prints the coefficients and the fit's residuals, and writes the cost model
// file the trainer and `hdp plan --cost-model` read (docs/scheduler.md, "Calibration").
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "mesh/plan/calibration.h"

namespace hdp::cli {

struct CalibrateOptions {
  bool calibrate = false;
  std::string out;  // the cost model file to write; empty: print only
  std::string clock = "wall";
  mesh::CalibrationOptions calibration;  // its clock is set from `clock`
};

// Adds --calibrate, --out, the model's shape (--d-model, --layers, --heads, --kv-heads, --ffn-dim,
// --vocab) and the timing (--repeats, --threads, --clock) to `command`; all but --calibrate need it.
// Returns the --calibrate flag, for the options it excludes.
CLI::Option* add_calibrate_options(CLI::App& command, CalibrateOptions& o);

// Calibrates with `o.calibration` (the caller sets its capacity and link from the plan's options),
// prints the result and writes `o.out` when set. Returns the fitted cost model. Blocks while the
// model is timed.
mesh::CostModel run_calibration(const CalibrateOptions& o);

}  // namespace hdp::cli
