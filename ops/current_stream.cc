#include "ops/current_stream.h"

namespace hdp::ops {
namespace {

thread_local Stream current{};

}  // namespace

Stream current_stream() { return current; }

StreamScope::StreamScope(Stream stream) : previous_(current) { current = stream; }

StreamScope::~StreamScope() { current = previous_; }

}  // namespace hdp::ops
