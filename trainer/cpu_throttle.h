// File: trainer/cpu_throttle.h
//
// A real slowdown for the straggler tests and benchmark (trainer_config.h, fault throttle:): the
// calling process moves itself into a new CPU cgroup whose CFS quota allows `cpus` cores, so the
// kernel, not a sleep, makes it slow. cgroup v2 (cpu.max, where the cpu controller is enabled in
// the root's subtree) or v1 (cpu.cfs_quota_us under the cpu hierarchy). The group is named
// hdp-throttle-<pid> in the hierarchy's root; remove_throttle_groups() removes the empty ones
// (the benchmark calls it after its runs). Needs permission to create cgroups (root, or a
// delegated subtree); throws Error saying what is missing otherwise.
#pragma once

#include <filesystem>

namespace hdp::trainer {

void throttle_self(double cpus);

// The CPU controller's root directory where this process can create groups, or empty.
std::filesystem::path cpu_cgroup_root();

// Removes every hdp-throttle-* group under cpu_cgroup_root() that no process is in any more.
// Returns how many were removed.
int remove_throttle_groups();

}  // namespace hdp::trainer
