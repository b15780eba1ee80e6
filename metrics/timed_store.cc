#include "metrics/timed_store.h"

#include <chrono>

#include "common/error.h"

namespace hdp::metrics {

TimedStore::TimedStore(std::shared_ptr<elastic::Store> inner, Registry& registry, Labels labels)
    : ForwardingStore(std::move(inner)), registry_(registry), labels_(std::move(labels)) {
  registry_.describe("hdp_redis_request_seconds", Type::kHistogram,
                     "Wall time of one call to Redis, by operation (retries included)");
  registry_.describe("hdp_redis_errors_total", Type::kCounter,
                     "Calls to Redis that failed, by operation and kind (unavailable: unreachable past retries)");
}

void TimedStore::around(const char* op, const std::function<void()>& call) {
  Labels labels = labels_;
  labels["op"] = op;
  const auto started = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(); };
  try {
    call();
  } catch (const StoreUnavailable&) {
    registry_.observe("hdp_redis_request_seconds", labels, elapsed());
    labels["kind"] = "unavailable";
    registry_.add_counter("hdp_redis_errors_total", labels, 1);
    throw;
  } catch (...) {
    registry_.observe("hdp_redis_request_seconds", labels, elapsed());
    labels["kind"] = "other";
    registry_.add_counter("hdp_redis_errors_total", labels, 1);
    throw;
  }
  registry_.observe("hdp_redis_request_seconds", labels, elapsed());
}

}  // namespace hdp::metrics
