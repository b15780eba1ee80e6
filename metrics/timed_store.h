// File: metrics/timed_store.h
//
// A Store that times every call to the store it wraps and counts the calls that threw, into a
// Registry: hdp_redis_request_seconds{op} (histogram, the call's wall time, retries included) and
// hdp_redis_errors_total{op,kind} (kind: "unavailable" for StoreUnavailable, "other" for the rest).
// The agent wraps its job store in one, so /metrics shows Redis' round-trip time and errors.
#pragma once

#include <memory>

#include "elastic/forwarding_store.h"
#include "metrics/registry.h"

namespace hdp::metrics {

class TimedStore final : public elastic::ForwardingStore {
 public:
  // Describes both families in `registry`, which must outlive this store.
  TimedStore(std::shared_ptr<elastic::Store> inner, Registry& registry, Labels labels);

 protected:
  void around(const char* op, const std::function<void()>& call) override;

 private:
  Registry& registry_;
  const Labels labels_;
};

}  // namespace hdp::metrics
