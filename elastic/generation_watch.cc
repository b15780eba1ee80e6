#include "elastic/generation_watch.h"

#include <algorithm>

#include "common/error.h"
#include "common/log.h"
#include "elastic/job_keys.h"
#include "elastic/membership.h"

namespace hdp::elastic {

std::optional<std::int64_t> GenerationWatch::wait(std::chrono::milliseconds block) {
  if (!last_id_) {
    auto newest = store_->stream_tail(keys::kGenerationLog, 1);
    last_id_ = newest.empty() ? "0" : newest.back().id;
  }
  const auto entries = store_->stream_read(keys::kGenerationLog, *last_id_, keys::kGenerationLogLength, block);
  std::optional<std::int64_t> newest;
  for (const StreamEntry& entry : entries) {
    last_id_ = entry.id;
    auto field = std::find_if(entry.fields.begin(), entry.fields.end(), [](const auto& f) { return f.first == "gen"; });
    try {
      if (field == entry.fields.end()) throw InvalidArgument("entry " + entry.id + " has no field 'gen'");
      const std::int64_t g = decode_generation_number(field->second, keys::kGenerationLog);
      newest = std::max(newest.value_or(g), g);
    } catch (const InvalidArgument& e) {
      log()->warn("ignoring an entry of Redis key '{}': {}", keys::kGenerationLog, e.what());
    }
  }
  return newest;
}

}  // namespace hdp::elastic
