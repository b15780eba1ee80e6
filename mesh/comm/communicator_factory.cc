#include "mesh/comm/communicator_factory.h"

#include <exception>
#include <thread>

#include "common/error.h"
#include "elastic/memory_store.h"
#include "elastic/prefix_store.h"
#include "mesh/comm/checks.h"
#include "mesh/comm/tcp_communicator.h"

namespace hdp::mesh {

std::unique_ptr<Communicator> connect_communicator(const elastic::Bootstrap& boot, std::string_view channel,
                                                   std::chrono::milliseconds timeout, Connect connect) {
  if (channel.empty() || channel.find('/') != std::string_view::npos) {
    throw InvalidArgument("communicator channel '" + std::string(channel) + "' is empty or contains '/'");
  }
  check_given(boot.store != nullptr, "communicator bootstrap of generation " + std::to_string(boot.generation), "store");
  TcpConnectOptions options;
  options.rank = boot.rank;
  options.size = boot.world_size;
  options.hostname = boot.advertise_address;
  options.store = std::make_shared<elastic::PrefixStore>(boot.store, std::string(channel) + "/");
  options.group = boot.group + std::string(channel) + "/";
  options.generation = boot.generation;
  options.connect_neighbours = connect == Connect::kRingNow;
  options.superseded = boot.superseded;
  options.timeout = timeout;
  return TcpCommunicator::connect(options);
}

std::unique_ptr<Communicator> connect_rank(std::shared_ptr<elastic::Store> store, std::string prefix, int rank,
                                           int size, std::chrono::milliseconds timeout, std::string hostname) {
  TcpConnectOptions options;
  options.rank = rank;
  options.size = size;
  options.hostname = std::move(hostname);
  options.group = prefix;
  options.store = std::make_shared<elastic::PrefixStore>(std::move(store), std::move(prefix));
  options.timeout = timeout;
  return TcpCommunicator::connect(options);
}

std::vector<std::unique_ptr<Communicator>> connect_local(int n, std::chrono::milliseconds timeout) {
  if (n < 1) throw InvalidArgument("connect_local: " + std::to_string(n) + " ranks");
  auto store = std::make_shared<elastic::MemoryStore>();
  std::vector<std::unique_ptr<Communicator>> comms(static_cast<std::size_t>(n));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        comms[static_cast<std::size_t>(r)] = connect_rank(store, "local/", r, n, timeout);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return comms;
}

}  // namespace hdp::mesh
