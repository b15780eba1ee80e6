// File: common/shared_library.h
//
// A shared library opened when it is first needed (dlopen), so that a process pays for a large
// library (cuBLAS, NCCL: hundreds of MB mapped and relocated) only when it uses it: an `hdp`
// command that never touches a GPU starts without them. The library stays loaded for the life of
// the process (never dlclosed: its symbols may be held anywhere).
//
// Example (kernels/cuda/cublas_api.cc):
//   static const SharedLibrary lib = SharedLibrary::open("cuBLAS", {"libcublas.so.13", "/opt/cuda/lib/libcublas.so.13"});
//   auto create = lib.symbol<decltype(&cublasCreate_v2)>("cublasCreate_v2");
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace hdp {

class SharedLibrary {
 public:
  // The first of `candidates` (a bare file name, searched as the dynamic loader does, or a path)
  // that opens; `what` names the library in errors. Throws hdp::Error naming every candidate and
  // the loader's reason for the last one when none opens.
  static SharedLibrary open(const std::string& what, const std::vector<std::string>& candidates);

  // The address of `name`; throws hdp::Error naming the library and the symbol when it has none.
  void* address(const char* name) const;
  template <typename F>
  F symbol(const char* name) const {
    return reinterpret_cast<F>(address(name));
  }
  // The candidate that opened.
  const std::string& path() const { return path_; }

 private:
  SharedLibrary(std::string what, std::string path, void* handle)
      : what_(std::move(what)), path_(std::move(path)), handle_(handle) {}
  std::string what_;
  std::string path_;
  void* handle_ = nullptr;
};

}  // namespace hdp
