// File: common/text.h
//
// Bytes that came from outside the process (a value read from Redis, a key named after one) on
// their way into a log line or an error message. Such bytes may be megabytes long, hold NUL,
// CR/LF or terminal escapes, or not be UTF-8; quote_value() is the one way they are shown.
//
// Example:
//   throw InvalidArgument("invalid value in Redis key " + quote_value(key) + ": " + quote_value(value) + " is not ...");
//   // -> invalid value in Redis key 'gen': 'ban\x00ana' is not ...
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

namespace hdp {

// How many bytes of a value quote_value() shows by default.
inline constexpr std::size_t kQuotedBytes = 200;

// `bytes` in single quotes, printable ASCII as is, `\\` and `\'` escaped, \n \r \t \0 as such, every
// other byte (control characters, DEL, anything >= 0x80) as \xNN. At most `limit` bytes of the
// input are shown; a longer input ends in "...' (N bytes)". The result is plain ASCII: always valid
// UTF-8, one line, no NUL.
std::string quote_value(std::string_view bytes, std::size_t limit = kQuotedBytes);

// True when `bytes` is well-formed UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF).
bool is_valid_utf8(std::string_view bytes);

// The items of `range` (strings, or anything `to_text` turns into one) separated by `separator`:
// join({"n1", "n2"}) is "n1,n2"; an empty range is "".
template <typename Range, typename ToText>
std::string join(const Range& range, std::string_view separator, ToText to_text) {
  std::string text;
  bool first = true;
  for (const auto& item : range) {
    if (!first) text += separator;
    first = false;
    text += to_text(item);
  }
  return text;
}

template <typename Range>
std::string join(const Range& range, std::string_view separator = ",") {
  return join(range, separator, [](const auto& item) -> decltype(auto) { return item; });
}

}  // namespace hdp
