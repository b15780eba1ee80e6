// File: ops/host_memory.h
//
// How a worker's host memory is handed back to the system. A training step allocates and frees
// the same buffers every step (the activations, the gradients, the messages the TCP transport
// buffers before their receive is posted). glibc's allocator returns a freed top of its heap to
// the system once it exceeds its trim threshold, and maps any block above its mmap threshold
// afresh, unmapping it on free, and a thread's arena unmaps a heap it emptied: each step then
// faulted the same memory in again (about 4,000 minor
// page faults a second in a demo worker, 5% of a core in the kernel; docs/performance.md, "A
// worker's host memory"), and a worker's first step after it started paid for all of it at once.
// A training process keeps what it freed instead, as a device's caching allocator does.
#pragma once

#include <cstddef>

namespace hdp::ops {

// Blocks up to this size come from the allocator's heap, not from a mapping of their own: glibc's
// largest mmap threshold on a 64-bit system (4 MiB x sizeof(long)); a larger block is still mapped
// and unmapped on its own.
inline constexpr std::size_t kHeapBlockLimit = 32u << 20;

// Once, at a worker's start, before its threads: every thread allocates from the one heap (a
// thread's own arena unmaps a heap it emptied), freed memory stays with the process (the trim
// threshold at its largest) and blocks up to kHeapBlockLimit come from the heap. Returns false
// when the allocator does not take the settings (not glibc's: a sanitizer's, which keeps its own
// pools); the process then runs as before.
bool retain_freed_host_memory();

}  // namespace hdp::ops
