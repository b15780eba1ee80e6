// File: cli/build_info.h
//
// What this build of hdp contains and what the machine offers: versions of the libraries it was
// built against and, when CUDA is built, the runtime's view of the devices. Shown by `hdp version`.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace hdp::cli {

// Fields: version, build_type, sanitizers, cuda {built, runtime, architectures, devices},
// nccl {built, version}, transport {cpu, asio}, hdf5, hiredis.
nlohmann::json build_info();

// The same facts as readable lines.
std::string format_build_info(const nlohmann::json& info);

}  // namespace hdp::cli
