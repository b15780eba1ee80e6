#include "elastic/job_state.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>

#include "common/error.h"
#include "common/log.h"
#include "common/text.h"
#include "elastic/job_keys.h"
#include "elastic/leader_lease.h"

namespace hdp::elastic {

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Write event_write(const std::string& type, Fields details) {
  Fields fields{{"type", type}, {"time_ms", std::to_string(now_ms())}};
  fields.insert(fields.end(), details.begin(), details.end());
  return Write::stream_append(keys::kEvents, std::move(fields), kEventsKept);
}

Write sample_write(Fields fields) { return Write::stream_append(keys::kSamples, std::move(fields), kSamplesKept); }

CommitResult commit_with_job_state(Store& store, const Transaction& txn) {
  try {
    return store.commit(txn);
  } catch (const WrongType& e) {
    const std::string_view key = e.key();
    const char* what = key == keys::kState          ? "state hash"
                       : key == keys::kEvents        ? "event stream"
                       : key == keys::kSamples       ? "sample stream"
                       : key == keys::kGenerationLog ? "generation log"
                                                     : nullptr;
    if (!what) throw;
    log()->warn("erasing Redis key {}: it holds a value of another type than the job's {} ({})", quote_value(e.key()),
                what, e.what());
    store.erase(e.key());
    return store.commit(txn);
  }
}

void JobState::event(const std::string& type, Fields details) {
  commit_with_job_state(*store_, Transaction{}.add(event_write(type, std::move(details))));
}

bool JobState::fenced_update(std::int64_t generation, Fields fields, std::vector<Write> writes) {
  return fenced_update_and_read(generation, std::move(fields), std::move(writes), {}).applied;
}

CommitResult JobState::fenced_update_and_read(std::int64_t generation, Fields fields, std::vector<Write> writes,
                                              std::vector<std::string> reads) {
  fields.emplace_back("updated_at_ms", std::to_string(now_ms()));
  Transaction txn;
  txn.require(keys::kGeneration, std::to_string(generation)).add(Write::hash_set(keys::kState, std::move(fields)));
  for (auto& write : writes) txn.add(std::move(write));
  for (auto& key : reads) txn.read(std::move(key));
  return commit_with_job_state(*store_, txn);
}

bool JobState::complete(std::int64_t generation, std::int64_t step) {
  const std::string step_text = std::to_string(step), generation_text = std::to_string(generation);
  Transaction txn;
  txn.require(keys::kGeneration, generation_text)
      .add(Write::hash_set(keys::kState, {{"status", "completed"}, {"step", step_text},
                                          {"updated_at_ms", std::to_string(now_ms())}}))
      .add(Write::set(keys::kOutcome, "completed"))
      .add(event_write("completed", {{"step", step_text}, {"generation", generation_text}}));
  return commit_with_job_state(*store_, txn);
}

bool JobState::stop(std::int64_t generation, std::int64_t step) {
  Transaction txn;
  txn.require(keys::kGeneration, std::to_string(generation))
      .add(Write::hash_set(keys::kState, {{"status", "stopped"}, {"step", std::to_string(step)},
                                          {"updated_at_ms", std::to_string(now_ms())}}))
      .add(Write::set(keys::kOutcome, "stopped"));
  return commit_with_job_state(*store_, txn);
}

bool clear_stopped_outcome(Store& job_store) {
  Transaction txn;
  txn.require(keys::kOutcome, "stopped").add(Write::erase(keys::kOutcome));
  // The stop's time, from the state as the stop left it (nothing writes it while the job is stopped:
  // every writer is fenced by the generation or the outcome). Most agents start for a job that is
  // not stopped: one read of `outcome` then, and no commit. A key holding a value of another type
  // adds nothing, and the commit decides as it always did: resuming the job matters more than its
  // ETTR. A store that does not answer fails here as the commit would (RecoverableError), once.
  try {
    if (job_store.get(keys::kOutcome) != std::optional<std::string>("stopped")) return false;
    if (const auto idle = resumed_idle_ms(job_store.hash_get_all(keys::kState), now_ms())) {
      txn.add(Write::hash_set(keys::kState, {{goodput::kIdleMs, std::to_string(*idle)}}));
    }
  } catch (const FatalError& e) {
    log()->debug("the job's outcome or state could not be read ({}): the time it stood stopped is not recorded",
                 e.what());
  }
  return commit_with_job_state(job_store, txn).applied;
}

std::vector<double> parse_number_list(const std::string& field, const std::string& value) {
  std::vector<double> numbers;
  std::size_t begin = 0;
  while (begin <= value.size()) {
    const std::size_t end = std::min(value.find(',', begin), value.size());
    double number = 0;
    auto [stop, ec] = std::from_chars(value.data() + begin, value.data() + end, number);
    if (end == begin || ec != std::errc() || stop != value.data() + end || !std::isfinite(number)) {
      throw InvalidArgument("invalid value in Redis key 'state': field " + quote_value(field) + " is " +
                            quote_value(value) + ", not a comma-separated list of finite numbers");
    }
    numbers.push_back(number);
    begin = end + 1;
  }
  return numbers;
}

void validate_state_field(const std::string& field, const std::string& value) {
  static const std::set<std::string> integers(std::begin(kIntegerStateFields), std::end(kIntegerStateFields));
  static const std::set<std::string> numbers(std::begin(kNumberStateFields), std::end(kNumberStateFields));
  // Every field reaches `hdp status --json`, and JSON text is UTF-8.
  if (!is_valid_utf8(field)) {
    throw InvalidArgument("invalid value in Redis key 'state': field name " + quote_value(field) + " is not UTF-8");
  }
  if (!is_valid_utf8(value)) {
    throw InvalidArgument("invalid value in Redis key 'state': field " + quote_value(field) + " is " +
                          quote_value(value) + ", not UTF-8");
  }
  if (field == "status") {
    if (std::find(std::begin(kStatuses), std::end(kStatuses), value) == std::end(kStatuses)) {
      throw InvalidArgument("invalid value in Redis key 'state': status " + quote_value(value) +
                            " is not one of waiting, running, resizing, restoring, draining, completed, failed, "
                            "stopped");
    }
  } else if (std::find(std::begin(kNumberListStateFields), std::end(kNumberListStateFields), field) !=
             std::end(kNumberListStateFields)) {
    parse_number_list(field, value);
  } else if (numbers.count(field)) {
    double number = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), number);
    if (value.empty() || ec != std::errc() || end != value.data() + value.size() || !std::isfinite(number)) {
      throw InvalidArgument("invalid value in Redis key 'state': field " + quote_value(field) + " is " +
                            quote_value(value) + ", not a finite number");
    }
  } else if (integers.count(field)) {
    std::int64_t number = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), number);
    if (value.empty() || ec != std::errc() || end != value.data() + value.size() || number < 0) {
      throw InvalidArgument("invalid value in Redis key 'state': field " + quote_value(field) + " is " +
                            quote_value(value) + ", not an integer in [0, " +
                            std::to_string(std::numeric_limits<std::int64_t>::max()) + "]");
    }
  }
}

