// File: elastic/preparing_workers.cc
//
// The agent's key of a node whose workers are preparing, and the leader's read of it
// (preparing_workers.h).
#include "elastic/preparing_workers.h"

#include <vector>

#include "elastic/job_keys.h"

namespace hdp::elastic {

void PreparingWorkers::sync(Store& store, const std::string& node, const std::string& incarnation, bool member,
                            Store::Duration ttl) {
  const std::string key = keys::preparing(node, incarnation);
  // A key of an earlier incarnation of this agent's goes first (it would expire with its lease anyway).
  if (written_ && (*written_ != key || !preparing_ || member)) {
    store.erase(*written_);
    written_.reset();
  }
  if (!preparing_ || member) return;
  written_ = key;  // before the call: a write whose answer was lost may have landed, and is erased later
  store.set_with_ttl(key, "1", ttl);
}

std::set<std::pair<std::string, std::string>> read_preparing(Store& store, std::span<const JoinCandidate> candidates) {
  std::set<std::pair<std::string, std::string>> preparing;
  if (candidates.empty()) return preparing;
  std::vector<std::string> keys;
  for (const auto& c : candidates) keys.push_back(keys::preparing(c.node, c.incarnation));
  const auto values = store.multi_get(keys);
  for (std::size_t i = 0; i < candidates.size() && i < values.size(); ++i) {
    if (values[i]) preparing.emplace(candidates[i].node, candidates[i].incarnation);
  }
  return preparing;
}

}  // namespace hdp::elastic
