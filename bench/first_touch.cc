// bench/first_touch: what a page touched for the first time costs a process with hdp's heap
// settings (ops/host_memory.h), with 4 KiB pages and with its heap in transparent huge pages
// (glibc.malloc.hugetlb=1, which an agent gives its workers: elastic/worker_env.h).
//
// The benchmark runs itself twice as a child process: once with GLIBC_TUNABLES unset, once with
// GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (glibc reads it only when a process starts). Each child
// takes --blocks blocks of --mib MiB from its heap one after another (2 MiB more is taken than
// timed, so that the allocator's own write past a block's end lands outside what is timed; the
// whole below ops::kHeapBlockLimit, which keeps a block in the heap) and writes each one twice, a byte every 4 KiB:
// the first write is the first touch (the page faults), the second is the baseline, the same
// writes to pages already there. Rows: per setting, the median first-touch time of a block beside
// the median second write, and the child's AnonHugePages (/proc/self/smaps_rollup: whether it got
// huge pages at all). The system's THP mode is printed first, on stderr with --json
// (/sys/kernel/mm/transparent_hugepage/enabled: "always" gives the 4 KiB row huge pages too).
//
//   build/bin/bench_first_touch [--blocks 8] [--mib 14] [--json]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/report.h"
#include "elastic/worker_env.h"
#include "ops/host_memory.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kSlackBytes = std::size_t{2} << 20;  // taken past each block, not timed
// The largest --mib whose block and slack stay below the heap block limit.
constexpr int kMaxMib = static_cast<int>((hdp::ops::kHeapBlockLimit - kSlackBytes - 1) >> 20);

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double write_every_page(char* block, std::size_t bytes, char value) {
  const auto start = Clock::now();
  for (std::size_t i = 0; i < bytes; i += 4096) block[i] = value;
  asm volatile("" : : "r"(block) : "memory");  // the writes happen here, not later or never
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// The "AnonHugePages: N kB" of /proc/self/smaps_rollup, in MiB (-1: not found).
double anon_huge_pages_mib() {
  std::ifstream in("/proc/self/smaps_rollup");
  for (std::string name; in >> name;) {
    double kib = 0;
    if (name == "AnonHugePages:" && in >> kib) return kib / 1024;
  }
  return -1;
}

// The child: prints "<first-touch median ms> <second-write median ms> <AnonHugePages MiB>".
int child(int blocks, int mib) {
  hdp::ops::retain_freed_host_memory();
  const std::size_t bytes = static_cast<std::size_t>(mib) << 20;
  std::vector<char*> held;  // kept to the end: each block is new to the process
  std::vector<double> first, second;
  for (int b = 0; b < blocks; ++b) {
    char* block = static_cast<char*>(std::malloc(bytes + kSlackBytes));
    if (!block) return 1;
    held.push_back(block);
    first.push_back(write_every_page(block, bytes, 1));
    second.push_back(write_every_page(block, bytes, 2));
  }
  std::printf("%.3f %.3f %.1f\n", median(first), median(second), anon_huge_pages_mib());
  for (char* block : held) std::free(block);
  return 0;
}

struct Measured {
  double first_ms = 0, second_ms = 0, huge_mib = 0;
};

// Runs this program as a child with GLIBC_TUNABLES set to `tunables` ("": unset).
Measured run_child(const std::string& self, int blocks, int mib, const std::string& tunables) {
  const std::string variable = hdp::elastic::worker_env::kGlibcTunables;
  const std::string command = (tunables.empty() ? "env -u " + variable + " " : "env " + variable + "=" + tunables + " ") +
                              self + " --child --blocks " + std::to_string(blocks) + " --mib " + std::to_string(mib);
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot run " + command);
  Measured m;
  const int read = std::fscanf(pipe, "%lf %lf %lf", &m.first_ms, &m.second_ms, &m.huge_mib);
  const int status = ::pclose(pipe);
  if (read != 3 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) throw std::runtime_error(command + " failed");
  return m;
}

std::string thp_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  return std::getline(in, line) ? line : "(unknown)";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The cost of a page touched first, with 4 KiB pages and with the heap in huge pages"};
  int blocks = 8, mib = 14;
  bool json = false, is_child = false;
  app.add_option("--blocks", blocks, "Blocks a process takes, one after another")->check(CLI::Range(1, 64));
  app.add_option("--mib", mib, "Size of a block in MiB (up to " + std::to_string(kMaxMib) + ": from the heap)")
      ->check(CLI::Range(1, kMaxMib));
  app.add_flag("--json", json, "One JSON array of rows");
  app.add_flag("--child", is_child, "(internal) measure in this process");
  CLI11_PARSE(app, argc, argv);
  if (is_child) return child(blocks, mib);

  try {
    const std::string self = "/proc/" + std::to_string(::getpid()) + "/exe";
    (json ? std::cerr : std::cout) << "transparent huge pages: " << thp_mode() << "\n";
    hdp::bench::Report report;
    for (const std::string& tunables : {std::string(), std::string(hdp::elastic::worker_env::kHugePageHeapSetting)}) {
      const Measured m = run_child(self, blocks, mib, tunables);
      const std::string setting = tunables.empty() ? "4k_pages" : "huge_pages";
      report.add({.name = "first_touch_" + std::to_string(mib) + "MiB_" + setting,
                  .value = m.first_ms,
                  .unit = "ms",
                  .baseline = hdp::bench::Baseline{"second_write", m.second_ms}});
      report.add({.name = "anon_huge_pages_" + setting, .value = m.huge_mib, .unit = "MiB"});
    }
    report.print(std::cout, json);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "bench_first_touch: " << e.what() << "\n";
    return 1;
  }
}
