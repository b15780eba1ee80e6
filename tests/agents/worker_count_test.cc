// How many workers an agent starts (agents/worker_count.h): N, gpu, or auto, torchrun's convention.
#include "agents/worker_count.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace hdp::agents {
namespace {

TEST(WorkerCount, ACountIsTakenAsGivenWhateverTheNodeHas) {
  EXPECT_EQ(resolve_worker_count("1", 0), 1);
  EXPECT_EQ(resolve_worker_count("4", 1), 4);  // four workers sharing one GPU: the user's choice
  EXPECT_EQ(resolve_worker_count("1024", 8), 1024);
}

TEST(WorkerCount, GpuIsOnePerVisibleDeviceAndRefusedWithoutOne) {
  EXPECT_EQ(resolve_worker_count("gpu", 8), 8);
  EXPECT_EQ(resolve_worker_count("gpu", 1), 1);
  try {
    resolve_worker_count("gpu", 0);
    ADD_FAILURE() << "gpu accepted on a node without GPUs";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "--nproc-per-node gpu: this node has no CUDA device visible to the agent");
  }
}

TEST(WorkerCount, AutoIsOnePerDeviceElseOne) {
  EXPECT_EQ(resolve_worker_count("auto", 4), 4);
  EXPECT_EQ(resolve_worker_count("auto", 0), 1);
}

TEST(WorkerCount, AnythingElseIsRefusedNamingTheValue) {
  for (const char* bad : {"0", "-1", "1025", "2x", "cpu", "GPU", " 2", "1e3"}) {
    try {
      resolve_worker_count(bad, 2);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace hdp::agents
