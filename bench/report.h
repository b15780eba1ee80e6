// File: bench/report.h
//
// Result rows shared by the benchmarks that report one figure per row beside a baseline measured
// in the same run (bench_comm; ring attention and the distributed step can add theirs): a table
// for people, or with --json one JSON array of {name, ranks, value, unit, baseline}, where
// baseline is {name, value} or null.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace hdp::bench {

struct Baseline {
  std::string name;
  double value = 0;
};

struct Row {
  std::string name;
  int ranks = 1;
  double value = 0;
  std::string unit;
  std::optional<Baseline> baseline;
};

class Report {
 public:
  void add(Row row) { rows_.push_back(std::move(row)); }
  const std::vector<Row>& rows() const { return rows_; }
  // A table (name, ranks, value, unit, baseline, value/baseline), or the JSON array.
  void print(std::ostream& out, bool json) const;

 private:
  std::vector<Row> rows_;
};

}  // namespace hdp::bench
