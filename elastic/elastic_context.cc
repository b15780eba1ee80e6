#include "elastic/elastic_context.h"

#include <charconv>
#include <cstdlib>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "elastic/job_keys.h"
#include "elastic/prefix_store.h"
#include "elastic/redis_store.h"

namespace hdp::elastic {
namespace {

using Clock = std::chrono::steady_clock;

std::string required_env(const char* name) {
  const char* value = std::getenv(name);
  if (!value || !*value) throw InvalidArgument(std::string("environment variable ") + name + " is not set");
  return value;
}

int env_int(const char* name) {
  const std::string text = required_env(name);
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0) {
    throw InvalidArgument(std::string("environment variable ") + name + "='" + text + "' is not a non-negative integer");
  }
  return value;
}

}  // namespace

ElasticContext::ElasticContext(std::shared_ptr<Store> job_store, WorkerIdentity identity)
    : store_(std::move(job_store)), identity_(std::move(identity)) {}

ElasticContext ElasticContext::from_environment() {
  WorkerIdentity identity;
  identity.job = required_env("HDP_JOB_ID");
  identity.node = required_env("HDP_NODE_ID");
  identity.incarnation = required_env("HDP_NODE_INCARNATION");
  identity.local_rank = env_int("HDP_LOCAL_RANK");
  if (const char* address = std::getenv("HDP_ADVERTISE_ADDR"); address && *address) identity.advertise_address = address;
  RedisEndpoint endpoint = parse_redis_url(required_env("HDP_REDIS_URL"));
  if (const char* file = std::getenv("HDP_REDIS_PASSWORD_FILE"); file && *file) {
    endpoint.password = read_password_file(file);
  }
  RedisStoreOptions options;
  options.connect_timeout = std::chrono::seconds(1);
  options.command_timeout = std::chrono::seconds(2);
  options.retry_timeout = std::chrono::seconds(2);
  auto redis = std::make_shared<RedisStore>(std::move(endpoint), options);
  // Built before `identity` is moved into the constructor's argument.
  auto job_store = std::make_shared<PrefixStore>(redis, keys::job_namespace(identity.job));
  return ElasticContext(std::move(job_store), std::move(identity));
}

Membership ElasticContext::wait_for_next(std::int64_t after, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::int64_t reported = -1;
  for (;;) {
    try {
      auto number = store_->get(keys::kGeneration);
      const std::int64_t g = number ? decode_generation_number(*number, keys::kGeneration) : 0;
      if (g > after) {
        const std::string key = keys::generation(g);
        auto values = store_->multi_get({key, keys::broken(g)});
        const auto& record = values[0];
        if (record && !values[1]) {
          Generation generation = decode_generation(*record, key);
          auto rank = generation.rank_of(identity_.node, identity_.incarnation, identity_.local_rank);
          if (rank && generation.status == GenerationStatus::kRunning) {
            return Membership{g, *rank, generation.world_size(), std::move(generation)};
          }
          if (g != reported) {
            log()->info("worker {}/{}: generation {} is {}", identity_.node, identity_.local_rank, g,
                        rank ? "waiting for more nodes" : "without this worker; waiting for the next");
            reported = g;
          }
        }
      }
    } catch (const StoreUnavailable& e) {
      log()->warn("worker {}/{}: store unavailable while waiting for a generation: {}", identity_.node,
                  identity_.local_rank, e.what());
    }
    if (Clock::now() >= deadline) {
      throw TimeoutError("no running generation newer than " + std::to_string(after) + " included this worker within " +
                         std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

bool ElasticContext::changed(const Membership& m) {
  // What is cached is the generation last read, not the answer: an answer cached for one
  // generation must not leak into the next.
  const auto now = Clock::now();
  if (now - last_check_ >= std::chrono::milliseconds(100)) {
    last_check_ = now;
    try {
      auto number = store_->get(keys::kGeneration);
      last_seen_generation_ = number ? decode_generation_number(*number, keys::kGeneration) : 0;
    } catch (const StoreUnavailable&) {
      return false;  // keep training peer to peer; the next check asks again
    }
  }
  return last_seen_generation_ != 0 && last_seen_generation_ != m.generation;
}

std::optional<std::int64_t> ElasticContext::read_generation() const {
  try {
    auto number = store_->get(keys::kGeneration);
    return number ? decode_generation_number(*number, keys::kGeneration) : 0;
  } catch (const StoreUnavailable&) {
    return std::nullopt;
  } catch (const InvalidArgument& e) {
    log()->warn("worker {}/{}: {}", identity_.node, identity_.local_rank, e.what());
    return std::nullopt;
  }
}

void ElasticContext::report_broken(const Membership& m, const std::string& reason) {
  try {
    store_->commit(Transaction{}
                       .require(keys::kGeneration, std::to_string(m.generation))
                       .add(Write::set(keys::broken(m.generation), reason.substr(0, 300), std::chrono::hours(1))));
  } catch (const StoreUnavailable& e) {
    log()->warn("worker {}/{}: could not report generation {} broken: {}", identity_.node, identity_.local_rank,
                m.generation, e.what());
  }
}

Bootstrap ElasticContext::bootstrap(const Membership& m) {
  return Bootstrap{m.generation, m.rank, m.world_size, identity_.advertise_address,
                   std::make_shared<PrefixStore>(store_, keys::bootstrap(m.generation)),
                   [this, m] { return changed(m); }};
}

}  // namespace hdp::elastic
