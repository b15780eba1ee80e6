#include "mesh/comm/data_plane.h"

#include <cctype>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "common/text.h"

namespace hdp::mesh {
namespace {

constexpr std::string_view kTag = "dev1";

bool has_space(std::string_view s) {
  for (char c : s) {
    if (std::isspace(static_cast<unsigned char>(c)) || c == '\0') return true;
  }
  return false;
}

std::vector<std::string_view> split_spaces(std::string_view s) {
  std::vector<std::string_view> fields;
  std::size_t at = 0;
  while (at <= s.size()) {
    const std::size_t end = std::min(s.find(' ', at), s.size());
    fields.push_back(s.substr(at, end - at));
    at = end + 1;
  }
  return fields;
}

}  // namespace

std::string encode_rank_device(const RankDevice& device) {
  const auto bad = [&](const std::string& why) {
    return InvalidArgument("rank device record: " + why + " (host " + quote_value(device.host) + ", device id " +
                           quote_value(device.device_id) + ")");
  };
  if (has_space(device.host)) throw bad("the host holds whitespace");
  if (device.device == ops::Device::kCpu) {
    if (!device.device_id.empty()) throw bad("a rank on the CPU has no device id");
    return std::string(kTag) + " cpu" + (device.host.empty() ? "" : " " + device.host);
  }
  if (device.host.empty()) throw bad("a rank on a CUDA device needs its host");
  if (device.device_id.empty() || has_space(device.device_id)) throw bad("the device id is empty or holds whitespace");
  return std::string(kTag) + " cuda " + device.host + " " + device.device_id;
}

RankDevice decode_rank_device(std::string_view record) {
  const auto bad = [&](const char* why) {
    return InvalidArgument("rank device record " + quote_value(record) + " is not one: " + why);
  };
  const std::vector<std::string_view> f = split_spaces(record);
  if (f[0] != kTag) throw bad("expected \"dev1 cpu [<host>]\" or \"dev1 cuda <host> <device id>\"");
  for (std::string_view field : f) {
    if (field.empty() || has_space(field)) throw bad("an empty field or a stray character");
  }
  if (f.size() >= 2 && f[1] == "cpu" && f.size() <= 3) {
    return RankDevice{f.size() == 3 ? std::string(f[2]) : std::string(), ops::Device::kCpu, {}};
  }
  if (f.size() == 4 && f[1] == "cuda") return RankDevice{std::string(f[2]), ops::Device::kCuda, std::string(f[3])};
  throw bad("expected \"dev1 cpu [<host>]\" or \"dev1 cuda <host> <device id>\"");
}

std::string data_plane_name(DataPlane plane) { return plane == DataPlane::kNccl ? "NCCL" : "TCP"; }

DataPlaneChoice choose_data_plane(std::span<const RankDevice> ranks, bool nccl_built) {
  if (ranks.empty()) return {DataPlane::kTcp, "no ranks"};
  // host + '\n' + device id (neither holds a newline: the record refuses whitespace) -> first rank.
  std::unordered_map<std::string, std::size_t> first_user;
  first_user.reserve(ranks.size());
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const RankDevice& d = ranks[r];
    if (d.device != ops::Device::kCuda) return {DataPlane::kTcp, "rank " + std::to_string(r) + " is on the CPU"};
    const auto [it, fresh] = first_user.try_emplace(d.host + '\n' + d.device_id, r);
    if (!fresh) {
      return {DataPlane::kTcp, "ranks " + std::to_string(it->second) + " and " + std::to_string(r) + " share GPU " +
                                   d.device_id + " of host " + d.host};
    }
  }
  if (!nccl_built) return {DataPlane::kTcp, "this build has no NCCL"};
  if (ranks.size() == 1) return {DataPlane::kNccl, "the one rank has a GPU"};
  return {DataPlane::kNccl, "each of the " + std::to_string(ranks.size()) + " ranks has a GPU of its own"};
}

bool needs_staging(const RankDevice& mine, DataPlane plane) {
  return plane == DataPlane::kTcp && mine.device == ops::Device::kCuda;
}

}  // namespace hdp::mesh
