#include "elastic/redis_url.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <tuple>

#include "common/error.h"

namespace hdp::elastic {
namespace {

constexpr int kSentinelPort = 26379;
constexpr std::string_view kSentinelScheme = "redis+sentinel://";

// The one rule for where a URL's credentials are, used both to parse them and to mask them in
// messages (so that the two can never disagree on which '@' ends the password):
//   - the credentials start after "scheme://" (at the start of the text when it has no scheme,
//     so that a URL typed without one is masked too) and end at the LAST '@' of the URL: the host,
//     port and database after them never contain '@', so every '@' before the last one belongs to
//     the credentials; a password may therefore hold '@', ':', '/', '?' or '#' unencoded;
//   - the user ends at the first ':' of the credentials; the password is everything after it;
//   - unix:// URLs have no credentials (the path may contain '@').
struct UrlSplit {
  std::string_view head;                       // "scheme://" (empty when there is no scheme)
  std::optional<std::string_view> credentials;  // between head and the last '@', when there is one
  std::string_view rest;                       // after the last '@' (or after head): host, port, db
};

UrlSplit split_credentials(std::string_view url) {
  const auto scheme_end = url.find("://");
  const std::size_t start = scheme_end == std::string_view::npos ? 0 : scheme_end + 3;
  UrlSplit split{url.substr(0, start), std::nullopt, url.substr(start)};
  if (url.starts_with("unix://")) return split;
  const auto at = url.rfind('@');
  if (at == std::string_view::npos || at < start) return split;
  split.credentials = url.substr(start, at - start);
  split.rest = url.substr(at + 1);
  return split;
}

// Where the password is in `url` (see split_credentials): {offset, length}, or nothing.
std::optional<std::pair<std::size_t, std::size_t>> password_span(std::string_view url) {
  const UrlSplit split = split_credentials(url);
  if (!split.credentials) return std::nullopt;
  const auto colon = split.credentials->find(':');
  if (colon == std::string_view::npos) return std::nullopt;  // a user, no password
  const std::size_t start = split.head.size() + colon + 1;
  return std::make_pair(start, split.credentials->size() - colon - 1);
}

[[noreturn]] void fail(std::string_view url, const std::string& reason) {
  throw InvalidArgument("invalid Redis URL '" + mask_password(url) + "': " + reason +
                        " (expected redis://[user[:password]@]host[:port][/db], unix:///path/to/socket or "
                        "redis+sentinel://[user[:password]@]host1[:port1],host2[:port2],.../MASTER_NAME[/db])");
}

int parse_int(std::string_view url, std::string_view text, int lo, int hi, const char* what) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < lo || value > hi) {
    fail(url, std::string(what) + " '" + std::string(text) + "' is not an integer in [" + std::to_string(lo) +
                  ", " + std::to_string(hi) + "]");
  }
  return value;
}

std::string percent_decode(std::string_view url, std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    unsigned value = 0;
    if (i + 2 >= text.size()) fail(url, "truncated percent-escape in the credentials");
    auto [end, ec] = std::from_chars(text.data() + i + 1, text.data() + i + 3, value, 16);
    if (ec != std::errc() || end != text.data() + i + 3) fail(url, "bad percent-escape in the credentials");
    out.push_back(static_cast<char>(value));
    i += 2;
  }
  return out;
}

RedisEndpoint parse_unix(std::string_view url, std::string_view rest) {
  RedisEndpoint endpoint;
  auto query = rest.find('?');
  std::string_view path = rest.substr(0, query);
  if (path.empty() || path.front() != '/') fail(url, "a unix socket path must be absolute");
  endpoint.socket_path = std::string(path);
  if (query != std::string_view::npos) {
    std::string_view params = rest.substr(query + 1);
    if (params.substr(0, 3) != "db=") fail(url, "the only query parameter of a unix URL is db=N");
    endpoint.db = parse_int(url, params.substr(3), 0, 1'000'000, "database number");
  }
  return endpoint;
}

// "host[:port]" or "[v6]:port" (no credentials): {host, port}; `default_port` when none is given.
std::pair<std::string, int> parse_host_port(std::string_view url, std::string_view authority, int default_port) {
  std::string host;
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string_view::npos) fail(url, "unterminated '[' in the host");
    host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') fail(url, "unexpected text after ']'");
      port = after.substr(1);
    }
  } else {
    auto colon = authority.rfind(':');
    host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (host.empty()) fail(url, "the host is missing");
  int number = default_port;
  if (!port.empty() || authority.ends_with(':')) number = parse_int(url, port, 1, 65535, "port");
  return {std::move(host), number};
}

// The credentials of a URL (see split_credentials) into `endpoint`.
void parse_credentials(std::string_view url, const UrlSplit& split, RedisEndpoint& endpoint) {
  if (!split.credentials) return;
  const auto colon = split.credentials->find(':');
  endpoint.user = percent_decode(url, split.credentials->substr(0, colon));
  if (colon != std::string_view::npos) endpoint.password = percent_decode(url, split.credentials->substr(colon + 1));
}

