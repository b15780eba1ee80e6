// File: common/warn_once.h
//
// A value read again and again (a Redis key, each heartbeat or step) that does not decode is
// logged once per distinct value, not at every read: WarnOnce remembers the last bad value.
//
// Example:
//   WarnOnce bad_settings_;
//   if (auto s = bad_settings_.decode(value, [&] { return decode_settings(value, "settings"); },
//                                     [](const auto& e) { log()->warn("keeping the settings: {}", e.what()); }))
//     settings_ = *s;
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "common/error.h"

namespace hdp {

class WarnOnce {
 public:
  // Runs `decode()`: its result, and the memory of a bad value cleared; or, when it throws
  // InvalidArgument, nullopt, after `warn(error)` if `value` is not the bad value seen last.
  template <typename Decode, typename Warn>
  auto decode(std::string_view value, Decode&& decode, Warn&& warn) -> std::optional<std::invoke_result_t<Decode>> {
    try {
      auto result = decode();
      last_bad_.reset();
      return result;
    } catch (const InvalidArgument& e) {
      if (bad(value)) warn(e);
      return std::nullopt;
    }
  }

  // Records `value` as bad: true when it differs from the bad value seen last (log it then).
  bool bad(std::string_view value) {
    if (last_bad_ == value) return false;
    last_bad_ = std::string(value);
    return true;
  }
  // A good value was read: the next bad one is logged whatever it is.
  void good() { last_bad_.reset(); }

 private:
  std::optional<std::string> last_bad_;
};

}  // namespace hdp
