// File: tests/elastic/forwarding_store.h
//
// A Store that forwards every call to another one, for tests that inject faults between a client
// and its store: override before_call() (called first in every call) or single calls.
#pragma once

#include <memory>

#include "elastic/store.h"

namespace hdp::elastic::test {

class ForwardingStore : public Store {
 public:
  explicit ForwardingStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {}

  void set(std::string_view k, std::string_view v) override {
    before_call();
    inner_->set(k, v);
  }
  void set_with_ttl(std::string_view k, std::string_view v, Duration t) override {
    before_call();
    inner_->set_with_ttl(k, v, t);
  }
  Refresh refresh_ttl(std::string_view k, Duration t, std::optional<std::string_view> v,
                      const std::vector<std::string>& r) override {
    before_call();
    return inner_->refresh_ttl(k, t, v, r);
  }
  std::optional<std::string> get(std::string_view k) override {
    before_call();
    return inner_->get(k);
  }
  std::int64_t add(std::string_view k, std::int64_t d) override {
    before_call();
    return inner_->add(k, d);
  }
  bool compare_and_set(std::string_view k, std::optional<std::string_view> e, std::string_view d) override {
    before_call();
    return inner_->compare_and_set(k, e, d);
  }
  bool erase(std::string_view k) override {
    before_call();
    return inner_->erase(k);
  }
  std::vector<std::string> keys(std::string_view p) override {
    before_call();
    return inner_->keys(p);
  }
  void wait(const std::vector<std::string>& k, Duration t) override {
    before_call();
    inner_->wait(k, t);
  }
  std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& k) override {
    before_call();
    return inner_->multi_get(k);
  }
  std::map<std::string, std::string> hash_get_all(std::string_view k) override {
    before_call();
    return inner_->hash_get_all(k);
  }
  std::vector<StreamEntry> stream_tail(std::string_view k, std::size_t c) override {
    before_call();
    return inner_->stream_tail(k, c);
  }
  CommitResult commit(const Transaction& t) override {
    before_call();
    return inner_->commit(t);
  }

 protected:
  virtual void before_call() {}

 private:
  std::shared_ptr<Store> inner_;
};

}  // namespace hdp::elastic::test
