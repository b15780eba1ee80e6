#include "agents/worker_count.h"

#include <charconv>

#include "common/error.h"

namespace hdp::agents {

int resolve_worker_count(const std::string& text, int visible_cuda_devices) {
  constexpr int kMax = 1024;
  if (text == "auto" || text.empty()) return visible_cuda_devices > 0 ? std::min(visible_cuda_devices, kMax) : 1;
  if (text == "gpu") {
    if (visible_cuda_devices < 1) {
      throw InvalidArgument("--nproc-per-node gpu: this node has no CUDA device visible to the agent");
    }
    return std::min(visible_cuda_devices, kMax);
  }
  int n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < 1 || n > kMax) {
    throw InvalidArgument("--nproc-per-node '" + text + "': expected a count in [1, " + std::to_string(kMax) +
                          "], gpu or auto");
  }
  return n;
}

}  // namespace hdp::agents
