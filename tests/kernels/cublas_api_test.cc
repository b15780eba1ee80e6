// cuBLAS opened on first use (kernels/cuda/cublas_api.h): the library of this build's major
// version loads and has every function hdp calls. Needs the library, not a GPU, so it runs in
// every CUDA build (a misspelt symbol would otherwise show only on a GPU machine).
#include "kernels/cuda/cublas_api.h"

#include <gtest/gtest.h>

namespace hdp::kernels::cuda {
namespace {

TEST(CublasApi, EveryFunctionHdpCallsIsFound) {
  const CublasApi& api = cublas();
  EXPECT_NE(api.create, nullptr);
  EXPECT_NE(api.destroy, nullptr);
  EXPECT_NE(api.set_stream, nullptr);
  EXPECT_NE(api.sgemm, nullptr);
  EXPECT_NE(api.gemm_ex, nullptr);
  EXPECT_NE(api.saxpy, nullptr);
  ASSERT_NE(api.status_name, nullptr);
  ASSERT_NE(api.status_string, nullptr);
  // A call that needs no device: the library answers with its own words.
  EXPECT_STREQ(api.status_name(CUBLAS_STATUS_NOT_INITIALIZED), "CUBLAS_STATUS_NOT_INITIALIZED");
  EXPECT_EQ(&cublas(), &api) << "loaded once";
}

}  // namespace
}  // namespace hdp::kernels::cuda