void validate_event(const StreamEntry& entry) {
  for (const auto& [field, value] : entry.fields) {
    if (!is_valid_utf8(field) || !is_valid_utf8(value)) {
      throw InvalidArgument("invalid value in Redis key 'events': entry " + quote_value(entry.id) + " field " +
                            quote_value(field) + " is " + quote_value(value) + ", not UTF-8");
    }
  }
}

void validate_sample(const StreamEntry& entry) {
  for (const auto& [field, value] : entry.fields) {
    double number = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), number);
    const bool known = std::find_if(std::begin(kSampleFields), std::end(kSampleFields),
                                    [&](const char* name) { return field == name; }) != std::end(kSampleFields);
    if (!known || value.empty() || ec != std::errc() || end != value.data() + value.size() || !std::isfinite(number)) {
      throw InvalidArgument("invalid value in Redis key 'samples': entry " + quote_value(entry.id) + " field " +
                            quote_value(field) + " is " + quote_value(value) +
                            (known ? ", not a finite number" : ", not a field of a sample"));
    }
  }
}

bool job_completed(Store& job_store) {
  try {
    return job_store.get(keys::kOutcome) == "completed";
  } catch (const Error& e) {
    log()->debug("cannot read the job's outcome: {}", e.what());
    return false;
  }
}

