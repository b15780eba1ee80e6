#include "common/median.h"

#include <algorithm>

#include "common/error.h"

namespace hdp {

double median(std::vector<double> values) {
  HDP_CHECK(!values.empty(), "the median of no values");
  const std::size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  if (values.size() % 2 == 1) return values[mid];
  const double upper = values[mid];
  const double lower = *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}

}  // namespace hdp
