// `hdp ping`: checks that the coordination store is reachable with the given URL and credentials,
// and prints the round-trip time and the server's version.
#include <chrono>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/redis_options.h"
#include "common/error.h"

namespace hdp::cli {
namespace {

std::string server_version(elastic::RedisStore& store) {
  elastic::RedisReply info = store.command({"INFO", "server"}, true);
  const std::string key = "redis_version:";
  auto pos = info.str.find(key);
  if (pos == std::string::npos) return "unknown";
  auto end = info.str.find_first_of("\r\n", pos);
  return info.str.substr(pos + key.size(), end - pos - key.size());
}

}  // namespace

void add_ping_command(CLI::App& app) {
  auto options = std::make_shared<RedisOptions>();
  auto count = std::make_shared<int>(3);
  CLI::App* command = app.add_subcommand("ping", "Check that the Redis store is reachable and time a round trip");
  options->add_to(*command);
  command->add_option("-n,--count", *count, "Round trips to time")->check(CLI::Range(1, 10000))->capture_default_str();
  command->callback([options, count] {
    auto store = options->connect();
    double best_us = 1e300;
    for (int i = 0; i < *count; ++i) {
      const auto start = std::chrono::steady_clock::now();
      elastic::RedisReply reply = store->command({"PING"}, true);
      const auto stop = std::chrono::steady_clock::now();
      if (reply.type != elastic::RedisReply::Type::kStatus || reply.str != "PONG") {
        throw StoreUnavailable("redis at " + store->endpoint().display() + " answered PING with '" + reply.str + "'");
      }
      best_us = std::min(best_us, std::chrono::duration<double, std::micro>(stop - start).count());
    }
    std::cout << "redis at " << store->endpoint().display() << ": PONG, redis " << server_version(*store)
              << ", best round trip " << static_cast<long>(best_us) << " us over " << *count << " ping(s)\n";
  });
}

}  // namespace hdp::cli
