#include "ops/host_memory.h"

#include <malloc.h>

#include <climits>

namespace hdp::ops {

bool retain_freed_host_memory() {
  // mallopt returns 1 when it took the value. Each is applied whether or not another was refused.
  const bool one_arena = mallopt(M_ARENA_MAX, 1) == 1;
  const bool heap_blocks = mallopt(M_MMAP_THRESHOLD, static_cast<int>(kHeapBlockLimit)) == 1;
  const bool kept_top = mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
  return one_arena && heap_blocks && kept_top;
}

}  // namespace hdp::ops
