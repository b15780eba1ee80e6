#include "elastic/sentinel.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "common/text.h"

namespace hdp::elastic {
namespace {

using Duration = SentinelResolver::Duration;
using Clock = SentinelResolver::Clock;

// A sentinel is asked with a short timeout: one that does not answer at once is skipped
// (docs/reference/sentinel-clients.md: "a few hundreds of milliseconds").
constexpr Duration kSentinelConnectTimeout{500};
constexpr Duration kSentinelCommandTimeout{1000};

std::string host_port(const std::string& host, int port) {
  return (host.find(':') == std::string::npos ? host : "[" + host + "]") + ":" + std::to_string(port);
}

Duration left(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return Duration::max();
  return std::chrono::duration_cast<Duration>(deadline - Clock::now());
}

// Sentinel i is asked first next time (the others keep their order).
void ask_first(std::vector<std::pair<std::string, int>>& sentinels, std::size_t i) {
  std::rotate(sentinels.begin(), sentinels.begin() + static_cast<std::ptrdiff_t>(i),
              sentinels.begin() + static_cast<std::ptrdiff_t>(i) + 1);
}

bool auth_error(const std::string& text) {
  return text.starts_with("NOAUTH") || text.starts_with("WRONGPASS") || text.starts_with("NOPERM");
}

// The address in a reply to `SENTINEL get-master-addr-by-name` ([host, port]); nothing for a reply
// of another shape or a port that is not a number.
std::optional<std::pair<std::string, int>> master_address(const RedisReply& reply) {
  if (reply.type != RedisReply::Type::kArray || reply.elements.size() != 2) return std::nullopt;
  const std::string& port_text = reply.elements[1].str;
  int port = 0;
  if (std::from_chars(port_text.data(), port_text.data() + port_text.size(), port).ec != std::errc()) return std::nullopt;
  return std::pair(reply.elements[0].str, port);
}

}  // namespace

SentinelResolver::SentinelResolver(RedisEndpoint sentinel_endpoint) : endpoint_(std::move(sentinel_endpoint)) {
  if (!endpoint_.is_sentinel()) {
    throw InvalidArgument("redis at " + endpoint_.display() + " is not a redis+sentinel:// endpoint");
  }
}

ResolvedPrimary SentinelResolver::connect_primary(Duration connect_timeout, Duration command_timeout,
                                                  Clock::time_point deadline) {
  // Messages name the endpoint with its sentinels in the order they had when this resolution began.
  const std::string what = "redis " + endpoint_.display();
  const auto [host, port] = find_address(what, connect_timeout, command_timeout, deadline);
  ResolvedPrimary primary;
  primary.endpoint = endpoint_;
  primary.endpoint.sentinels.clear();
  primary.endpoint.master_name.clear();
  primary.endpoint.sentinel_password.reset();
  primary.endpoint.host = host;
  primary.endpoint.port = port;
  const Duration remaining = left(deadline);
  if (remaining <= Duration(0)) {
    throw StoreUnavailable(what + ": no time left to connect to " + primary.endpoint.display());
  }
  // RedisIoError (unreachable: the primary was just lost and the sentinels have not failed over
  // yet) and AuthError (the data nodes' credentials) go to the caller as they are.
  primary.connection = std::make_unique<RedisConnection>(
      primary.endpoint, std::clamp(connect_timeout, Duration(1), remaining), command_timeout);
  if (check_role(what, primary, command_timeout, deadline)) {
    check_confirmed(what, primary.endpoint, connect_timeout, command_timeout, deadline);
  }
  return primary;
}

std::pair<std::string, int> SentinelResolver::find_address(const std::string& what, Duration connect_timeout,
                                                           Duration command_timeout, Clock::time_point deadline) {
  auto& sentinels = endpoint_.sentinels;
  AddressSearch search;
  for (std::size_t i = 0; i < sentinels.size() && !search.answer; ++i) {
    const Duration remaining = left(deadline);
    if (remaining <= Duration(0)) {
      search.last_error = "no time left to ask " + host_port(sentinels[i].first, sentinels[i].second);
      search.every_one_asked = false;
      break;
    }
    ask_address(what, i, connect_timeout, command_timeout, remaining, search);
  }
  if (!search.answer) {
    if (!search.knew_nothing.empty()) {
      // A mistyped name: retrying would not help (a sentinel that did not answer is not asked).
      throw InvalidArgument(what + ": the sentinels at " + join(search.knew_nothing) + " do not know a master named '" +
                            endpoint_.master_name + "'");
    }
    if (!search.auth_failure.empty()) throw AuthError(what + ": " + search.auth_failure);
    const std::string message =
        what + ": no sentinel of " + std::to_string(sentinels.size()) + " answered: " + search.last_error;
    if (search.every_one_asked) throw SentinelsUnreachable(message);
    throw StoreUnavailable(message);
  }
  // The one that answered is asked first next time.
  ask_first(sentinels, search.answered_by);
  return *search.answer;
}

void SentinelResolver::ask_address(const std::string& what, std::size_t i, Duration connect_timeout,
                                   Duration command_timeout, Duration remaining, AddressSearch& search) const {
  const std::string where = host_port(endpoint_.sentinels[i].first, endpoint_.sentinels[i].second);
  try {
    const auto connection = connect_sentinel(i, connect_timeout, command_timeout, remaining);
    const RedisReply reply = connection->command({"SENTINEL", "get-master-addr-by-name", endpoint_.master_name});
    if (reply.type == RedisReply::Type::kNil) {
      search.knew_nothing.push_back(where);
      log()->debug("{}: the sentinel at {} knows no master named '{}'", what, where, endpoint_.master_name);
      return;
    }
    if (reply.type == RedisReply::Type::kError) {
      if (auth_error(reply.str)) {
        search.auth_failure = "the sentinel at " + where + " refused SENTINEL get-master-addr-by-name: " + reply.str;
      }
      search.last_error = "the sentinel at " + where + " answered '" + reply.str + "'";
      return;
    }
    const auto address = master_address(reply);
    if (!address || address->second <= 0 || address->second > 65535 || address->first.empty()) {
      search.last_error = "the sentinel at " + where + " gave no address for master '" + endpoint_.master_name + "'";
      return;
    }
    search.answer = address;
    search.answered_by = i;
  } catch (const AuthError&) {
    // RedisConnection's message points at --redis-password-file; this is the sentinels' password.
    search.auth_failure =
        endpoint_.sentinel_password
            ? "the sentinel at " + where + " refused the sentinel password (--sentinel-password-file)"
            : "the sentinel at " + where + " requires a password (give it with --sentinel-password-file)";
    search.last_error = search.auth_failure;
  } catch (const Error& e) {  // RedisIoError: refused, reset, timed out
    search.last_error = e.what();
  }
}

std::unique_ptr<RedisConnection> SentinelResolver::connect_sentinel(std::size_t i, Duration connect_timeout,
                                                                    Duration command_timeout, Duration remaining) const {
  RedisEndpoint sentinel;
  sentinel.host = endpoint_.sentinels[i].first;
  sentinel.port = endpoint_.sentinels[i].second;
  sentinel.password = endpoint_.sentinel_password;
  return std::make_unique<RedisConnection>(
      sentinel, std::clamp(std::min(connect_timeout, kSentinelConnectTimeout), Duration(1), remaining),
      std::clamp(std::min(command_timeout, kSentinelCommandTimeout), Duration(1), remaining));
}

bool SentinelResolver::check_role(const std::string& what, ResolvedPrimary& primary, Duration command_timeout,
                                  Clock::time_point deadline) {
  primary.connection->set_command_timeout(std::clamp(command_timeout, Duration(1), left(deadline)));
  const RedisReply role = primary.connection->command({"ROLE"});
  primary.connection->set_command_timeout(command_timeout);
  if (role.type == RedisReply::Type::kError && role.str.starts_with("NOPERM")) {
    // An ACL user without ROLE: the address cannot be checked; a write on a replica will still
    // be refused with READONLY, which makes RedisStore resolve again.
    log()->debug("{}: user '{}' may not run ROLE on {}; using it unchecked", what, primary.endpoint.user,
                 primary.endpoint.display());
    return false;
  }
  if (!says_master(role)) {
    const std::string said = role.type == RedisReply::Type::kError ? "'" + role.str + "'"
                             : role.elements.empty()                ? "nothing"
                                                                    : role.elements[0].str;
    // Ask another sentinel first next time: this one has not seen the failover yet.
    auto& sentinels = endpoint_.sentinels;
    std::rotate(sentinels.begin(), sentinels.begin() + 1, sentinels.end());
    throw StoreUnavailable(what + ": " + primary.endpoint.display() + " answered ROLE " + said + " (a stale sentinel)");
  }
  return true;
}

void SentinelResolver::check_confirmed(const std::string& what, const RedisEndpoint& primary,
                                       Duration connect_timeout, Duration command_timeout,
                                       Clock::time_point deadline) {
  // A primary that was paused while the sentinels failed over answers ROLE master once it resumes,
  // until they demote it, and a sentinel that was cut off or slow still names it then: a
  // connection opened across that moment would read old data and write into data the demotion
  // discards. So every sentinel is asked again now, and the primary is the address of the newest
  // configuration (the highest config-epoch: each failover raises it): refused when a sentinel
  // whose configuration is at least as new as any naming this node names another.
  const Confirmation c = confirm(primary, connect_timeout, command_timeout, deadline);
  // No sentinel confirmed because the time ran out (a connection that waited on a paused node
  // leaves none, and the paused node may be the old primary, resumed): not confirmed, refused.
  // Every sentinel asked and none answering: no failover can happen now, the ROLE check stands
  // (as RedisStore's fallback).
  if (!c.answered && c.out_of_time) {
    throw StoreUnavailable(what + ": " + primary.display() +
                           " answers ROLE master, but no time was left to confirm it with the sentinels");
  }
  if (c.moved()) {
    auto& sentinels = endpoint_.sentinels;
    ask_first(sentinels, c.other->first);
    throw StoreUnavailable(what + ": " + primary.display() + " answers ROLE master, but the sentinel at " +
                           host_port(sentinels.front().first, sentinels.front().second) + " names " +
                           host_port(c.other->second.host, c.other->second.port) + " (configuration epoch " +
                           std::to_string(c.other->second.epoch) +
                           (c.ours >= 0 ? ", against " + std::to_string(c.ours) : std::string()) +
                           "): the primary moved, or is moving");
  }
}

SentinelResolver::Confirmation SentinelResolver::confirm(const RedisEndpoint& primary, Duration connect_timeout,
                                                         Duration command_timeout, Clock::time_point deadline) {
  Confirmation c;
  std::optional<Duration> down_after;
  for (std::size_t i = 0; i < endpoint_.sentinels.size(); ++i) {
    const auto view = ask_sentinel(i, connect_timeout, command_timeout, deadline);
    if (!view) {
      c.out_of_time |= left(deadline) <= Duration(0);
      continue;
    }
    c.answered = true;
    if (view->down_after_ms > 0) down_after = std::min(down_after.value_or(Duration::max()), Duration(view->down_after_ms));
    if (view->host == primary.host && view->port == primary.port) {
      c.ours = std::max(c.ours, view->epoch);
    } else if (!c.other || view->epoch > c.other->second.epoch) {
      c.other.emplace(i, *view);
    }
  }
  if (down_after) down_after_ = down_after;
  return c;
}

std::optional<std::string> SentinelResolver::named_instead(const RedisEndpoint& primary, Duration connect_timeout,
                                                           Duration command_timeout, Clock::time_point deadline) {
  const Confirmation c = confirm(primary, connect_timeout, command_timeout, deadline);
  if (!c.moved()) return std::nullopt;
  ask_first(endpoint_.sentinels, c.other->first);  // the newest-configured one
  return host_port(c.other->second.host, c.other->second.port);
}

std::optional<SentinelResolver::SentinelView> SentinelResolver::ask_sentinel(std::size_t i, Duration connect_timeout,
                                                                            Duration command_timeout,
                                                                            Clock::time_point deadline) const {
  const Duration remaining = left(deadline);
  if (remaining <= Duration(0) || i >= endpoint_.sentinels.size()) return std::nullopt;
  try {
    const auto connection = connect_sentinel(i, connect_timeout, command_timeout, remaining);
    // One round trip: the address it gives clients, and its view's configuration epoch.
    const auto replies = connection->pipeline({{"SENTINEL", "get-master-addr-by-name", endpoint_.master_name},
                                               {"SENTINEL", "master", endpoint_.master_name}});
    const auto address = master_address(replies.at(0));
    if (!address) return std::nullopt;
    SentinelView view{address->first, address->second, 0};
    const RedisReply& master = replies.at(1);
    for (std::size_t f = 0; master.type == RedisReply::Type::kArray && f + 1 < master.elements.size(); f += 2) {
      const std::string& name = master.elements[f].str;
      std::int64_t* field = name == "config-epoch"              ? &view.epoch
                            : name == "down-after-milliseconds" ? &view.down_after_ms
                                                                : nullptr;
      if (!field) continue;
      const std::string& text = master.elements[f + 1].str;
      if (std::from_chars(text.data(), text.data() + text.size(), *field).ec != std::errc()) *field = 0;
    }
    return view;
  } catch (const Error&) {
    return std::nullopt;  // cannot confirm: the ROLE check stands
  }
}

bool says_master(const RedisReply& role) {
  return role.type == RedisReply::Type::kArray && !role.elements.empty() && role.elements[0].str == "master";
}

RedisEndpoint resolve_primary(const RedisEndpoint& sentinel_endpoint, std::chrono::milliseconds connect_timeout,
                              std::chrono::milliseconds command_timeout) {
  SentinelResolver resolver(sentinel_endpoint);
  return resolver.connect_primary(connect_timeout, command_timeout).endpoint;
}

}  // namespace hdp::elastic