void StorePrimaryRecord::record(const std::string& primary, int connection) {
  if (primary.empty() || (primary == confirmed_ && connection == confirmed_connection_)) return;
  const std::optional<std::string> recorded = store_.get(keys::kStorePrimary);
  // Already recorded (by another agent, or before a reconnection to the same node); or, for a
  // plain endpoint, any first record stands.
  if (recorded == primary || (recorded && !count_moves_)) {
    confirmed_ = primary;
    confirmed_connection_ = connection;
    return;
  }
  // Lost a race with another agent: the next call reads what it wrote.
  if (!store_.compare_and_set(keys::kStorePrimary, recorded, primary)) return;
  confirmed_ = primary;
  confirmed_connection_ = connection;
  if (!recorded) return;  // the first record: no move
  const std::int64_t count = store_.add(keys::kStoreFailovers, 1);
  log()->info("the store's primary moved from {} to {}: recorded as the job's failover {}", quote_value(*recorded),
              quote_value(primary), count);
}

bool JobState::exists() {
  auto values = store_->multi_get({keys::kGeneration, keys::kConfig});
  return values[0] || values[1] || !store_->hash_get_all(keys::kState).empty();
}

JobSnapshot JobState::snapshot(std::size_t event_count, std::size_t sample_count) {
  JobSnapshot snapshot;
  // get, not multi_get: a key of another type must be named, not read as missing.
  if (auto number = store_->get(keys::kGeneration)) snapshot.generation = decode_generation_number(*number, keys::kGeneration);
  snapshot.leader = store_->get(keys::kLeader);
  if (snapshot.leader && !is_leader_id(*snapshot.leader)) {
    throw InvalidArgument("invalid value in Redis key 'leader': " + quote_value(*snapshot.leader) +
                          " is not <node>/<incarnation>");
  }
  if (snapshot.generation > 0) {
    const std::string key = keys::generation(snapshot.generation);
    auto record = store_->get(key);
    if (!record) throw InvalidArgument("Redis key " + quote_value(key) + " is missing although 'gen' names it");
    snapshot.members = decode_generation(*record, key);
    if (snapshot.members->number != snapshot.generation) {
      throw InvalidArgument("invalid value in Redis key " + quote_value(key) + ": it describes generation " +
                            std::to_string(snapshot.members->number));
    }
    std::vector<std::string> lease_keys;
    for (const auto& member : snapshot.members->members) lease_keys.push_back(keys::lease(member.node, member.incarnation));
    auto leases = store_->multi_get(lease_keys);
    const auto left = store_->remaining_ttl(lease_keys);
    for (std::size_t i = 0; i < leases.size(); ++i) {
      if (!leases[i]) continue;
      const std::string& node = snapshot.members->members[i].node;
      const NodeLease lease = decode_node_lease(*leases[i], lease_keys[i]);
      if (lease.lease_ms > 0 && i < left.size() && left[i]) {
        snapshot.lease_ages[node] = std::max(Store::Duration(0), Store::Duration(lease.lease_ms) - *left[i]);
      }
      snapshot.leases.emplace(node, lease);
    }
  }
  if (auto evictions = store_->get(keys::kEvictions)) snapshot.evictions = decode_evictions(*evictions, keys::kEvictions);
  if (auto requests = store_->get(keys::kControl)) snapshot.requests = decode_control(*requests, keys::kControl);
  if (auto cordons = store_->get(keys::kCordons)) snapshot.cordons = decode_cordons(*cordons, keys::kCordons);
  if (auto settings = store_->get(keys::kSettings)) snapshot.settings = decode_settings(*settings, keys::kSettings);
  snapshot.store_primary = store_->get(keys::kStorePrimary);
  if (snapshot.store_primary && !is_valid_utf8(*snapshot.store_primary)) {
    throw InvalidArgument("invalid value in Redis key 'store_primary': " + quote_value(*snapshot.store_primary) +
                          " is not UTF-8");
  }
  if (auto failovers = store_->get(keys::kStoreFailovers)) {
    snapshot.store_failovers = decode_counter(*failovers, keys::kStoreFailovers, std::numeric_limits<std::int64_t>::max());
  }
  snapshot.state = store_->hash_get_all(keys::kState);
  for (const auto& [field, value] : snapshot.state) validate_state_field(field, value);
  snapshot.events = store_->stream_tail(keys::kEvents, event_count);
  for (const auto& entry : snapshot.events) validate_event(entry);
  if (sample_count > 0) {
    snapshot.samples = store_->stream_tail(keys::kSamples, sample_count);
    for (const auto& entry : snapshot.samples) validate_sample(entry);
  }
  return snapshot;
}

}  // namespace hdp::elastic
