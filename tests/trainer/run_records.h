// File: tests/trainer/run_records.h
//
// What the trainer's cluster tests read back from a run: rank 0's metrics file (every executed
// step's exact loss, world size and data position after it) and the newest checkpoint's three
// buffers, whole (the tiny model's layout).
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "checkpoint/group.h"
#include "checkpoint/restorer.h"
#include "checkpoint/state.h"
#include "trainer/trainer_config.h"
#include "trainer/training_setup.h"

namespace hdp::test {

struct StepLine {
  std::int64_t step = 0;
  double loss = 0;
  int world = 0;
  checkpoint::DataPosition data;  // after the step
  std::int64_t time_ms = 0;       // when rank 0 wrote the line (Unix milliseconds)
};

inline std::vector<StepLine> read_metrics(const std::filesystem::path& path) {
  std::vector<StepLine> lines;
  std::ifstream in(path);
  for (std::string text; std::getline(in, text);) {
    const auto j = nlohmann::json::parse(text);
    lines.push_back({j.at("step").get<std::int64_t>(), j.at("loss").get<double>(), j.at("world_size").get<int>(),
                     {j.at("data_epoch").get<std::uint64_t>(), j.at("data_sample").get<std::uint64_t>()},
                     j.at("time_ms").get<std::int64_t>()});
  }
  return lines;
}

struct Final {
  std::int64_t step = 0;
  std::vector<float> params, m, v;
};

// The newest valid checkpoint under `root` (a --checkpoint-dir of the tiny model), whole.
inline Final read_final(const std::filesystem::path& root) {
  trainer::TrainerConfig config;
  config.model = trainer::model_preset("tiny");
  const checkpoint::FlatLayout layout = trainer::checkpoint_layout(config.model);
  Final f;
  f.params.resize(static_cast<std::size_t>(layout.total()));
  f.m.resize(f.params.size());
  f.v.resize(f.params.size());
  checkpoint::CheckpointOptions options;
  options.root = root;
  options.model_config = config.model_json();
  checkpoint::SoloGroup solo;
  const checkpoint::ShardTarget target{{0, layout.total()}, {std::span(f.params), std::span(f.m), std::span(f.v)}};
  const auto progress = checkpoint::restore_latest(options, layout, solo, target);
  EXPECT_TRUE(progress.has_value()) << "no checkpoint under " << root;
  if (progress) f.step = progress->step;
  return f;
}

}  // namespace hdp::test
