#include "bench/report.h"

#include <cstdio>

#include <nlohmann/json.hpp>

namespace hdp::bench {

void Report::print(std::ostream& out, bool json) const {
  if (json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const Row& r : rows_) {
      nlohmann::json baseline = nullptr;
      if (r.baseline) baseline = {{"name", r.baseline->name}, {"value", r.baseline->value}};
      rows.push_back({{"name", r.name}, {"ranks", r.ranks}, {"value", r.value}, {"unit", r.unit}, {"baseline", baseline}});
    }
    out << rows.dump(1) << "\n";
    return;
  }
  char line[512];
  std::snprintf(line, sizeof line, "%-34s %5s %10s %-6s  %-34s %10s %7s\n", "name", "ranks", "value", "unit", "baseline",
                "value", "ratio");
  out << line;
  for (const Row& r : rows_) {
    if (r.baseline) {
      std::snprintf(line, sizeof line, "%-34s %5d %10.3f %-6s  %-34s %10.3f %7.3f\n", r.name.c_str(), r.ranks, r.value,
                    r.unit.c_str(), r.baseline->name.c_str(), r.baseline->value,
                    r.baseline->value != 0 ? r.value / r.baseline->value : 0.0);
    } else {
      std::snprintf(line, sizeof line, "%-34s %5d %10.3f %-6s\n", r.name.c_str(), r.ranks, r.value, r.unit.c_str());
    }
    out << line;
  }
}

}  // namespace hdp::bench
