#include "mesh/comm/data_plane_exchange.h"

#include <algorithm>
#include <charconv>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/text.h"
#include "elastic/backoff.h"
#include "mesh/comm/checks.h"
#include "mesh/comm/wire.h"

namespace hdp::mesh {
namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

constexpr std::string_view kChoiceTag = "plane1";

// Calls look() until it returns true: asks `superseded` before each look, retries a store that is
// unreachable, sleeps 2 to 100 ms between looks, and gives up at the deadline with TimeoutError
// naming what it waited for.
void poll_until(const PlaneExchangeOptions& o, const std::function<std::string()>& waiting_for,
                const std::function<bool()>& look) {
  const auto deadline = Clock::now() + o.timeout;
  elastic::Backoff backoff({.initial = Millis(2), .max = Millis(100), .multiplier = 2.0, .jitter = 0.0});
  std::string store_error;
  const std::string who = "data plane exchange, rank " + std::to_string(o.rank);
  for (;;) {
    if (o.superseded && o.superseded()) {
      throw PeerLost(who + ": a newer generation exists (was waiting for " + waiting_for() + ")");
    }
    try {
      if (look()) return;
      store_error.clear();
    } catch (const StoreUnavailable& e) {  // retried until the deadline, as the address records are
      store_error = e.what();
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      throw TimeoutError(who + ": no " + waiting_for() + " within " + std::to_string(o.timeout.count()) + " ms" +
                         (store_error.empty() ? "" : " (" + store_error + ")"));
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff.next(), deadline - now));
  }
}

template <typename F>
auto naming_key(std::string_view key, F&& decode) {
  try {
    return decode();
  } catch (const InvalidArgument& e) {
    throw InvalidArgument("data plane exchange: key " + std::string(key) + ": " + e.what());
  }
}

// Rank r > 0 on a CUDA device: its record, then rank 0's choice (or rank 0's address: on the CPU).
DataPlaneChoice follow(const PlaneExchangeOptions& o) {
  o.store->set_with_ttl(plane_device_key(o.rank), encode_rank_device(o.mine), wire::kRecordTtl);
  const std::vector<std::string> keys{std::string(kPlaneChoiceKey), wire::record_key(0)};
  DataPlaneChoice choice;
  poll_until(o, [] { return std::string("data plane choice from rank 0 (plane/choice, or its address addr/0)"); },
             [&] {
               const auto values = o.store->multi_get(keys);
               if (values[0]) {
                 choice = naming_key(keys[0], [&] { return decode_plane_choice(*values[0], o.size); });
                 return true;
               }
               if (values[1]) {
                 choice = {DataPlane::kTcp, "rank 0 is on the CPU"};
                 return true;
               }
               return false;
             });
  return choice;
}

std::string some_ranks(const std::vector<int>& ranks) {
  constexpr std::size_t kShown = 8;
  const std::vector<int> shown(ranks.begin(), ranks.begin() + static_cast<std::ptrdiff_t>(std::min(kShown, ranks.size())));
  return "rank" + std::string(ranks.size() == 1 ? " " : "s ") + join(shown, ", ", [](int r) { return std::to_string(r); }) +
         (ranks.size() > kShown ? ", ... (" + std::to_string(ranks.size()) + " in all)" : "");
}

