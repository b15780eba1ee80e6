// File: elastic/redis_url.h
//
// Where a Redis server is and how to log in to it, parsed from a URL:
//   redis://[user[:password]@]host[:port][/db]     (host may be [v6-address]; user and password
//                                                    may be percent-encoded)
//   unix:///path/to/socket[?db=N]
//   redis+sentinel://[user[:password]@]host1[:port1],host2[:port2],.../MASTER_NAME[/db]
//                                                   (Redis Sentinel: the sentinels, default port
//                                                    26379, and the name of the master they
//                                                    monitor; elastic/sentinel.h resolves it)
// A sentinel URL's credentials and db are the DATA nodes' (as for redis://); the sentinels' own
// password, when they have one, is given apart (RedisEndpoint::sentinel_password, from
// --sentinel-password-file). The credentials end at the last '@' of the URL (the host, port and db never contain one), so a
// password may hold '@', ':', '/', '?' or '#' unencoded; the user ends at their first ':'. The same
// rule finds the password to mask in error messages: it never appears in display() or in an error.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hdp::elastic {

struct RedisEndpoint {
  std::string host;         // empty for a unix socket
  int port = 6379;
  std::string socket_path;  // empty for TCP
  std::string user;         // empty: the default user
  std::optional<std::string> password;
  int db = 0;
  // A redis+sentinel:// URL: the sentinels to ask (host, port) and the master's name; host,
  // port and socket_path are then unused until resolved (user, password and db stay the data
  // nodes'). The sentinels' own password (AUTH to a sentinel), when they require one.
  std::vector<std::pair<std::string, int>> sentinels;
  std::string master_name;
  std::optional<std::string> sentinel_password;

  bool is_unix() const { return !socket_path.empty(); }
  bool is_sentinel() const { return !sentinels.empty(); }
  // "host:port" or the socket path, with "/db" and "user@" when set; for a sentinel endpoint
  // "sentinel 'NAME' via h1:26379,h2:26379" (with "user@" before and "/db" after the name when
  // set). Never a password.
  std::string display() const;
};

// Throws InvalidArgument with the reason and the URL, its password masked.
RedisEndpoint parse_redis_url(std::string_view url);

// The URL as it may be shown: its password (found by the rule above) replaced by "***".
std::string mask_password(std::string_view url);
// The URL without its password (a user stays), and the password, percent-encoding untouched.
std::pair<std::string, std::optional<std::string>> split_password(std::string_view url);
// Overwrites, in place, the password of a redis://, rediss:// or redis+sentinel:// URL found in `text` (the whole
// argument, or the part of "--redis=URL" from "redis" on) with '*': what a process does to its
// own argv so that `ps` and /proc/PID/cmdline do not show it (cli/main.cc).
void scrub_password(char* text);

// Reads a password from a file (trailing newline removed), so that it never appears in `ps`.
// Throws InvalidArgument naming the file when it cannot be read or is empty.
std::string read_password_file(const std::string& path);

}  // namespace hdp::elastic
