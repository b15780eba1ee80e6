// File: elastic/forwarding_store.h
//
// A Store that forwards every call to another one, through one virtual hook: around(op, call)
// runs each call, named by `op` ("get", "commit", ...). A subclass measures calls (the agent's
// Redis round-trip metrics, metrics/timed_store.h) or injects faults (tests: before_call(), or an
// override of a single call).
#pragma once

#include <functional>
#include <memory>
#include <type_traits>

#include "elastic/store.h"

namespace hdp::elastic {

class ForwardingStore : public Store {
 public:
  explicit ForwardingStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {}

  void set(std::string_view k, std::string_view v) override {
    around("set", [&] { inner_->set(k, v); });
  }
  void set_with_ttl(std::string_view k, std::string_view v, Duration t) override {
    around("set_with_ttl", [&] { inner_->set_with_ttl(k, v, t); });
  }
  Refresh refresh_ttl(std::string_view k, Duration t, std::optional<std::string_view> v,
                      const std::vector<std::string>& r) override {
    return forward("refresh_ttl", [&] { return inner_->refresh_ttl(k, t, v, r); });
  }
  std::optional<std::string> get(std::string_view k) override {
    return forward("get", [&] { return inner_->get(k); });
  }
  std::int64_t add(std::string_view k, std::int64_t d) override {
    return forward("add", [&] { return inner_->add(k, d); });
  }
  bool compare_and_set(std::string_view k, std::optional<std::string_view> e, std::string_view d) override {
    return forward("compare_and_set", [&] { return inner_->compare_and_set(k, e, d); });
  }
  bool erase(std::string_view k) override {
    return forward("erase", [&] { return inner_->erase(k); });
  }
  std::vector<std::string> keys(std::string_view p) override {
    return forward("keys", [&] { return inner_->keys(p); });
  }
  void wait(const std::vector<std::string>& k, Duration t) override {
    around("wait", [&] { inner_->wait(k, t); });
  }
  std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& k) override {
    return forward("multi_get", [&] { return inner_->multi_get(k); });
  }
  std::vector<std::optional<Duration>> remaining_ttl(const std::vector<std::string>& k) override {
    return forward("remaining_ttl", [&] { return inner_->remaining_ttl(k); });
  }
  std::map<std::string, std::string> hash_get_all(std::string_view k) override {
    return forward("hash_get_all", [&] { return inner_->hash_get_all(k); });
  }
  std::vector<StreamEntry> stream_tail(std::string_view k, std::size_t c) override {
    return forward("stream_tail", [&] { return inner_->stream_tail(k, c); });
  }
  std::vector<StreamEntry> stream_read(std::string_view k, std::string_view a, std::size_t c, Duration b) override {
    return forward("stream_read", [&] { return inner_->stream_read(k, a, c, b); });
  }
  void stop_stream_reads() override { inner_->stop_stream_reads(); }
  void interrupt_stream_reads() override { inner_->interrupt_stream_reads(); }
  CommitResult commit(const Transaction& t) override {
    return forward("commit", [&] { return inner_->commit(t); });
  }

 protected:
  // Runs one forwarded call: must run `call` exactly once, or throw instead of running it.
  virtual void around(const char* op, const std::function<void()>& call) {
    before_call();
    call();
  }
  virtual void before_call() {}

 private:
  template <typename F>
  std::invoke_result_t<F> forward(const char* op, F&& f) {
    std::invoke_result_t<F> result{};
    around(op, [&] { result = f(); });
    return result;
  }

  std::shared_ptr<Store> inner_;
};

}  // namespace hdp::elastic
