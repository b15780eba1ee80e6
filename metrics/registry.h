// File: metrics/registry.h
//
// Metrics in Prometheus' data model, rendered in its text exposition format (version 0.0.4):
// counters, gauges and histograms, each a family with a name, a help text and samples told apart
// by labels. Names follow Prometheus' conventions: base units in the name (`_seconds`, `_bytes`),
// counters end in `_total`.
//
// A worker keeps its own Registry and hands it to its agent as JSON (to_json/from_json, through
// the file named by HDP_AGENT_METRICS_FILE, elastic/worker_env.h); the agent merges every worker's into
// its own, adding the worker's labels, and serves the text on /metrics. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hdp::metrics {

// Label name -> value, kept sorted so that one set of labels is one sample.
using Labels = std::map<std::string, std::string>;

enum class Type { kCounter, kGauge, kHistogram };

// Bucket upper bounds for durations: 1 ms to 100 s, roughly x2.5 apart.
std::vector<double> seconds_buckets();

struct HistogramValue {
  std::vector<double> bounds;         // ascending upper bounds; +Inf is implicit
  std::vector<std::uint64_t> counts;  // per bucket (not cumulative), bounds.size() + 1 with +Inf
  double sum = 0;
  std::uint64_t count = 0;
};

class Registry {
 public:
  Registry() = default;
  Registry(const Registry& other);
  Registry& operator=(const Registry& other);

  // Declares a family. Throws InvalidArgument for a name or label that Prometheus does not
  // accept, a counter whose name does not end in _total, or a redeclaration of another type.
  // `buckets` (histograms only; empty: seconds_buckets()) must be ascending and finite.
  void describe(const std::string& name, Type type, const std::string& help, std::vector<double> buckets = {});

  // The family must have been described with the matching type (InvalidArgument otherwise).
  void set_gauge(const std::string& name, const Labels& labels, double value);
  void add_counter(const std::string& name, const Labels& labels, double delta);  // delta >= 0
  void observe(const std::string& name, const Labels& labels, double value);

  // Removes every sample whose labels include all of `match` (a worker that exited).
  void remove_samples(const Labels& match);
  // Removes every sample of the family `name`, which stays described (a gauge that no longer applies).
  void clear_family(const std::string& name);

  // The exposition text: families in name order, `# HELP` and `# TYPE` once each.
  std::string text() const;

  // Serialises every family and sample; from_json() reads it back and throws InvalidArgument
  // naming what is wrong with a document it cannot use (the file is another process's).
  std::string to_json() const;
  static Registry from_json(std::string_view json);

  // Adds `other`'s families and samples, each sample with `extra` labels added (which replace
  // labels of the same name). A family described in both with different types is an error.
  void merge(const Registry& other, const Labels& extra);

  // The value of a gauge or counter sample, or a histogram's count; -1 when absent (tests).
  double value(const std::string& name, const Labels& labels) const;

 private:
  struct Family {
    Type type = Type::kGauge;
    std::string help;
    std::vector<double> buckets;
    std::map<Labels, double> values;             // counters and gauges
    std::map<Labels, HistogramValue> histograms;  // histograms
  };
  Family& family(const std::string& name, Type type);

  mutable std::mutex mutex_;
  std::map<std::string, Family> families_;
};

// Prometheus' rules for metric and label names; label names beginning with "__" are reserved.
bool valid_metric_name(std::string_view name);
bool valid_label_name(std::string_view name);

}  // namespace hdp::metrics
