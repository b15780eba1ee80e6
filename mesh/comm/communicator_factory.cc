#include "mesh/comm/communicator_factory.h"

#include <charconv>
#include <exception>
#include <mutex>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "common/text.h"
#include "elastic/memory_store.h"
#include "elastic/prefix_store.h"
#include "hdp/config.h"
#include "mesh/comm/checks.h"
#include "mesh/comm/data_plane_exchange.h"
#include "mesh/comm/nccl_communicator.h"
#include "mesh/comm/staging_communicator.h"
#include "mesh/comm/tcp_communicator.h"

namespace hdp::mesh {

namespace {

// NcclCommunicator asks `superseded` from its watchdog thread too, but boot.superseded
// (ElasticContext::changed) may only be called from the thread that owns the context, which is
// this one and blocked in connect_communicator meanwhile. So the NCCL path gets a wrapper that
// serialises the calls while the connect runs and answers false once it returned (its destructor
// waits for a call in progress): from then on, as with TcpCommunicator, which asks only while it
// connects, the owner's thread checks for a newer generation itself between steps, and the
// watchdog still enforces every deadline and abort().
class ConnectOnlySuperseded {
 public:
  explicit ConnectOnlySuperseded(std::function<bool()> check)
      : state_(std::make_shared<State>()) {
    state_->check = std::move(check);
  }
  ~ConnectOnlySuperseded() {
    std::lock_guard lock(state_->mutex);
    state_->check = nullptr;
  }
  ConnectOnlySuperseded(const ConnectOnlySuperseded&) = delete;
  ConnectOnlySuperseded& operator=(const ConnectOnlySuperseded&) = delete;

  std::function<bool()> function() const {
    if (!state_->check) return {};
    return [state = state_] {
      std::lock_guard lock(state->mutex);
      return state->check && state->check();
    };
  }

 private:
  struct State {
    std::mutex mutex;
    std::function<bool()> check;
  };
  std::shared_ptr<State> state_;
};

std::shared_ptr<nccl::Backend> default_nccl_backend(const RankDevice& device) {
  int ordinal = -1;
  const std::string& id = device.device_id;
  const auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), ordinal);
  if (ec != std::errc() || end != id.data() + id.size() || ordinal < 0) {
    throw InvalidArgument("communicator: device id " + quote_value(id) +
                          " is not a CUDA ordinal, and no NCCL backend was given for it");
  }
  return nccl::make_cuda_backend(ordinal);
}

std::unique_ptr<Communicator> connect_nccl(const elastic::Bootstrap& boot, std::shared_ptr<elastic::Store> store,
                                           std::chrono::milliseconds timeout, const RankDevice& device,
                                           const DataPlaneHooks& hooks) {
  auto backend = hooks.nccl_backend ? hooks.nccl_backend(device) : default_nccl_backend(device);
  const ConnectOnlySuperseded superseded(boot.superseded);
  NcclConnectOptions options;
  options.rank = boot.rank;
  options.size = boot.world_size;
  options.store = std::move(store);
  options.superseded = superseded.function();
  options.timeout = timeout;
  return NcclCommunicator::connect(options, std::move(backend));
}

}  // namespace

std::unique_ptr<Communicator> connect_communicator(const elastic::Bootstrap& boot, std::string_view channel,
                                                   std::chrono::milliseconds timeout, Connect connect,
                                                   RankDevice device, const DataPlaneHooks& hooks) {
  if (channel.empty() || channel.find('/') != std::string_view::npos) {
    throw InvalidArgument("communicator channel '" + std::string(channel) + "' is empty or contains '/'");
  }
  check_given(boot.store != nullptr, "communicator bootstrap of generation " + std::to_string(boot.generation), "store");
  if (device.host.empty()) device.host = boot.advertise_address;
  auto store = std::make_shared<elastic::PrefixStore>(boot.store, std::string(channel) + "/");
  const DataPlaneChoice choice = agree_data_plane({.rank = boot.rank,
                                                   .size = boot.world_size,
                                                   .mine = device,
                                                   .nccl_built = hooks.nccl_built.value_or(HDP_HAVE_NCCL != 0),
                                                   .store = store,
                                                   .superseded = boot.superseded,
                                                   .timeout = timeout});
  if (boot.rank == 0) {
    log()->info("generation {}, channel {}: {} data plane ({})", boot.generation, channel,
                data_plane_name(choice.plane), choice.reason);
  }
  if (choice.plane == DataPlane::kNccl) return connect_nccl(boot, std::move(store), timeout, device, hooks);
  TcpConnectOptions options;
  options.rank = boot.rank;
  options.size = boot.world_size;
  options.hostname = boot.advertise_address;
  options.store = std::move(store);
  options.group = boot.group + std::string(channel) + "/";
  options.generation = boot.generation;
  options.connect_neighbours = connect == Connect::kRingNow;
  options.superseded = boot.superseded;
  options.timeout = timeout;
  std::unique_ptr<Communicator> tcp = TcpCommunicator::connect(options);
  if (!needs_staging(device, choice.plane) && !hooks.stage_all) return tcp;
  return std::make_unique<StagingCommunicator>(std::move(tcp),
                                               StagingOptions{.device = device.device, .stage_all = hooks.stage_all});
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
