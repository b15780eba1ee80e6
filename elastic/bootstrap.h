// File: elastic/bootstrap.h
//
// What a communicator needs to bootstrap one generation: this worker's place in it, the address
// its peers reach it at, and the generation's bootstrap namespace in the Store. The worker's
// ElasticContext::bootstrap (elastic/elastic_context.h) makes it; the communicators' factory
// (mesh/comm/communicator_factory.h) takes it. Several communicators of one generation bootstrap
// under sub-prefixes of `store`.
//
// Header only, over the Store interface alone (the hdp_store layer): a communicator bootstraps
// through any Store and never needs the Redis client or the rendezvous.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "elastic/store.h"

namespace hdp::elastic {

struct Bootstrap {
  std::int64_t generation = 0;
  int rank = 0;
  int world_size = 0;
  std::string advertise_address;
  std::shared_ptr<Store> store;  // the generation's bootstrap namespace, gen:<g>:boot:
  // That namespace's name, job included ("<job>/gen:<g>:boot:"): the communicators' connection
  // handshake checks a hash of it (with the channel), so a rank of another job or generation that
  // reaches this one's address is refused.
  std::string group;
  // True once a generation other than this one is current (ElasticContext::changed). It refers
  // to the ElasticContext that made it, which must outlive every call (the connects, which run
  // on the thread that owns that context: changed() is not thread-safe).
  std::function<bool()> superseded;
};

}  // namespace hdp::elastic
