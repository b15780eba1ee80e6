// File: elastic/prefix_store.h
//
// A Store decorator that puts every key under a fixed prefix (a job's namespace `hdp:<job>:`,
// a generation's `...gen:<g>:`), so that several jobs and generations share one server without
// seeing each other's keys. keys() returns names with the prefix removed.
#pragma once

#include <memory>
#include <string>

#include "elastic/store.h"

namespace hdp::elastic {

class PrefixStore final : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> inner, std::string prefix);

  const std::string& prefix() const { return prefix_; }

  void set(std::string_view key, std::string_view value) override;
  void set_with_ttl(std::string_view key, std::string_view value, Duration ttl) override;
  Refresh refresh_ttl(std::string_view key, Duration ttl, std::optional<std::string_view> new_value,
                      const std::vector<std::string>& reads) override;
  std::optional<std::string> get(std::string_view key) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  bool compare_and_set(std::string_view key, std::optional<std::string_view> expected,
                       std::string_view desired) override;
  bool erase(std::string_view key) override;
  std::vector<std::string> keys(std::string_view prefix) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys) override;
  std::vector<std::optional<Duration>> remaining_ttl(const std::vector<std::string>& keys) override;
  std::map<std::string, std::string> hash_get_all(std::string_view key) override;
  std::vector<StreamEntry> stream_tail(std::string_view key, std::size_t count) override;
  std::vector<StreamEntry> stream_read(std::string_view key, std::string_view after, std::size_t count,
                                       Duration block) override;
  void stop_stream_reads() override;
  void interrupt_stream_reads() override;
  CommitResult commit(const Transaction& transaction) override;

 private:
  std::string scoped(std::string_view key) const;
  std::vector<std::string> scoped(const std::vector<std::string>& keys) const;
  // Runs `call`, rethrowing a WrongType of one of our keys with the key as our caller names it.
  template <typename Call>
  auto unscoped_errors(Call&& call) const -> decltype(call());

  std::shared_ptr<Store> inner_;
  std::string prefix_;
};

}  // namespace hdp::elastic
