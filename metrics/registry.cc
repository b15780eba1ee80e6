#include "metrics/registry.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/text.h"

namespace hdp::metrics {
namespace {

using nlohmann::json;

const char* type_name(Type type) {
  switch (type) {
    case Type::kCounter: return "counter";
    case Type::kGauge: return "gauge";
    case Type::kHistogram: return "histogram";
  }
  return "untyped";
}

Type parse_type(const std::string& text) {
  if (text == "counter") return Type::kCounter;
  if (text == "gauge") return Type::kGauge;
  if (text == "histogram") return Type::kHistogram;
  throw InvalidArgument("metrics: unknown type " + quote_value(text));
}

// The shortest text that reads back as the same double; Prometheus' spellings of the specials.
std::string number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, ec == std::errc() ? end : buffer);
}

// Label values escape backslash, double quote and newline; help texts backslash and newline.
std::string escape(std::string_view text, bool quote) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

std::string label_text(const Labels& labels, const char* extra_name = nullptr, const std::string& extra_value = {}) {
  if (labels.empty() && !extra_name) return {};
  std::string out = "{";
  bool first = true;
  for (const auto& [name, value] : labels) {
    out += (first ? "" : ",") + name + "=\"" + escape(value, true) + "\"";
    first = false;
  }
  if (extra_name) out += std::string(first ? "" : ",") + extra_name + "=\"" + extra_value + "\"";
  return out + "}";
}

// JSON has no NaN or infinities (nlohmann writes them as null): they travel as Prometheus spells
// them, "NaN", "+Inf", "-Inf".
json encode_number(double value) { return std::isfinite(value) ? json(value) : json(number(value)); }

double decode_number(const json& value) {
  if (value.is_number()) return value.get<double>();
  if (value.is_string()) {
    const auto text = value.get<std::string>();
    if (text == "NaN") return std::numeric_limits<double>::quiet_NaN();
    if (text == "+Inf") return std::numeric_limits<double>::infinity();
    if (text == "-Inf") return -std::numeric_limits<double>::infinity();
  }
  throw InvalidArgument("metrics: " + quote_value(value.dump()) + " is not a number");
}

void check_labels(const std::string& metric, const Labels& labels) {
  for (const auto& [name, value] : labels) {
    if (!valid_label_name(name) || name == "le") {
      throw InvalidArgument("metrics: " + metric + ": invalid label name " + quote_value(name));
    }
    if (!is_valid_utf8(value)) throw InvalidArgument("metrics: " + metric + ": label " + name + " is not UTF-8");
  }
}

void check_buckets(const std::string& name, const std::vector<double>& buckets) {
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    if (!std::isfinite(buckets[i]) || (i > 0 && buckets[i] <= buckets[i - 1])) {
      throw InvalidArgument("metrics: " + name + ": bucket bounds must be finite and ascending");
    }
  }
}

}  // namespace

std::vector<double> seconds_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100};
}

bool valid_metric_name(std::string_view name) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

