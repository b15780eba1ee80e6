// File: tests/support/http_get.h
//
// The tests' HTTP client: metrics/http_client.h, under hdp::test.
#pragma once

#include "metrics/http_client.h"

namespace hdp::test {

using metrics::http_exchange;
using metrics::http_get;
using metrics::HttpResult;
using metrics::url_encode;

}  // namespace hdp::test
