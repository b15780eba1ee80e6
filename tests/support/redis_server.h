// File: tests/support/redis_server.h
//
// Tests use the product's embedded redis-server (agents/embedded_redis.h): a private server on a
// free loopback port that a test can kill, restart, pause and resume.
#pragma once

#include "agents/embedded_redis.h"

namespace hdp::test {

using RedisServer = agents::EmbeddedRedis;
using RedisServerOptions = agents::EmbeddedRedisOptions;
using agents::free_loopback_port;

}  // namespace hdp::test