bool valid_label_name(std::string_view name) {
  if (name.empty() || name.substr(0, 2) == "__") return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

Registry::Registry(const Registry& other) {
  std::lock_guard lock(other.mutex_);
  families_ = other.families_;
}

Registry& Registry::operator=(const Registry& other) {
  if (this == &other) return *this;
  std::map<std::string, Family> copy;
  {
    std::lock_guard lock(other.mutex_);
    copy = other.families_;
  }
  std::lock_guard lock(mutex_);
  families_ = std::move(copy);
  return *this;
}

void Registry::describe(const std::string& name, Type type, const std::string& help, std::vector<double> buckets) {
  if (!valid_metric_name(name)) throw InvalidArgument("metrics: invalid metric name " + quote_value(name));
  if (type == Type::kCounter && (name.size() < 6 || name.substr(name.size() - 6) != "_total")) {
    throw InvalidArgument("metrics: counter " + name + " must end in _total");
  }
  if (type == Type::kHistogram) {
    if (buckets.empty()) buckets = seconds_buckets();
    check_buckets(name, buckets);
  } else {
    buckets.clear();
  }
  std::lock_guard lock(mutex_);
  auto [it, inserted] = families_.try_emplace(name);
  if (!inserted && it->second.type != type) {
    throw InvalidArgument("metrics: " + name + " is already a " + type_name(it->second.type));
  }
  it->second.type = type;
  it->second.help = help;
  if (inserted) it->second.buckets = std::move(buckets);
}

Registry::Family& Registry::family(const std::string& name, Type type) {
  auto it = families_.find(name);
  if (it == families_.end()) throw InvalidArgument("metrics: " + name + " was not described");
  if (it->second.type != type) {
    throw InvalidArgument("metrics: " + name + " is a " + type_name(it->second.type) + ", not a " + type_name(type));
  }
  return it->second;
}

void Registry::set_gauge(const std::string& name, const Labels& labels, double value) {
  check_labels(name, labels);
  std::lock_guard lock(mutex_);
  family(name, Type::kGauge).values[labels] = value;
}

void Registry::add_counter(const std::string& name, const Labels& labels, double delta) {
  if (!(delta >= 0)) throw InvalidArgument("metrics: counter " + name + " cannot go down");
  check_labels(name, labels);
  std::lock_guard lock(mutex_);
  family(name, Type::kCounter).values[labels] += delta;
}

void Registry::observe(const std::string& name, const Labels& labels, double value) {
  check_labels(name, labels);
  std::lock_guard lock(mutex_);
  Family& f = family(name, Type::kHistogram);
  auto [it, inserted] = f.histograms.try_emplace(labels);
  HistogramValue& h = it->second;
  if (inserted) {
    h.bounds = f.buckets;
    h.counts.assign(f.buckets.size() + 1, 0);
  }
  // NaN belongs to no finite bucket: only to +Inf (as Prometheus' own clients count it).
  const auto bucket = std::isnan(value) ? static_cast<std::ptrdiff_t>(h.bounds.size())
                                        : std::lower_bound(h.bounds.begin(), h.bounds.end(), value) - h.bounds.begin();
  ++h.counts[static_cast<std::size_t>(bucket)];
  h.sum += value;
  ++h.count;
}

void Registry::remove_samples(const Labels& match) {
  auto matches = [&](const Labels& labels) {
    return std::all_of(match.begin(), match.end(), [&](const auto& kv) {
      auto it = labels.find(kv.first);
      return it != labels.end() && it->second == kv.second;
    });
  };
  std::lock_guard lock(mutex_);
  for (auto& [name, f] : families_) {
    std::erase_if(f.values, [&](const auto& kv) { return matches(kv.first); });
    std::erase_if(f.histograms, [&](const auto& kv) { return matches(kv.first); });
  }
}

void Registry::clear_family(const std::string& name) {
  std::lock_guard lock(mutex_);
  auto it = families_.find(name);
  if (it == families_.end()) return;
  it->second.values.clear();
  it->second.histograms.clear();
}

std::string Registry::text() const {
  std::lock_guard lock(mutex_);
  std::string out;
  for (const auto& [name, f] : families_) {
    out += "# HELP " + name + " " + escape(f.help, false) + "\n";
    out += "# TYPE " + name + " " + type_name(f.type) + "\n";
    for (const auto& [labels, value] : f.values) out += name + label_text(labels) + " " + number(value) + "\n";
    for (const auto& [labels, h] : f.histograms) {
      std::uint64_t cumulative = 0;
      for (std::size_t i = 0; i < h.counts.size(); ++i) {
        cumulative += h.counts[i];
        const std::string le = i < h.bounds.size() ? number(h.bounds[i]) : "+Inf";
        out += name + "_bucket" + label_text(labels, "le", le) + " " + std::to_string(cumulative) + "\n";
      }
      out += name + "_sum" + label_text(labels) + " " + number(h.sum) + "\n";
      out += name + "_count" + label_text(labels) + " " + std::to_string(h.count) + "\n";
    }
  }
  return out;
}

std::string Registry::to_json() const {
  std::lock_guard lock(mutex_);
  json families = json::object();
  for (const auto& [name, f] : families_) {
    json samples = json::array();
    for (const auto& [labels, value] : f.values) samples.push_back({{"labels", labels}, {"value", encode_number(value)}});
    for (const auto& [labels, h] : f.histograms) {
      samples.push_back({{"labels", labels}, {"counts", h.counts}, {"sum", encode_number(h.sum)}, {"count", h.count}});
    }
    families[name] = {{"type", type_name(f.type)}, {"help", f.help}, {"buckets", f.buckets}, {"samples", samples}};
  }
  return families.dump(-1, ' ', false, json::error_handler_t::replace);
}

Registry Registry::from_json(std::string_view text) {
  Registry registry;
  try {
    const json doc = json::parse(text);
    if (!doc.is_object()) throw InvalidArgument("metrics: not a JSON object");
    for (const auto& [name, f] : doc.items()) {
      const Type type = parse_type(f.at("type").get<std::string>());
      std::vector<double> buckets = f.at("buckets").get<std::vector<double>>();
      if (type == Type::kHistogram && buckets.empty()) throw InvalidArgument("metrics: " + name + " has no buckets");
      registry.describe(name, type, f.at("help").get<std::string>(), buckets);
      Family& family = registry.families_.at(name);
      for (const auto& sample : f.at("samples")) {
        const Labels labels = sample.at("labels").get<Labels>();
        check_labels(name, labels);
        if (type == Type::kHistogram) {
          HistogramValue h;
          h.bounds = family.buckets;
          h.counts = sample.at("counts").get<std::vector<std::uint64_t>>();
          h.sum = decode_number(sample.at("sum"));
          h.count = sample.at("count").get<std::uint64_t>();
          std::uint64_t total = 0;
          for (auto c : h.counts) total += c;
          if (h.counts.size() != h.bounds.size() + 1 || total != h.count) {
            throw InvalidArgument("metrics: " + name + ": bucket counts do not match the buckets or the count");
          }
          family.histograms[labels] = std::move(h);
        } else {
          const double value = decode_number(sample.at("value"));
          if (type == Type::kCounter && !(value >= 0)) throw InvalidArgument("metrics: counter " + name + " is negative");
          family.values[labels] = value;
        }
      }
    }
  } catch (const json::exception& e) {
    throw InvalidArgument(std::string("metrics: cannot read the document: ") + e.what());
  }
  return registry;
}

void Registry::merge(const Registry& other, const Labels& extra) {
  const Registry copy(other);  // other's lock is not held while this one is
  std::lock_guard lock(mutex_);
  for (const auto& [name, f] : copy.families_) {
    auto [it, inserted] = families_.try_emplace(name);
    Family& mine = it->second;
    if (inserted) {
      mine.type = f.type;
      mine.help = f.help;
      mine.buckets = f.buckets;
    } else if (mine.type != f.type) {
      throw InvalidArgument("metrics: " + name + " is a " + type_name(mine.type) + " here and a " + type_name(f.type) +
                            " in the merged registry");
    }
    auto with_extra = [&](Labels labels) {
      for (const auto& [k, v] : extra) labels[k] = v;
      return labels;
    };
    for (const auto& [labels, value] : f.values) mine.values[with_extra(labels)] = value;
    for (const auto& [labels, h] : f.histograms) mine.histograms[with_extra(labels)] = h;
  }
}

double Registry::value(const std::string& name, const Labels& labels) const {
  std::lock_guard lock(mutex_);
  auto it = families_.find(name);
  if (it == families_.end()) return -1;
  if (auto v = it->second.values.find(labels); v != it->second.values.end()) return v->second;
  if (auto h = it->second.histograms.find(labels); h != it->second.histograms.end()) return static_cast<double>(h->second.count);
  return -1;
}

}  // namespace hdp::metrics
