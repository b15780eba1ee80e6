// File: common/median.h
//
// The median of a sample: the middle value, or the mean of the two middle values of an even count.
// What timings on a shared machine are summarised by (calibration, benchmarks).
#pragma once

#include <vector>

namespace hdp {

// Throws InvariantViolation for an empty sample.
double median(std::vector<double> values);

}  // namespace hdp
