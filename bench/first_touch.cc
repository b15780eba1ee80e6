// bench/first_touch: what a page touched for the first time costs a process with hdp's heap
// settings (ops/host_memory.h), with 4 KiB pages and with its heap in transparent huge pages
// (glibc.malloc.hugetlb=1, which an agent gives its workers: elastic/worker_env.h).
//
// The benchmark runs itself twice as a child process: once with GLIBC_TUNABLES unset, once with
// GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (glibc reads it only when a process starts). Each child
// takes --blocks blocks of --mib MiB from its heap one after another (each below the 32 MiB that
// keeps a block in the heap) and writes each one twice, a byte every 4 KiB: the first write is the
// first touch (the page faults), the second is the baseline, the same writes to pages already
// there. Rows: per setting, the median first-touch time of a block, beside the median second write.
//
//   build/bin/bench_first_touch [--blocks 8] [--mib 14] [--json]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/report.h"
#include "ops/host_memory.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double write_every_page(char* block, std::size_t bytes, char value) {
  const auto start = Clock::now();
  for (std::size_t i = 0; i < bytes; i += 4096) block[i] = value;
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// The child: prints "<first-touch median ms> <second-write median ms>" on stdout.
int child(int blocks, int mib) {
  hdp::ops::retain_freed_host_memory();
  const std::size_t bytes = static_cast<std::size_t>(mib) << 20;
  std::vector<char*> held;  // kept to the end: each block is new to the process
  std::vector<double> first, second;
  for (int b = 0; b < blocks; ++b) {
    char* block = static_cast<char*>(std::malloc(bytes));
    if (!block) return 1;
    held.push_back(block);
    first.push_back(write_every_page(block, bytes, 1));
    second.push_back(write_every_page(block, bytes, 2));
  }
  std::printf("%.3f %.3f\n", median(first), median(second));
  for (char* block : held) std::free(block);
  return 0;
}

// Runs this program as a child with GLIBC_TUNABLES set to `tunables` ("": unset).
std::pair<double, double> run_child(const std::string& self, int blocks, int mib, const std::string& tunables) {
  const std::string command = (tunables.empty() ? "env -u GLIBC_TUNABLES " : "env GLIBC_TUNABLES=" + tunables + " ") +
                              self + " --child --blocks " + std::to_string(blocks) + " --mib " + std::to_string(mib);
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot run " + command);
  double first = 0, second = 0;
  const int read = std::fscanf(pipe, "%lf %lf", &first, &second);
  const int status = ::pclose(pipe);
  if (read != 2 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) throw std::runtime_error(command + " failed");
  return {first, second};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The cost of a page touched first, with 4 KiB pages and with the heap in huge pages"};
  int blocks = 8, mib = 14;
  bool json = false, is_child = false;
  app.add_option("--blocks", blocks, "Blocks a process takes, one after another")->check(CLI::Range(1, 64));
  app.add_option("--mib", mib, "Size of a block in MiB (below 32: from the heap)")->check(CLI::Range(1, 31));
  app.add_flag("--json", json, "One JSON array of rows");
  app.add_flag("--child", is_child, "(internal) measure in this process");
  CLI11_PARSE(app, argc, argv);
  if (is_child) return child(blocks, mib);

  const std::string self = "/proc/" + std::to_string(::getpid()) + "/exe";
  hdp::bench::Report report;
  for (const std::string tunables : {"", "glibc.malloc.hugetlb=1"}) {
    const auto [first, second] = run_child(self, blocks, mib, tunables);
    const std::string setting = tunables.empty() ? "4k_pages" : "huge_pages";
    report.add({.name = "first_touch_" + std::to_string(mib) + "MiB_" + setting,
                .value = first,
                .unit = "ms",
                .baseline = hdp::bench::Baseline{"second_write", second}});
  }
  report.print(std::cout, json);
  return 0;
}
