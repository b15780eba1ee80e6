// File: agents/generation_watcher.h
//
// The agent's watch of the job's `generations` stream (elastic/generation_watch.h): a thread of its
// own that blocks on the stream, but only while the agent's Asio thread lets it. The agent has one
// Redis connection and a blocking read holds it, so the Asio thread grants the watch the time until
// its next heartbeat (allow_until) after each heartbeat and after each notice. Each read's outcome
// (a new generation, or none) is posted to the Asio thread (`on_read`), which then grants again.
// A read that fails (the store unreachable, garbage in the stream) gives nullopt after waiting out
// its grant, so that a store that is down costs no busy loop; the heartbeat reads `gen` anyway.
// stop() wakes a blocked read (Store::stop_stream_reads) and joins the thread; the destructor
// stops. allow_until() and stop() may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <boost/asio/io_context.hpp>

#include "elastic/generation_records.h"
#include "elastic/generation_watch.h"
#include "elastic/store.h"

namespace hdp::agents {

class GenerationWatcher {
 public:
  using Clock = std::chrono::steady_clock;
  using OnRead = std::function<void(std::optional<std::int64_t> generation)>;

  // Starts the thread; it reads nothing before the first allow_until().
  GenerationWatcher(std::shared_ptr<elastic::Store> store, std::shared_ptr<elastic::GenerationRecords> records,
                    boost::asio::io_context& io, OnRead on_read);
  ~GenerationWatcher();
  GenerationWatcher(const GenerationWatcher&) = delete;
  GenerationWatcher& operator=(const GenerationWatcher&) = delete;

  // The shortest read worth starting: a grant that leaves less is ignored.
  static constexpr std::chrono::milliseconds kShortestRead{10};

  // Lets the watch read once, blocking until `deadline` at most; ignored when `deadline` is less
  // than kShortestRead away (the Asio thread grants after each read's outcome, up to its next
  // heartbeat: answering a grant that has run out would be a busy loop between the two threads
  // until that heartbeat, whose own grant comes next). Returns false when ignored. A grant made
  // while a read is under way is dropped (and true returned): that read's outcome, posted to
  // on_read, is answered with a grant of its own. Kept for later, it let a second read follow at
  // once whenever a read ended early (interrupted, or a new generation), holding the connection
  // that the Asio thread's next store call needed, and such a grant renewed itself read after read.
  bool allow_until(Clock::time_point deadline);
  // Ends the read in progress now (Store::interrupt_stream_reads), freeing the connection for a
  // call the Asio thread cannot put off; the next read waits for the next grant.
  void interrupt() { store_->interrupt_stream_reads(); }
  void stop();

 private:
  void run();
  std::optional<std::int64_t> read(Clock::time_point deadline);

  std::shared_ptr<elastic::Store> store_;
  elastic::GenerationWatch watch_;
  boost::asio::io_context& io_;
  OnRead on_read_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;                       // guarded by mutex_
  std::optional<Clock::time_point> grant_;  // guarded by mutex_
  bool reading_ = false;                    // guarded by mutex_: a read is under way
  Clock::time_point logged_{};              // the last warning of a failed read (the thread's own)
  std::thread thread_;                      // last: starts once the members above exist
};

}  // namespace hdp::agents
