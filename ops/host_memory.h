// File: ops/host_memory.h
//
// How an hdp process hands host memory back to the system. A training step allocates and frees
// the same buffers every micro-batch and every step (the activations, the gradients, the messages
// the TCP transport buffers before their receive is posted, the collectives' scratch), several of
// them on threads of their own. glibc maps a block above its mmap threshold on its own and unmaps
// it on free (the threshold rises to the size of such a block once one is freed, up to 32 MiB),
// returns a freed top of its heap above the trim threshold to the system, and a thread's arena
// unmaps a heap it emptied whatever the trim threshold: the memory was then faulted in again at
// its next use. In a demo worker, about 3,980 minor page faults a second and 8-9% of a core in
// the kernel, against 3-4% in a worker without them (docs/performance.md, "A worker's host
// memory"), and the faults distorted the compute times a calibration fits its cost model to
// (tests/mesh/calibration_test.cc). An hdp process keeps what it freed instead, as a device's
// caching allocator does.
#pragma once

#include <cstddef>

namespace hdp::ops {

// Blocks up to this size come from the allocator's heap, not from a mapping of their own: glibc's
// largest mmap threshold on a 64-bit system (4 MiB x sizeof(long)); a larger block is still mapped
// and unmapped on its own.
inline constexpr std::size_t kHeapBlockLimit = 32u << 20;

// Once, at a process's start (every `hdp` command, cli/main.cc), before its threads: every thread
// allocates from the one heap (the main arena's), blocks up to kHeapBlockLimit come from it, and a
// free top of it is kept up to the trim threshold's largest value (INT_MAX bytes). Applies each
// setting it can; returns false when glibc refused one (a sanitizer's allocator, which keeps its
// own pools, refuses them all). The resident size then stays at the process's peak: what it freed
// is reused, not returned.
bool retain_freed_host_memory();

}  // namespace hdp::ops
