// File: tests/support/error_message.h
//
// What a call that must be refused says: the InvalidArgument's message, "unexpected exception:
// ..." for any other exception, "no exception" when it was not refused. For tests that check a
// refusal's words with a matcher.
#pragma once

#include <exception>
#include <string>

#include "common/error.h"

namespace hdp::test {

template <typename F>
std::string invalid_argument_message(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("unexpected exception: ") + e.what();
  }
  return "no exception";
}

}  // namespace hdp::test
