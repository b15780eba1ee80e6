// File: agents/generation_watcher.cc
//
// The generation watch's thread: see generation_watcher.h.
#include "agents/generation_watcher.h"

#include <utility>

#include <boost/asio/post.hpp>

#include "common/error.h"
#include "common/log.h"

namespace hdp::agents {

using std::chrono::milliseconds;

GenerationWatcher::GenerationWatcher(std::shared_ptr<elastic::Store> store,
                                     std::shared_ptr<elastic::GenerationRecords> records, boost::asio::io_context& io,
                                     OnRead on_read)
    : store_(std::move(store)),
      watch_(store_, std::move(records)),
      io_(io),
      on_read_(std::move(on_read)),
      thread_([this] { run(); }) {}

GenerationWatcher::~GenerationWatcher() { stop(); }

bool GenerationWatcher::allow_until(Clock::time_point deadline) {
  if (deadline - Clock::now() < kShortestRead) return false;
  {
    std::lock_guard lock(mutex_);
    if (reading_) return true;
    grant_ = deadline;
  }
  wake_.notify_all();
  return true;
}

void GenerationWatcher::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stop_) return;
    stop_ = true;
  }
  wake_.notify_all();
  store_->stop_stream_reads();
  thread_.join();
}

void GenerationWatcher::run() {
  for (;;) {
    Clock::time_point deadline;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || grant_; });
      if (stop_) return;
      deadline = *std::exchange(grant_, std::nullopt);
      reading_ = true;
    }
    const std::optional<std::int64_t> generation = read(deadline);
    {
      std::lock_guard lock(mutex_);
      reading_ = false;
    }
    boost::asio::post(io_, [this, generation] { on_read_(generation); });
  }
}

// One read of the stream until `deadline`. A function of its own that returns the optional, never
// an assignment to a local optional inside the try: GCC 12 at -O2 can leave such a local's engaged
// flag undefined when wait() throws.
std::optional<std::int64_t> GenerationWatcher::read(Clock::time_point deadline) {
  const auto block = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
  if (block < kShortestRead) return std::nullopt;  // the grant waited too long to be taken up
  try {
    return watch_.wait(block);
  } catch (const Error& e) {
    // Unreachable or garbage: the heartbeat reads `gen` anyway. Wait out the grant, so that a
    // store that is down costs no busy loop.
    const auto now = Clock::now();
    if (now - logged_ >= std::chrono::seconds(30)) {
      log()->warn("watching the generation stream: {} (the heartbeat reads the generation meanwhile)", e.what());
      logged_ = now;
    }
    std::unique_lock lock(mutex_);
    wake_.wait_until(lock, deadline, [&] { return stop_; });
    return std::nullopt;
  }
}

}  // namespace hdp::agents
