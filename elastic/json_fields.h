// File: elastic/json_fields.h
//
// How the elastic layer reads the JSON values it keeps in Redis (records, leases, evictions,
// requests): every failure is an InvalidArgument that names the key (`what`) and the field.
// Internal to hdp_elastic's sources (nlohmann-json is a private dependency of the library).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/text.h"

namespace hdp::elastic::json_fields {

using nlohmann::json;

[[noreturn]] inline void bad(std::string_view what, const std::string& reason) {
  throw InvalidArgument("invalid value in Redis key " + quote_value(what) + ": " + reason);
}

inline json parse(std::string_view text, std::string_view what) {
  json value = json::parse(text.begin(), text.end(), nullptr, false);
  if (value.is_discarded() || !value.is_object()) bad(what, "not a JSON object");
  return value;
}

// True when `value` is a JSON integer within [low, high]. The parser keeps every non-negative
// integer as unsigned, so those are compared as such (one above INT64_MAX is out of range).
inline bool in_range(const json& value, std::int64_t low, std::int64_t high) {
  if (value.is_number_unsigned()) {
    const std::uint64_t number = value.get<std::uint64_t>();
    return high >= 0 && number <= static_cast<std::uint64_t>(high) &&
           (low <= 0 || number >= static_cast<std::uint64_t>(low));
  }
  if (!value.is_number_integer()) return false;
  const std::int64_t number = value.get<std::int64_t>();
  return number >= low && number <= high;
}

// Reads field `name` as T, checking presence and type.
template <typename T>
T field(const json& object, const char* name, std::string_view what) {
  auto it = object.find(name);
  if (it == object.end()) bad(what, std::string("field '") + name + "' is missing");
  if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) bad(what, std::string("field '") + name + "' is not a string");
    return it->get<std::string>();
  } else {
    static_assert(std::is_integral_v<T> && std::is_signed_v<T>);
    // Checked against T's range before it is converted: get<int>() of 4294967296 would be 0.
    if (!in_range(*it, std::numeric_limits<T>::min(), std::numeric_limits<T>::max())) {
      bad(what, std::string("field '") + name + "' is not an integer in [" +
                    std::to_string(std::numeric_limits<T>::min()) + ", " + std::to_string(std::numeric_limits<T>::max()) +
                    "]");
    }
    return static_cast<T>(it->get<std::int64_t>());
  }
}

// Reads integer field `name`, which must lie in [low, high].
inline std::int64_t bounded(const json& object, const char* name, std::string_view what, std::int64_t low, std::int64_t high) {
  auto it = object.find(name);
  if (it == object.end()) bad(what, std::string("field '") + name + "' is missing");
  if (!in_range(*it, low, high)) {
    bad(what, std::string("field '") + name + "' is not an integer in [" + std::to_string(low) + ", " +
                  std::to_string(high) + "]");
  }
  return it->get<std::int64_t>();
}

// A finite number in [low, high].
inline double real(const json& object, const char* name, std::string_view what, double low, double high) {
  auto it = object.find(name);
  if (it == object.end() || !it->is_number() || !(it->get<double>() >= low && it->get<double>() <= high)) {
    bad(what, std::string("field '") + name + "' is not a number in [" + std::to_string(low) + ", " +
                  std::to_string(high) + "]");
  }
  return it->get<double>();
}

inline bool boolean(const json& object, const char* name, std::string_view what) {
  auto it = object.find(name);
  if (it == object.end() || !it->is_boolean()) bad(what, std::string("field '") + name + "' is not true or false");
  return it->get<bool>();
}

}  // namespace hdp::elastic::json_fields