// Rank 0 on a CUDA device: every other rank's record (or its address: on the CPU), read in one
// multi_get per look for the ranks not yet known, until the choice is final; then it is published.
DataPlaneChoice decide(const PlaneExchangeOptions& o) {
  // A rank not yet known stands in as a CUDA device of its own (an empty host, which no real CUDA
  // record has): it rules nothing out, so a TCP choice over the ranks known is final.
  std::vector<RankDevice> ranks(static_cast<std::size_t>(o.size));
  std::vector<int> unknown;
  for (int r = 1; r < o.size; ++r) {
    ranks[static_cast<std::size_t>(r)] = RankDevice{"", ops::Device::kCuda, std::to_string(r)};
    unknown.push_back(r);
  }
  ranks[0] = o.mine;
  DataPlaneChoice choice = choose_data_plane(ranks, o.nccl_built);
  if (choice.plane == DataPlane::kNccl && !unknown.empty()) {
    poll_until(o, [&] { return "device record or address from " + some_ranks(unknown); },
               [&] {
                 std::vector<std::string> keys;
                 keys.reserve(2 * unknown.size());
                 for (int r : unknown) {
                   keys.push_back(plane_device_key(r));
                   keys.push_back(wire::record_key(r));
                 }
                 const auto values = o.store->multi_get(keys);
                 std::vector<int> still;
                 for (std::size_t i = 0; i < unknown.size(); ++i) {
                   RankDevice& d = ranks[static_cast<std::size_t>(unknown[i])];
                   if (const auto& record = values[2 * i]) {
                     d = naming_key(keys[2 * i], [&] { return decode_rank_device(*record); });
                   } else if (values[2 * i + 1]) {
                     d = RankDevice{};  // an address and no device record: a rank on the CPU
                   } else {
                     still.push_back(unknown[i]);
                   }
                 }
                 unknown = std::move(still);
                 choice = choose_data_plane(ranks, o.nccl_built);
                 return unknown.empty() || choice.plane == DataPlane::kTcp;
               });
  }
  o.store->set_with_ttl(kPlaneChoiceKey, encode_plane_choice(o.size, choice), wire::kRecordTtl);
  return choice;
}

}  // namespace

std::string plane_device_key(int rank) { return "plane/dev/" + std::to_string(rank); }

DataPlaneChoice agree_data_plane(const PlaneExchangeOptions& o) {
  const std::string what = "data plane exchange";
  check_group(what, o.rank, o.size);
  check_positive(what, "timeout", o.timeout);
  check_given(o.store != nullptr, what, "store");
  encode_rank_device(o.mine);  // refuses a device no record can carry, before anything is written
  if (o.mine.device == ops::Device::kCpu) return {DataPlane::kTcp, "rank " + std::to_string(o.rank) + " is on the CPU"};
  return o.rank == 0 ? decide(o) : follow(o);
}

std::string encode_plane_choice(int size, const DataPlaneChoice& choice) {
  return std::string(kChoiceTag) + " " + std::to_string(size) + " " +
         (choice.plane == DataPlane::kNccl ? "nccl" : "tcp") + " " + choice.reason;
}

DataPlaneChoice decode_plane_choice(std::string_view record, int size) {
  const auto bad = [&](const std::string& why) {
    return InvalidArgument("data plane choice " + quote_value(record) + " is not one: " + why);
  };
  const std::size_t first = record.find(' ');
  const std::size_t second = first == std::string_view::npos ? first : record.find(' ', first + 1);
  if (second == std::string_view::npos || record.substr(0, first) != kChoiceTag) {
    throw bad("expected \"plane1 <size> tcp|nccl <reason>\"");
  }
  const std::string_view size_text = record.substr(first + 1, second - first - 1);
  int written = 0;
  const auto [end, ec] = std::from_chars(size_text.data(), size_text.data() + size_text.size(), written);
  if (ec != std::errc() || end != size_text.data() + size_text.size()) throw bad("the size is not a number");
  if (written != size) throw bad("written for " + std::to_string(written) + " ranks, this group has " + std::to_string(size));
  const std::size_t third = record.find(' ', second + 1);
  const std::string_view plane = record.substr(second + 1, third == std::string_view::npos ? third : third - second - 1);
  const std::string reason = third == std::string_view::npos ? "" : std::string(record.substr(third + 1));
  if (plane == "nccl") return {DataPlane::kNccl, reason};
  if (plane == "tcp") return {DataPlane::kTcp, reason};
  throw bad("the plane is neither tcp nor nccl");
}

}  // namespace hdp::mesh
