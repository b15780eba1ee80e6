#include "common/error.h"

#include <cstring>
#include <system_error>

namespace hdp {

std::string errno_text(int error) { return std::error_code(error, std::generic_category()).message(); }

}  // namespace hdp

namespace hdp::detail {

void throw_invariant(const char* file, int line, const char* condition, const std::string& message) {
  const char* base = std::strrchr(file, '/');
  std::string text = "[";
  text += base ? base + 1 : file;
  text += ":" + std::to_string(line) + "] check failed: " + condition;
  if (!message.empty()) text += ": " + message;
  throw InvariantViolation(text);
}

}  // namespace hdp::detail
