#include "mesh/comm/bootstrap.h"

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "common/error.h"
#include "common/sigpipe.h"
#include "mesh/comm/collectives.h"
#include "mesh/comm/gloo_store.h"

namespace hdp::mesh {
namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// The bootstrap: Gloo's connectFullMesh, which waits in the store (GlooStore: hdp's deadline, and
// `superseded` every 250 ms) and then in each pair's connect (Gloo's own wait, which nothing
// cancels: a peer that stopped or vanished after publishing its address holds it for the pair's
// timeout). So it runs on a thread of its own while the caller asks `superseded` every 100 ms and
// gives up with PeerLost as soon as it says so. An abandoned bootstrap thread runs on until Gloo's
// waits end (each bounded by the timeout) and then drops what it built; it no longer calls
// `superseded` (whose captures may be gone by then) and owns everything else it touches.
std::shared_ptr<gloo::rendezvous::Context> bootstrap_context(const GlooConnectOptions& options,
                                                             std::shared_ptr<gloo::transport::Device> device,
                                                             const std::string& what) {
  struct State {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    std::exception_ptr error;
    std::shared_ptr<gloo::rendezvous::Context> context;
    std::mutex superseded_mutex;  // held while `superseded` runs; `abandoned` set under it
    bool abandoned = false;
    std::function<bool()> superseded;
  };
  auto state = std::make_shared<State>();
  state->superseded = options.superseded;
  std::function<bool()> guarded;
  if (options.superseded) {
    guarded = [state] {
      std::lock_guard lock(state->superseded_mutex);
      return state->abandoned || state->superseded();
    };
  }
  std::thread([state, options_store = options.store, rank = options.rank, size = options.size,
               timeout = options.timeout, device, guarded]() mutable {
    block_sigpipe_in_this_thread();
    std::shared_ptr<gloo::rendezvous::Context> context;
    std::exception_ptr error;
    try {
      context = std::make_shared<gloo::rendezvous::Context>(rank, size);
      // Gloo copies this into every pair, where it bounds each pair's connect at 5x the value
      // (tcp/pair.h waitUntil) and is the default of waits that name no timeout (hdp's always do).
      // A fifth keeps one connect within `timeout`; GlooStore bounds the store waits by its own
      // deadline.
      context->setTimeout(std::max(Millis(1), timeout / 5));
      GlooStore store(options_store, timeout, guarded);
      context->connectFullMesh(store, device);
    } catch (...) {
      error = std::current_exception();
      context.reset();
    }
    std::lock_guard lock(state->mutex);
    state->done = true;
    state->error = error;
    if (!state->abandoned) state->context = std::move(context);
    state->done_cv.notify_all();
  }).detach();

  auto abandon = [&] {
    std::scoped_lock lock(state->superseded_mutex, state->mutex);
    state->abandoned = true;
    state->context.reset();
  };
  constexpr Millis kCheckEvery{100};
  // Gloo's own waits end every attempt within the timeout (store) plus size - 1 pair connects of
  // a fifth of it each; the caller's bound adds a margin over that.
  const auto deadline = Clock::now() + options.timeout + (options.size - 1) * (options.timeout / 5) + Millis(1000);
  for (;;) {
    {
      std::unique_lock lock(state->mutex);
      if (state->done_cv.wait_for(lock, kCheckEvery, [&] { return state->done; })) break;
    }
    if (guarded && guarded()) {  // under the mutex: the bootstrap thread may be asking too
      abandon();
      throw PeerLost(what + ": the generation was superseded before every peer connected");
    }
    if (Clock::now() >= deadline) {
      abandon();
      throw TimeoutError(what + ": the bootstrap did not finish within " + std::to_string(options.timeout.count()) +
                         " ms");
    }
  }
  try {
    if (state->error) std::rethrow_exception(state->error);
  } catch (const Error&) {
    throw;
  } catch (const gloo::IoException& e) {
    const std::string message = e.what();
    if (message.find("timeout") != std::string::npos) throw TimeoutError(what + ": " + message);
    throw PeerLost(what + ": " + message);
  } catch (const std::exception& e) {  // gloo::Exception, gloo::EnforceNotMet
    throw PeerLost(what + ": " + e.what());
  }
  return std::move(state->context);
}

}  // namespace

Bootstrapped bootstrap(const GlooConnectOptions& options) {
  if (options.size < 1 || options.size > kMaxSize) {
    throw InvalidArgument("communicator size " + std::to_string(options.size) + " is not in [1, " +
                          std::to_string(kMaxSize) + "]");
  }
  if (options.rank < 0 || options.rank >= options.size) {
    throw InvalidArgument("rank " + std::to_string(options.rank) + " is not in [0, " + std::to_string(options.size) + ")");
  }
  if (options.timeout <= Millis::zero()) {
    throw InvalidArgument("communicator timeout " + std::to_string(options.timeout.count()) + " ms is not positive");
  }
  if (!options.store) throw InvalidArgument("communicator bootstrap: no store");

  Bootstrapped connected;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    SigpipeBlock no_sigpipe;  // inherited by the device's network thread, created here
    connected.device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {  // gloo::EnforceNotMet included
    throw InvalidArgument("communicator: cannot listen on '" + options.hostname + "': " + e.what());
  }
  const std::string what = "connecting rank " + std::to_string(options.rank) + " of " + std::to_string(options.size);
  connected.context = bootstrap_context(options, connected.device, what);
  return connected;
}

}  // namespace hdp::mesh
