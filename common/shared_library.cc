#include "common/shared_library.h"

#include <dlfcn.h>

#include "common/error.h"

namespace hdp {

SharedLibrary SharedLibrary::open(const std::string& what, const std::vector<std::string>& candidates) {
  std::string tried;
  std::string reason = "no candidate";
  for (const std::string& path : candidates) {
    if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return SharedLibrary(what, path, handle);
    const char* error = dlerror();
    reason = error ? error : "unknown reason";
    tried += (tried.empty() ? "" : ", ") + path;
  }
  throw Error(what + " cannot be loaded (tried " + tried + "): " + reason);
}

void* SharedLibrary::address(const char* name) const {
  dlerror();
  void* address = dlsym(handle_, name);
  if (address == nullptr) throw Error(what_ + " (" + path_ + ") has no symbol " + name);
  return address;
}

}  // namespace hdp
