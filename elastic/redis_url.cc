#include "elastic/redis_url.h"

#include <charconv>
#include <fstream>
#include <sstream>

#include "common/error.h"

namespace hdp::elastic {
namespace {

// The URL as it may be shown: the password between ':' and '@' replaced by "***".
std::string masked(std::string_view url) {
  auto scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return std::string(url);
  auto authority_start = scheme_end + 3;
  auto at = url.find('@', authority_start);
  if (at == std::string_view::npos) return std::string(url);
  auto colon = url.find(':', authority_start);
  if (colon == std::string_view::npos || colon > at) return std::string(url);
  return std::string(url.substr(0, colon + 1)) + "***" + std::string(url.substr(at));
}

[[noreturn]] void fail(std::string_view url, const std::string& reason) {
  throw InvalidArgument("invalid Redis URL '" + masked(url) + "': " + reason +
                        " (expected redis://[user[:password]@]host[:port][/db] or unix:///path/to/socket)");
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

RedisEndpoint parse_tcp(std::string_view url, std::string_view rest) {
  RedisEndpoint endpoint;
  auto slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    std::string_view db = rest.substr(slash + 1);
    if (!db.empty()) endpoint.db = parse_int(url, db, 0, 1'000'000, "database number");
  }
  if (auto at = authority.rfind('@'); at != std::string_view::npos) {
    std::string_view credentials = authority.substr(0, at);
    authority = authority.substr(at + 1);
    auto colon = credentials.find(':');
    endpoint.user = percent_decode(url, credentials.substr(0, colon));
    if (colon != std::string_view::npos) endpoint.password = percent_decode(url, credentials.substr(colon + 1));
  }
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string_view::npos) fail(url, "unterminated '[' in the host");
    endpoint.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') fail(url, "unexpected text after ']'");
      port = after.substr(1);
    }
  } else {
    auto colon = authority.rfind(':');
    endpoint.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (endpoint.host.empty()) fail(url, "the host is missing");
  if (!port.empty() || authority.ends_with(':')) endpoint.port = parse_int(url, port, 1, 65535, "port");
  return endpoint;
}

}  // namespace

std::string RedisEndpoint::display() const {
  std::string text = is_unix() ? "unix://" + socket_path : host + ":" + std::to_string(port);
  if (!user.empty()) text = user + "@" + text;
  if (db != 0) text += "/" + std::to_string(db);
  return text;
}

RedisEndpoint parse_redis_url(std::string_view url) {
  if (url.starts_with("redis://")) return parse_tcp(url, url.substr(8));
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
