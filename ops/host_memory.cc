#include "ops/host_memory.h"

#include <malloc.h>

#include <climits>

namespace hdp::ops {

bool retain_freed_host_memory() {
  // mallopt returns 1 when it took the value. One arena: a thread's own arena lives in heaps of
  // its own mapping, and a heap left empty is unmapped whatever the trim threshold (the transport's
  // and the collectives' threads allocate their messages and scratch every step).
  return mallopt(M_ARENA_MAX, 1) == 1 && mallopt(M_MMAP_THRESHOLD, static_cast<int>(kHeapBlockLimit)) == 1 &&
         mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
}

}  // namespace hdp::ops
