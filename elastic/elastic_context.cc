#include "elastic/elastic_context.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <set>
#include <tuple>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "common/text.h"
#include "elastic/job_keys.h"
#include "elastic/prefix_store.h"
#include "elastic/redis_store.h"
#include "elastic/worker_env.h"

namespace hdp::elastic {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

ElasticContext::ElasticContext(std::shared_ptr<Store> job_store, WorkerIdentity identity,
                               std::chrono::milliseconds bad_value_limit, std::chrono::milliseconds channel_limit)
    : store_(std::move(job_store)),
      identity_(std::move(identity)),
      channel_(identity_.agent_channel.empty() ? nullptr : std::make_shared<AgentChannel>(identity_.agent_channel)),
      channel_limit_(channel_limit),
      bad_value_limit_(bad_value_limit) {}

ElasticContext ElasticContext::from_environment() {
  // The names and their parsing are the agent's contract (elastic/worker_env.h), shared with the
  // agent that writes them.
  const WorkerEnvironment env = read_worker_environment([](const char* name) { return std::getenv(name); });
  WorkerIdentity identity;
  identity.job = env.job;
  identity.node = env.node_id;
  identity.incarnation = env.incarnation;
  identity.local_rank = env.local_rank;
  identity.advertise_address = env.advertise_address;
  identity.nproc_per_node = env.nproc_per_node;
  identity.agent_pid = env.agent_pid;
  identity.metrics_file = env.metrics_file;
  identity.agent_channel = env.agent_channel;
  RedisEndpoint endpoint = parse_redis_url(env.redis_url);
  if (!env.redis_password_file.empty()) endpoint.password = read_password_file(env.redis_password_file);
  if (!env.sentinel_password_file.empty()) endpoint.sentinel_password = read_password_file(env.sentinel_password_file);
  RedisStoreOptions options;
  options.connect_timeout = std::chrono::seconds(1);
  options.command_timeout = std::chrono::seconds(2);
  options.retry_timeout = std::chrono::seconds(2);
  // A worker needs the store around a generation change (its bootstrap, a report), rank 0 at every
  // step: the others hold no connection while they train (docs/architecture.md).
  options.idle_close = kIdleClose;
  auto redis = std::make_shared<RedisStore>(std::move(endpoint), options);
  // Built before `identity` is moved into the constructor's argument.
  auto job_store = std::make_shared<PrefixStore>(redis, keys::job_namespace(identity.job));
  return ElasticContext(std::move(job_store), std::move(identity));
}

Membership ElasticContext::wait_for_next(std::int64_t after, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  // A worker that waits for a generation is set up: its node may be admitted (agent_channel.h).
  if (channel_) channel_->report_ready();
  std::int64_t reported = -1;
  std::int64_t known = 0;  // the generation number last read
  for (;;) {
    try {
      std::int64_t g = 0;
      if (channel_) {
        check_channel();
        g = channel_->generation().value_or(0);  // lost: nothing new until it is back
      } else {
        auto number = store_->get(keys::kGeneration);
        g = number ? decode_generation_number(*number, keys::kGeneration) : 0;
      }
      known = g;
      if (g > after) {
        const std::string key = keys::generation(g);
        const auto [record, broken] = read_record(g);
        if (record && !broken) {
          Generation generation = decode_generation(*record, key);
          if (generation.number != g) {
            throw InvalidArgument("invalid value in Redis key " + quote_value(key) + ": it describes generation " +
                                  std::to_string(generation.number));
          }
          auto rank = generation.rank_of(identity_.node, identity_.incarnation, identity_.local_rank);
          if (rank && generation.status == GenerationStatus::kRunning) {
            good_value();
            return Membership{g, *rank, generation.world_size(), std::move(generation)};
          }
          if (g != reported) {
            log()->info("worker {}/{}: generation {} is {}", identity_.node, identity_.local_rank, g,
                        rank ? "waiting for more nodes" : "without this worker; waiting for the next");
            reported = g;
          }
        }
      }
      good_value();
    } catch (const StoreUnavailable& e) {
      log()->warn("worker {}/{}: store unavailable while waiting for a generation: {}", identity_.node,
                  identity_.local_rank, e.what());
    } catch (const InvalidArgument& e) {
      bad_value(e);  // an error about that key: retried below, fatal only beyond the limit
    }
    if (Clock::now() >= deadline) {
      throw TimeoutError("no running generation newer than " + std::to_string(after) + " included this worker within " +
                         std::to_string(timeout.count()) + " ms");
    }
    // With a channel, the number only changes when the agent says so; a read of the record that
    // failed (the store unreachable, a value that does not decode) is tried again after 500 ms.
    const auto remaining = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    wait_for_generation_change(known, std::clamp(remaining, std::chrono::milliseconds(1), std::chrono::milliseconds(500)));
  }
}

// Generation g's record, from the agent's channel when it sent it (else gen:<g>), and whether g
// is marked broken: the record's bytes come from Redis only when the agent could not relay them.
std::pair<std::shared_ptr<const std::string>, bool> ElasticContext::read_record(std::int64_t g) const {
  if (channel_) {
    if (auto relayed = channel_->record(g)) return {std::move(relayed), store_->get(keys::broken(g)).has_value()};
  }
  auto values = store_->multi_get({keys::generation(g), keys::broken(g)});
  auto record = values[0] ? std::make_shared<const std::string>(std::move(*values[0])) : nullptr;
  return {std::move(record), values[1].has_value()};
}

void ElasticContext::wait_for_generation_change(std::int64_t known, std::chrono::milliseconds timeout) const {
  if (channel_) {
    channel_->wait_for_change(known, timeout);
  } else {
    std::this_thread::sleep_for(std::min(std::chrono::milliseconds(50), timeout));
  }
}

void ElasticContext::check_channel() const {
  if (!channel_) return;
  const auto lost = channel_->lost_for();
  if (lost > channel_limit_) {
    throw Error("worker " + identity_.node + "/" + std::to_string(identity_.local_rank) + ": lost its agent's channel " +
                channel_->name() + " for " + std::to_string(lost.count()) + " ms (the limit is " +
                std::to_string(channel_limit_.count()) + " ms): " + channel_->lost_because());
  }
}

bool ElasticContext::changed(const Membership& m) {
  // What is cached is the generation last read, not the answer: an answer cached for one
  // generation must not leak into the next.
  if (channel_) {
    check_channel();
    const auto g = channel_->generation();
    return g && *g != 0 && *g != m.generation;
  }
  const auto now = Clock::now();
  // A number read before `m` was published is older than m, not a change: read again, once for m
  // (a read that fails keeps the rate limit).
  const bool stale = last_seen_generation_ < m.generation && forced_for_ != m.generation;
  if (now - last_check_ >= std::chrono::milliseconds(100) || stale) {
    last_check_ = now;
    if (stale) forced_for_ = m.generation;
    try {
      auto number = store_->get(keys::kGeneration);
      last_seen_generation_ = number ? decode_generation_number(*number, keys::kGeneration) : 0;
      read_for_ = m.generation;
      good_value();
    } catch (const StoreUnavailable&) {
      return false;  // keep training peer to peer; the next check asks again
    } catch (const InvalidArgument& e) {
      bad_value(e);  // throws beyond the limit
      return false;  // keep training, as through an outage; the next check asks again
    }
  }
  if (last_seen_generation_ == 0 || last_seen_generation_ == m.generation) return false;
  // An older number is a change only when read while m was known (a store restored from an older
  // snapshot); read before, it is m's past.
  return last_seen_generation_ > m.generation || read_for_ == m.generation;
}

bool ElasticContext::keeps_every_worker(const Membership& m, std::int64_t g) const {
  try {
    const std::string key = keys::generation(g);
    const auto [record, broken] = read_record(g);
    if (!record || broken) return false;
    const Generation next = decode_generation(*record, key);
    if (next.number != g || next.status != GenerationStatus::kRunning) return false;
    auto workers = [](const Generation& generation) {
      std::set<std::tuple<std::string, std::string, int>> set;
      for (const Member& member : generation.members) {
        for (int slot : member.slots) set.emplace(member.node, member.incarnation, slot);
      }
      return set;
    };
    const auto kept = workers(next), had = workers(m.record);
    return std::includes(kept.begin(), kept.end(), had.begin(), had.end());
  } catch (const Error&) {
    return false;  // unreachable or undecodable: not known to be the same
  }
}

std::optional<std::int64_t> ElasticContext::read_generation() const {
  if (channel_) return channel_->generation();
  try {
    auto number = store_->get(keys::kGeneration);
    return number ? decode_generation_number(*number, keys::kGeneration) : 0;
  } catch (const StoreUnavailable&) {
    return std::nullopt;
  } catch (const InvalidArgument& e) {
    // Every 200 ms from the watcher thread: one line per 5 s is enough.
    const std::int64_t now =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
    std::int64_t last = watch_logged_ms_->load();
    if (now - last >= 5000 && watch_logged_ms_->compare_exchange_strong(last, now)) {
      log()->warn("worker {}/{}: {}", identity_.node, identity_.local_rank, e.what());
    }
    return std::nullopt;
  }
}

void ElasticContext::bad_value(const InvalidArgument& error) {
  const auto now = Clock::now();
  ++bad_reads_;
  ++bad_reads_in_streak_;
  if (!bad_since_) {
    bad_since_ = now;
    bad_logged_ = now;
    log()->warn("worker {}/{}: {}; retrying (fatal only if it lasts {} ms)", identity_.node, identity_.local_rank,
                error.what(), bad_value_limit_.count());
  }
  const auto lasted = std::chrono::duration_cast<std::chrono::milliseconds>(now - *bad_since_);
  if (lasted > bad_value_limit_) {
    throw InvalidArgument(std::string(error.what()) + " (" + std::to_string(bad_reads_in_streak_) +
                          " bad reads over " + std::to_string(lasted.count()) + " ms, beyond the limit of " +
                          std::to_string(bad_value_limit_.count()) + " ms)");
  }
  if (now - bad_logged_ >= std::chrono::seconds(5)) {
    bad_logged_ = now;
    log()->warn("worker {}/{}: still {} ({} bad reads over {} ms)", identity_.node, identity_.local_rank, error.what(),
                bad_reads_in_streak_, lasted.count());
  }
}

void ElasticContext::good_value() {
  if (!bad_since_) return;
  log()->info("worker {}/{}: the store's values decode again after {} bad read(s)", identity_.node,
              identity_.local_rank, bad_reads_in_streak_);
  bad_since_.reset();
  bad_reads_in_streak_ = 0;
}

void ElasticContext::report_broken(const Membership& m, const std::string& reason, const AbandonReport& report) {
  try {
    const std::string abandoned = keys::abandoned(m.generation);
    store_->commit(Transaction{}
                       .require(keys::kGeneration, std::to_string(m.generation))
                       .add(Write::set(keys::broken(m.generation), reason.substr(0, 300), std::chrono::hours(1)))
                       .add(Write::hash_set(abandoned, {{std::to_string(m.rank), encode(report)}}))
                       .add(Write::expire(abandoned, std::chrono::hours(1))));
  } catch (const StoreUnavailable& e) {
    log()->warn("worker {}/{}: could not report generation {} broken: {}", identity_.node, identity_.local_rank,
                m.generation, e.what());
  }
  // After the store's report, which the leader decides from: the agent acts on it now.
  if (channel_) channel_->report_broken(m.generation);
}

Bootstrap ElasticContext::bootstrap(const Membership& m) {
  return Bootstrap{m.generation, m.rank, m.world_size, identity_.advertise_address,
                   std::make_shared<PrefixStore>(store_, keys::bootstrap(m.generation)),
                   identity_.job + "/" + keys::bootstrap(m.generation), [this, m] { return changed(m); }};
}

}  // namespace hdp::elastic
