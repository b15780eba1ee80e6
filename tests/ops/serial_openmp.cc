// Linked into the op and kernel test binaries: runs every test with ONE OpenMP thread. CTest runs
// test cases in parallel on CI's 2 cores, and an OpenMP team whose worker is descheduled stalls at
// each barrier for a scheduler time slice (a 0.5 s test took 17 s on a loaded machine). The parallel
// code paths are covered on purpose, with an explicit thread count, by
// tests/kernels/parallel_consistency_test.cc.
#include <gtest/gtest.h>
#include <omp.h>

namespace {

class SerialOpenMp : public ::testing::Environment {
 public:
  void SetUp() override { omp_set_num_threads(1); }
};

[[maybe_unused]] const auto* const kRegistered = ::testing::AddGlobalTestEnvironment(new SerialOpenMp);

}  // namespace
