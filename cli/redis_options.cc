#include "cli/redis_options.h"

#include "common/error.h"

namespace hdp::cli {

void RedisOptions::add_to(CLI::App& command) {
  command.add_option("--redis", url,
                     "Redis URL: redis://[user[:password]@]host[:port][/db], unix:///path or "
                     "redis+sentinel://[user[:password]@]host1[:port1],host2[:port2],.../MASTER_NAME[/db]")
      ->envname("HDP_REDIS_URL")
      ->capture_default_str();
  command.add_option("--redis-password-file", password_file, "File holding the Redis password")
      ->envname("HDP_REDIS_PASSWORD_FILE");
  command.add_option("--sentinel-password-file", sentinel_password_file,
                     "File holding the password of the Redis sentinels (redis+sentinel:// URLs)")
      ->envname("HDP_SENTINEL_PASSWORD_FILE");
  timeout_option_ = command.add_option("--redis-timeout", timeout_ms, "Milliseconds to wait for Redis before giving up")
      ->envname("HDP_REDIS_TIMEOUT_MS")
      ->check(CLI::Range(1, 3'600'000))
      ->capture_default_str();
}

std::optional<std::chrono::milliseconds> RedisOptions::timeout_given() const {
  if (!timeout_option_ || timeout_option_->count() == 0) return std::nullopt;
  return std::chrono::milliseconds(timeout_ms);
}

elastic::RedisStoreOptions RedisOptions::store_options() const {
  const std::chrono::milliseconds timeout(timeout_ms);
  elastic::RedisStoreOptions options;
  options.connect_timeout = std::min(timeout, options.connect_timeout);
  options.command_timeout = timeout;
  options.retry_timeout = timeout;
  return options;
}

std::shared_ptr<elastic::RedisStore> RedisOptions::connect(const elastic::RedisStoreOptions& options) const {
  elastic::RedisEndpoint endpoint = elastic::parse_redis_url(url);
  if (!password_file.empty()) {
    if (endpoint.password) throw InvalidArgument("give the Redis password in the URL or in a file, not both");
    endpoint.password = elastic::read_password_file(password_file);
  }
  if (!sentinel_password_file.empty()) {
    if (!endpoint.is_sentinel()) {
      throw InvalidArgument("--sentinel-password-file needs a redis+sentinel:// URL, not '" +
                            elastic::mask_password(url) + "'");
    }
    endpoint.sentinel_password = elastic::read_password_file(sentinel_password_file);
  }
  return std::make_shared<elastic::RedisStore>(std::move(endpoint), options);
}

}  // namespace hdp::cli
