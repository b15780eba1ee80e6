// File: elastic/redis_connection.h
//
// One hiredis connection: connect with a timeout, authenticate (AUTH [user] password), select the
// database, and run binary-safe commands (argv + lengths, never a format string). Not thread-safe;
// RedisSession (elastic/redis_session.h) serialises access and owns the reconnect policy.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "elastic/redis_url.h"

namespace hdp::elastic {

// The connection broke (refused, reset, timed out, EOF). After this the connection is unusable.
class RedisIoError : public StoreUnavailable {
 public:
  using StoreUnavailable::StoreUnavailable;
};

struct RedisReply {
  enum class Type { kNil, kString, kInteger, kArray, kStatus, kError };
  Type type = Type::kNil;
  std::string str;        // kString, kStatus, kError
  long long integer = 0;  // kInteger
  std::vector<RedisReply> elements;  // kArray
};

// The elements of an array reply as MGET gives them: each string, nothing for a nil (or an element
// of any other type).
std::vector<std::optional<std::string>> string_values(RedisReply reply);

class RedisConnection {
 public:
  using Duration = std::chrono::milliseconds;

  // Connects and logs in, all within `connect_timeout`. Throws RedisIoError when the server cannot
  // be reached or does not answer, AuthError when it refuses the credentials.
  RedisConnection(const RedisEndpoint& endpoint, Duration connect_timeout, Duration command_timeout);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Cheap check, no round trip: false when the server has closed the socket (it was restarted or
  // killed). A command sent on such a socket could not have reached the new server, so a false
  // here makes a reconnect safe even for commands that must not run twice.
  bool alive() const;

  // Sends one command and reads its reply; an error reply is returned as Type::kError, not thrown.
  // Throws RedisIoError when the connection breaks (the command may or may not have run).
  RedisReply command(std::initializer_list<std::string_view> args);
  RedisReply command(const std::vector<std::string_view>& args);
  // Sends several commands in one write and reads their replies in order (one round trip).
  // Throws RedisIoError when the connection breaks (any of them may or may not have run).
  std::vector<RedisReply> pipeline(const std::vector<std::vector<std::string_view>>& commands);
  // Sets how long a command may wait for its reply from now on (a syscall only when it changes).
  void set_command_timeout(Duration timeout);
  // The socket, for shutdown(2) from another thread while a command waits on it (the one call
  // that is safe to make concurrently: it wakes the waiting read, which then fails).
  int socket() const;
  // The server's id of this connection (CLIENT ID, asked at login), which another connection
  // names to wake a command blocked on this one (CLIENT UNBLOCK); -1 when the server would not say.
  long long client_id() const;

 private:
  void login(const RedisEndpoint& endpoint);

  struct Context;  // the hiredis context, freed with the connection (redis_connection.cc)
  std::string where_;  // endpoint.display(), for messages
  std::unique_ptr<Context> context_;
  Duration command_timeout_{};
  long long client_id_ = -1;  // -1: unknown
};

}  // namespace hdp::elastic
