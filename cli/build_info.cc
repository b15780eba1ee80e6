#include "cli/build_info.h"

#include <boost/version.hpp>
#include <hdf5.h>
#include <hiredis/hiredis.h>

#include <sstream>

#include "hdp/config.h"
#include "mesh/comm/nccl_backend.h"

#if HDP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace hdp::cli {
namespace {

nlohmann::json cuda_info() {
  nlohmann::json cuda = {{"built", HDP_HAVE_CUDA == 1}};
#if HDP_HAVE_CUDA
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  cuda["runtime"] = std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10);
  cuda["architectures"] = HDP_CUDA_ARCHITECTURES;
  int devices = 0;
  // No driver or no device is a normal state on a build machine: report 0 devices and why.
  if (cudaError_t status = cudaGetDeviceCount(&devices); status != cudaSuccess) {
    devices = 0;
    cuda["device_error"] = cudaGetErrorString(status);
    cudaGetLastError();
  }
  cuda["devices"] = devices;
#endif
  return cuda;
}

nlohmann::json nccl_info() {
  nlohmann::json nccl = {{"built", HDP_HAVE_NCCL == 1}};
  if (HDP_HAVE_NCCL) nccl["version"] = mesh::nccl::library_version();
  return nccl;
}

// The CPU data plane: hdp's own TCP transport (mesh/comm/tcp_network.h) over Boost.Asio.
nlohmann::json transport_info() {
  return {{"cpu", "tcp"},
          {"asio", std::to_string(BOOST_VERSION / 100000) + "." + std::to_string(BOOST_VERSION / 100 % 1000) + "." +
                       std::to_string(BOOST_VERSION % 100)}};
}

std::string hdf5_version() {
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

}  // namespace

nlohmann::json build_info() {
  return {{"version", HDP_VERSION},
          {"build_type", HDP_BUILD_TYPE},
          {"sanitizers", HDP_SANITIZE},
          {"cuda", cuda_info()},
          {"nccl", nccl_info()},
          {"transport", transport_info()},
          {"hdf5", hdf5_version()},
          {"hiredis", std::to_string(HIREDIS_MAJOR) + "." + std::to_string(HIREDIS_MINOR) + "." +
                          std::to_string(HIREDIS_PATCH)}};
}

std::string format_build_info(const nlohmann::json& info) {
  std::ostringstream out;
  out << "hdp " << info["version"].get<std::string>() << " (" << info["build_type"].get<std::string>() << ")\n";
  const auto& cuda = info["cuda"];
  out << "  cuda:     ";
  if (cuda["built"].get<bool>()) {
    out << "built (runtime " << cuda["runtime"].get<std::string>() << ", sm_" << cuda["architectures"].get<std::string>()
        << "), " << cuda["devices"].get<int>() << " device(s)";
    if (cuda.contains("device_error")) out << " (" << cuda["device_error"].get<std::string>() << ")";
  } else {
    out << "not built";
  }
  out << "\n  nccl:     "
      << (info["nccl"]["built"].get<bool>() ? "built (" + info["nccl"]["version"].get<std::string>() + ")"
                                            : std::string("not built"));
  out << "\n  transport: " << info["transport"]["cpu"].get<std::string>() << " (Boost.Asio "
      << info["transport"]["asio"].get<std::string>() << ")";
  out << "\n  hdf5:     " << info["hdf5"].get<std::string>();
  out << "\n  hiredis:  " << info["hiredis"].get<std::string>();
  const auto sanitizers = info["sanitizers"].get<std::string>();
  out << "\n  sanitize: " << (sanitizers.empty() ? "none" : sanitizers) << "\n";
  return out.str();
}

}  // namespace hdp::cli
