#include "mesh/plan/length_distribution.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "common/error.h"

namespace hdp::mesh {
namespace {

// A uniform double in [0, 1) from the top 53 bits of one draw.
double uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// Fitted in docs/scheduler.md. Byted at 2M context: 78.9% of samples <= 4K; samples >= 128K hold
// 44.3% of the tokens, >= 256K 37.0%, the 0.05% at 2M 12.1%.
LengthDistribution byted() {
  return LengthDistribution("byted", {{16, 4096, 0.78916},
                                      {4096, 32768, 0.1795},
                                      {32768, 131072, 0.02505},
                                      {131072, 262144, 0.003345},
                                      {262144, 2097152, 0.002445},
                                      {2097152, 2097152, 0.0005}});
}

// GitHub at 2M context: 16.4% of the tokens in sequences > 128K, 9.9% in > 256K. The shape below
// 128K is not published; 85% of samples <= 4K and a mean near 6K tokens are assumptions.
LengthDistribution github() {
  return LengthDistribution("github", {{16, 4096, 0.850034},
                                       {4096, 32768, 0.1073},
                                       {32768, 131072, 0.03997},
                                       {131072, 262144, 0.00203},
                                       {262144, 2097152, 0.000666}});
}

LengthDistribution from_file(const std::string& path) {
  std::map<std::int64_t, double> counts;
  for (std::int64_t s : read_lengths(path)) {
    if (s > 0) counts[s] += 1;
  }
  if (counts.empty()) throw InvalidArgument("lengths file '" + path + "' holds no length >= 1");
  std::vector<LengthBin> bins;
  for (const auto& [length, count] : counts) bins.push_back({length, length, count});
  return LengthDistribution("file:" + path, std::move(bins));
}

}  // namespace

LengthDistribution::LengthDistribution(std::string name, std::vector<LengthBin> bins)
    : name_(std::move(name)), bins_(std::move(bins)) {
  if (bins_.empty()) throw InvalidArgument("length distribution '" + name_ + "' has no bins");
  double total = 0;
  for (std::size_t i = 0; i < bins_.size(); ++i) {
    const LengthBin& bin = bins_[i];
    if (bin.lo < 1 || bin.hi < bin.lo || !std::isfinite(bin.weight) || bin.weight <= 0) {
      throw InvalidArgument("length distribution '" + name_ + "': bin " + std::to_string(i) +
                            " needs 1 <= lo <= hi and a finite weight > 0");
    }
    total += bin.weight;
    cumulative_.push_back(total);
  }
  for (double& c : cumulative_) c /= total;
}

std::int64_t LengthDistribution::sample(std::mt19937_64& rng, std::int64_t context) const {
  const double pick = uniform(rng);
  const auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), pick);
  // pick < 1 = the last cumulative value, so `it` is a real bin unless rounding left the sum short.
  const auto index = std::min<std::size_t>(static_cast<std::size_t>(it - cumulative_.begin()), bins_.size() - 1);
  const LengthBin& bin = bins_[index];
  std::int64_t length = bin.lo;
  if (bin.hi > bin.lo) {
    const double lo = static_cast<double>(bin.lo);
    const double x = lo * std::exp(uniform(rng) * std::log(static_cast<double>(bin.hi) / lo));
    length = std::clamp(static_cast<std::int64_t>(std::llround(x)), bin.lo, bin.hi);
  }
  return std::min(length, context);
}

LengthDistribution named_distribution(std::string_view spec) {
  if (spec == "byted") return byted();
  if (spec == "github") return github();
  if (spec.starts_with("file:")) return from_file(std::string(spec.substr(5)));
  throw InvalidArgument("unknown length distribution '" + std::string(spec) +
                        "' (expected github, byted or file:PATH)");
}

std::vector<std::int64_t> read_lengths(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InvalidArgument("cannot read lengths file '" + path + "'");
  std::vector<std::int64_t> lengths;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string word;
    while (words >> word) {
      std::size_t used = 0;
      long long value = -1;
      try {
        value = std::stoll(word, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != word.size() || value < 0) {
        throw InvalidArgument("lengths file '" + path + "' line " + std::to_string(number) + ": '" + word +
                              "' is not a length (an integer >= 0)");
      }
      lengths.push_back(value);
    }
  }
  if (lengths.empty()) throw InvalidArgument("lengths file '" + path + "' holds no length");
  return lengths;
}

std::vector<std::int64_t> draw_batch(const LengthDistribution& distribution, std::int64_t context,
                                     std::int64_t tokens, std::uint64_t seed) {
  if (tokens < 1) throw InvalidArgument("batch tokens must be >= 1, got " + std::to_string(tokens));
  if (context < 1) throw InvalidArgument("context length must be >= 1, got " + std::to_string(context));
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> lengths;
  std::int64_t total = 0;
  while (total < tokens) {
    const std::int64_t s = std::min(distribution.sample(rng, context), tokens - total);
    lengths.push_back(s);
    total += s;
  }
  return lengths;
}

}  // namespace hdp::mesh
