#include "kernels/cuda/cublas_api.h"

#include <string>

#include "common/error.h"
#include "common/shared_library.h"

// The symbol a cuBLAS name stands for (cublas_v2.h maps cublasSgemm onto cublasSgemm_v2, ...).
#define HDP_CUBLAS_SYMBOL_TEXT(name) #name
#define HDP_CUBLAS_SYMBOL(name) HDP_CUBLAS_SYMBOL_TEXT(name)

namespace hdp::kernels::cuda {
namespace {

CublasApi load() {
  // The library this build was compiled against: its major version's soname, searched as the
  // dynamic loader does (LD_LIBRARY_PATH, the loader's cache), then in the toolkit it was found in.
  const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  try {
    const SharedLibrary lib = SharedLibrary::open("cuBLAS", {soname, std::string(HDP_CUDA_LIBRARY_DIR) + "/" + soname});
    CublasApi api{};
    api.create = lib.symbol<decltype(api.create)>(HDP_CUBLAS_SYMBOL(cublasCreate));
    api.destroy = lib.symbol<decltype(api.destroy)>(HDP_CUBLAS_SYMBOL(cublasDestroy));
    api.set_stream = lib.symbol<decltype(api.set_stream)>(HDP_CUBLAS_SYMBOL(cublasSetStream));
    api.sgemm = lib.symbol<decltype(api.sgemm)>(HDP_CUBLAS_SYMBOL(cublasSgemm));
    api.gemm_ex = lib.symbol<decltype(api.gemm_ex)>(HDP_CUBLAS_SYMBOL(cublasGemmEx));
    api.saxpy = lib.symbol<decltype(api.saxpy)>(HDP_CUBLAS_SYMBOL(cublasSaxpy));
    api.status_name = lib.symbol<decltype(api.status_name)>(HDP_CUBLAS_SYMBOL(cublasGetStatusName));
    api.status_string = lib.symbol<decltype(api.status_string)>(HDP_CUBLAS_SYMBOL(cublasGetStatusString));
    return api;
  } catch (const Error& e) {  // SharedLibrary's: fatal here, as every CUDA failure in kernels/cuda
    throw FatalError(e.what());
  }
}

}  // namespace

const CublasApi& cublas() {
  static const CublasApi api = load();
  return api;
}

}  // namespace hdp::kernels::cuda
