// NCCL opened on first use (mesh/comm/nccl_api.h): the library of this build's major version
// loads and has every function hdp calls, and reports a version of the same major as the headers.
// Needs the library, not a GPU, so it runs in every build with NCCL.
#include "mesh/comm/nccl_api.h"

#include <gtest/gtest.h>

#include "mesh/comm/nccl_backend.h"

namespace hdp::mesh::nccl {
namespace {

TEST(NcclApi, EveryFunctionHdpCallsIsFoundAndTheVersionIsTheHeadersMajor) {
  const NcclApi& a = api();
  for (const void* f : {reinterpret_cast<const void*>(a.get_version), reinterpret_cast<const void*>(a.get_unique_id),
                        reinterpret_cast<const void*>(a.comm_init_rank_config),
                        reinterpret_cast<const void*>(a.comm_get_async_error),
                        reinterpret_cast<const void*>(a.comm_finalize), reinterpret_cast<const void*>(a.comm_destroy),
                        reinterpret_cast<const void*>(a.comm_abort), reinterpret_cast<const void*>(a.get_error_string),
                        reinterpret_cast<const void*>(a.get_last_error), reinterpret_cast<const void*>(a.group_start),
                        reinterpret_cast<const void*>(a.group_end), reinterpret_cast<const void*>(a.send),
                        reinterpret_cast<const void*>(a.recv), reinterpret_cast<const void*>(a.all_reduce),
                        reinterpret_cast<const void*>(a.reduce), reinterpret_cast<const void*>(a.reduce_scatter),
                        reinterpret_cast<const void*>(a.all_gather), reinterpret_cast<const void*>(a.broadcast)}) {
    EXPECT_NE(f, nullptr);
  }
  int version = 0;
  ASSERT_EQ(a.get_version(&version), ncclSuccess);
  EXPECT_EQ(version / 10000, NCCL_MAJOR);
  EXPECT_EQ(library_version().rfind(std::to_string(NCCL_MAJOR) + ".", 0), 0u) << library_version();
  EXPECT_STREQ(a.get_error_string(ncclSuccess), "no error");
}

}  // namespace
}  // namespace hdp::mesh::nccl
