#include "elastic/generation_watch.h"

#include <algorithm>

#include "common/error.h"
#include "common/log.h"
#include "elastic/job_keys.h"
#include "elastic/membership.h"

namespace hdp::elastic {

namespace {

// The generation an entry announces, after applying its delta to `records` (when given and held);
// InvalidArgument for an entry whose `gen` does not decode.
std::int64_t take_entry(const StreamEntry& entry, GenerationRecords* records) {
  auto find = [&](std::string_view name) -> const std::string* {
    auto it = std::find_if(entry.fields.begin(), entry.fields.end(), [&](const auto& f) { return f.first == name; });
    return it == entry.fields.end() ? nullptr : &it->second;
  };
  const std::string* field = find("gen");
  if (!field) throw InvalidArgument("entry " + entry.id + " has no field 'gen'");
  const std::int64_t g = decode_generation_number(*field, keys::kGenerationLog);
  const std::string *delta = find("delta"), *digest = find("digest");
  if (records && delta && digest) records->apply(g, *delta, *digest);
  return g;
}

}  // namespace

std::optional<std::int64_t> GenerationWatch::wait(std::chrono::milliseconds block) {
  if (!last_id_) {
    auto newest = store_->stream_tail(keys::kGenerationLog, 1);
    last_id_ = newest.empty() ? "0" : newest.back().id;
  }
  const auto entries = store_->stream_read(keys::kGenerationLog, *last_id_, keys::kGenerationLogLength, block);
  std::optional<std::int64_t> newest;
  for (const StreamEntry& entry : entries) {
    last_id_ = entry.id;
    try {
      const std::int64_t g = take_entry(entry, records_.get());
      newest = std::max(newest.value_or(g), g);
    } catch (const InvalidArgument& e) {
      log()->warn("ignoring an entry of Redis key '{}': {}", keys::kGenerationLog, e.what());
    }
  }
  return newest;
}

std::shared_ptr<const HeldRecord> catch_up(Store& store, GenerationRecords& records, std::int64_t g) {
  for (const StreamEntry& entry : store.stream_tail(keys::kGenerationLog, keys::kGenerationLogLength)) {
    try {
      take_entry(entry, &records);
    } catch (const InvalidArgument&) {
      // the watch logs garbage entries; here they only mean no delta
    }
  }
  return records.get(g);
}

}  // namespace hdp::elastic