RedisEndpoint parse_tcp(std::string_view url) {
  RedisEndpoint endpoint;
  const UrlSplit split = split_credentials(url);
  parse_credentials(url, split, endpoint);
  const std::string_view rest = split.rest;
  auto slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    std::string_view db = rest.substr(slash + 1);
    if (!db.empty()) endpoint.db = parse_int(url, db, 0, 1'000'000, "database number");
  }
  std::tie(endpoint.host, endpoint.port) = parse_host_port(url, authority, endpoint.port);
  return endpoint;
}

// redis+sentinel://[user[:password]@]host1[:port1],host2[:port2],.../MASTER_NAME[/db]
RedisEndpoint parse_sentinel(std::string_view url) {
  RedisEndpoint endpoint;
  const UrlSplit split = split_credentials(url);
  parse_credentials(url, split, endpoint);
  const std::string_view rest = split.rest;
  const auto slash = rest.find('/');
  const std::string_view hosts = rest.substr(0, slash);
  if (hosts.empty()) fail(url, "the list of sentinels is empty");
  for (std::size_t start = 0;;) {
    const auto comma = hosts.find(',', start);
    const std::string_view entry = hosts.substr(start, comma == std::string_view::npos ? comma : comma - start);
    if (entry.empty()) fail(url, "an entry of the list of sentinels is empty");
    endpoint.sentinels.push_back(parse_host_port(url, entry, kSentinelPort));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (slash == std::string_view::npos) fail(url, "the master name is missing (after the sentinels: /MASTER_NAME)");
  const std::string_view path = rest.substr(slash + 1);
  const auto db_slash = path.find('/');
  endpoint.master_name = std::string(path.substr(0, db_slash));
  if (endpoint.master_name.empty()) fail(url, "the master name is missing (after the sentinels: /MASTER_NAME)");
  if (db_slash != std::string_view::npos) {
    const std::string_view db = path.substr(db_slash + 1);
    if (!db.empty()) endpoint.db = parse_int(url, db, 0, 1'000'000, "database number");
  }
  return endpoint;
}

}  // namespace

std::string mask_password(std::string_view url) {
  const auto span = password_span(url);
  if (!span) return std::string(url);
  return std::string(url.substr(0, span->first)) + "***" + std::string(url.substr(span->first + span->second));
}

std::pair<std::string, std::optional<std::string>> split_password(std::string_view url) {
  const auto span = password_span(url);
  if (!span) return {std::string(url), std::nullopt};
  // "user:pw@host" becomes "user@host"; ":pw@host" (no user) becomes "host".
  const std::size_t colon = span->first - 1, end = span->first + span->second;  // url[end] is the '@'
  const bool no_user = colon == split_credentials(url).head.size();
  std::string without(url.substr(0, colon));
  without += url.substr(no_user ? end + 1 : end);
  return {without, std::string(url.substr(span->first, span->second))};
}

void scrub_password(char* text) {
  std::string_view view(text);
  auto scheme = view.find("redis://");
  if (scheme == std::string_view::npos) scheme = view.find("rediss://");
  if (scheme == std::string_view::npos) scheme = view.find(kSentinelScheme);
  if (scheme == std::string_view::npos) return;
  const auto span = password_span(view.substr(scheme));
  if (!span) return;
  std::fill_n(text + scheme + span->first, span->second, '*');
}

std::string RedisEndpoint::display() const {
  if (is_sentinel()) {
    // "alice@sentinel 'hdp'/2 via 10.0.0.1:26379,[::1]:26379"
    std::string text = (user.empty() ? "" : user + "@") + "sentinel '" + master_name + "'";
    if (db != 0) text += "/" + std::to_string(db);
    text += " via ";
    for (std::size_t i = 0; i < sentinels.size(); ++i) {
      const auto& [sentinel_host, sentinel_port] = sentinels[i];
      if (i > 0) text += ",";
      text += sentinel_host.find(':') == std::string::npos ? sentinel_host : "[" + sentinel_host + "]";
      text += ":" + std::to_string(sentinel_port);
    }
    return text;
  }
  std::string text = is_unix() ? "unix://" + socket_path : host + ":" + std::to_string(port);
  if (!user.empty()) text = user + "@" + text;
  if (db != 0) text += "/" + std::to_string(db);
  return text;
}

RedisEndpoint parse_redis_url(std::string_view url) {
  if (url.starts_with("redis://")) return parse_tcp(url);
  if (url.starts_with(kSentinelScheme)) return parse_sentinel(url);
  if (url.starts_with("unix://")) return parse_unix(url, url.substr(7));
  fail(url, "unknown scheme");
}

std::string read_password_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw InvalidArgument("cannot read the Redis password file '" + path + "'");
  std::stringstream content;
  content << file.rdbuf();
  std::string password = content.str();
  while (!password.empty() && (password.back() == '\n' || password.back() == '\r')) password.pop_back();
  if (password.empty()) throw InvalidArgument("the Redis password file '" + path + "' is empty");
  return password;
}

}  // namespace hdp::elastic
