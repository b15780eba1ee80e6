#include "elastic/redis_connection.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "common/sigpipe.h"

namespace hdp::elastic {
namespace {

timeval to_timeval(std::chrono::milliseconds duration) {
  auto ms = std::max<long long>(1, duration.count());
  return timeval{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
}

RedisReply convert(const redisReply* reply) {
  RedisReply out;
  switch (reply->type) {
    case REDIS_REPLY_STRING: out.type = RedisReply::Type::kString; break;
    case REDIS_REPLY_STATUS: out.type = RedisReply::Type::kStatus; break;
    case REDIS_REPLY_ERROR: out.type = RedisReply::Type::kError; break;
    case REDIS_REPLY_INTEGER: out.type = RedisReply::Type::kInteger; break;
    case REDIS_REPLY_ARRAY: out.type = RedisReply::Type::kArray; break;
    default: out.type = RedisReply::Type::kNil; break;
  }
  if (reply->type == REDIS_REPLY_STRING || reply->type == REDIS_REPLY_STATUS || reply->type == REDIS_REPLY_ERROR) {
    out.str.assign(reply->str, reply->len);
  }
  out.integer = reply->integer;
  for (size_t i = 0; reply->type == REDIS_REPLY_ARRAY && i < reply->elements; ++i) {
    out.elements.push_back(convert(reply->element[i]));
  }
  return out;
}

}  // namespace

std::vector<std::optional<std::string>> string_values(RedisReply reply) {
  std::vector<std::optional<std::string>> values;
  values.reserve(reply.elements.size());
  for (auto& element : reply.elements) {
    values.push_back(element.type == RedisReply::Type::kString ? std::optional(std::move(element.str)) : std::nullopt);
  }
  return values;
}

struct RedisConnection::Context {
  explicit Context(redisContext* context) : raw(context) {}
  ~Context() { redisFree(raw); }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  redisContext* raw;
};

RedisConnection::RedisConnection(const RedisEndpoint& endpoint, Duration connect_timeout, Duration command_timeout)
    : where_(endpoint.display()) {
  const timeval connect_tv = to_timeval(connect_timeout);
  redisContext* raw = endpoint.is_unix() ? redisConnectUnixWithTimeout(endpoint.socket_path.c_str(), connect_tv)
                                         : redisConnectWithTimeout(endpoint.host.c_str(), endpoint.port, connect_tv);
  if (!raw) throw RedisIoError("redis at " + where_ + ": cannot allocate a connection");
  context_ = std::make_unique<Context>(raw);
  if (raw->err) throw RedisIoError("redis at " + where_ + ": cannot connect: " + raw->errstr);
  // hiredis opens its socket without close-on-exec; without it every process started by this
  // one (an agent's workers, the agents of `hdp run`) would hold the connection open.
  if (const int flags = fcntl(raw->fd, F_GETFD); flags < 0 || fcntl(raw->fd, F_SETFD, flags | FD_CLOEXEC) != 0) {
    throw RedisIoError("redis at " + where_ + ": cannot make the connection close-on-exec: " + std::strerror(errno));
  }
  // The log-in exchange shares the connect budget: a server that accepts but never answers (paused,
  // overloaded) must fail within connect_timeout too.
  redisSetTimeout(raw, connect_tv);
  if (!endpoint.is_unix()) redisEnableKeepAlive(raw);
  login(endpoint);
  redisSetTimeout(raw, to_timeval(command_timeout));
  command_timeout_ = command_timeout;
}

void RedisConnection::set_command_timeout(Duration timeout) {
  if (timeout == command_timeout_) return;
  redisSetTimeout(context_->raw, to_timeval(timeout));
  command_timeout_ = timeout;
}

RedisConnection::~RedisConnection() = default;

void RedisConnection::login(const RedisEndpoint& endpoint) {
  if (endpoint.password) {
    RedisReply reply = endpoint.user.empty() ? command({"AUTH", *endpoint.password})
                                             : command({"AUTH", endpoint.user, *endpoint.password});
    // The server's message names neither the password nor (for WRONGPASS) the user; it is safe to show.
    if (reply.type == RedisReply::Type::kError) {
      throw AuthError("redis at " + where_ + " refused the credentials" +
                      (endpoint.user.empty() ? "" : " of user '" + endpoint.user + "'") + ": " + reply.str);
    }
  }
  if (endpoint.db != 0) {
    RedisReply reply = command({"SELECT", std::to_string(endpoint.db)});
    if (reply.type == RedisReply::Type::kError) {
      if (reply.str.starts_with("NOAUTH")) {
        throw AuthError("redis at " + where_ + " requires a password (give it in the URL or with --redis-password-file)");
      }
      throw InvalidArgument("redis at " + where_ + ": cannot select database " + std::to_string(endpoint.db) + ": " +
                            reply.str);
    }
  }
  // The connection's server id comes with the PING, in the same round trip (client_id()); a user
  // not allowed CLIENT ID gets an error for it here and asks no more.
  std::vector<RedisReply> replies = pipeline({{"PING"}, {"CLIENT", "ID"}});
  const RedisReply& pong = replies[0];
  if (replies[1].type == RedisReply::Type::kInteger) client_id_ = replies[1].integer;
  if (pong.type == RedisReply::Type::kError) {
    if (pong.str.starts_with("NOAUTH")) {
      throw AuthError("redis at " + where_ + " requires a password (give it in the URL or with --redis-password-file)");
    }
    throw RedisIoError("redis at " + where_ + ": PING failed: " + pong.str);
  }
}

int RedisConnection::socket() const { return context_->raw->fd; }

long long RedisConnection::client_id() const { return client_id_; }

bool RedisConnection::alive() const {
  const redisContext* context = context_ ? context_->raw : nullptr;
  if (!context || context->err || context->fd < 0) return false;
  pollfd fd{context->fd, POLLIN, 0};
  if (poll(&fd, 1, 0) == 0) return true;  // nothing to read: the socket is open and idle
  // Readable while idle means EOF (peer closed) or stray bytes; either way the connection is unusable.
  char byte;
  ssize_t n = recv(context->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

RedisReply RedisConnection::command(std::initializer_list<std::string_view> args) {
  return command(std::vector<std::string_view>(args));
}

RedisReply RedisConnection::command(const std::vector<std::string_view>& args) {
  return std::move(pipeline({args}).front());
}

std::vector<RedisReply> RedisConnection::pipeline(const std::vector<std::vector<std::string_view>>& commands) {
  redisContext* context = context_->raw;
  if (context->err) throw RedisIoError("redis at " + where_ + ": connection already broken: " + context->errstr);
  auto broken = [&] {
    std::string reason = context->err ? context->errstr : "no reply";
    // hiredis reports a socket timeout as the EAGAIN text; say what it means.
    if (reason.find("temporarily unavailable") != std::string::npos) reason = "no reply within the timeout";
    return RedisIoError("redis at " + where_ + ": " + reason);
  };
  SigpipeBlock block;  // hiredis writes with write(2) (common/sigpipe.h)
  std::vector<const char*> argv;
  std::vector<size_t> lengths;
  for (const auto& args : commands) {
    argv.clear();
    lengths.clear();
    for (auto arg : args) {
      argv.push_back(arg.data());
      lengths.push_back(arg.size());
    }
    // Only buffers the command; the first redisGetReply() sends them all in one write.
    if (redisAppendCommandArgv(context, static_cast<int>(argv.size()), argv.data(), lengths.data()) != REDIS_OK) {
      throw broken();
    }
  }
  std::vector<RedisReply> replies;
  replies.reserve(commands.size());
  for (std::size_t i = 0; i < commands.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(context, &raw) != REDIS_OK || !raw) throw broken();
    std::unique_ptr<redisReply, void (*)(void*)> reply(static_cast<redisReply*>(raw), freeReplyObject);
    replies.push_back(convert(reply.get()));
  }
  return replies;
}

}  // namespace hdp::elastic
