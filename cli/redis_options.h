// File: cli/redis_options.h
//
// The Redis connection flags every subcommand that talks to the store shares:
//   --redis URL               (env HDP_REDIS_URL, default redis://127.0.0.1:6379)
//   --redis-password-file F   (env HDP_REDIS_PASSWORD_FILE; keeps the password out of `ps`)
//   --sentinel-password-file F  (env HDP_SENTINEL_PASSWORD_FILE; the sentinels' own password, for a
//                             redis+sentinel:// URL only: the URL's credentials are the data nodes')
//   --redis-timeout MS        (env HDP_REDIS_TIMEOUT_MS; connect, command and retry budget)
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "elastic/redis_store.h"

namespace hdp::cli {

struct RedisOptions {
  std::string url = "redis://127.0.0.1:6379";
  std::string password_file;
  std::string sentinel_password_file;
  int timeout_ms = 5000;

  void add_to(CLI::App& command);
  // --redis-timeout when given on the command line or in the environment.
  std::optional<std::chrono::milliseconds> timeout_given() const;
  // The store timeouts --redis-timeout stands for: connect (at most 2 s), command and retry.
  elastic::RedisStoreOptions store_options() const;
  // Parses the URL (InvalidArgument on a bad one, or on a sentinel password file without a
  // redis+sentinel:// URL), reads the password files, connects.
  std::shared_ptr<elastic::RedisStore> connect() const { return connect(store_options()); }
  std::shared_ptr<elastic::RedisStore> connect(const elastic::RedisStoreOptions& options) const;

 private:
  CLI::Option* timeout_option_ = nullptr;
};

}  // namespace hdp::cli
