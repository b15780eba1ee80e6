#include "trainer/state_report.h"

#include "common/error.h"
#include "common/log.h"

namespace hdp::trainer {

StateReport::StateReport(std::shared_ptr<elastic::Store> store, std::vector<std::string> reads, Duration retry_pause)
    : job_(std::move(store)), read_keys_(std::move(reads)), retry_pause_(retry_pause) {}

StateReport::~StateReport() {
  if (!thread_.joinable()) return;
  flush(kDestructorFlush);
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void StateReport::post(std::int64_t generation, elastic::Fields state, std::vector<elastic::Write> writes) {
  {
    std::lock_guard lock(mutex_);
    if (!pending_) pending_.emplace();
    pending_->generation = generation;
    pending_->state = std::move(state);
    for (auto& write : writes) pending_->writes.push_back(std::move(write));
    while (pending_->writes.size() > kMaxPendingWrites) pending_->writes.pop_front();
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }
  wake_.notify_all();
}

StateReport::Reads StateReport::reads() const {
  std::lock_guard lock(mutex_);
  return reads_;
}

bool StateReport::flush(Duration timeout) {
  std::unique_lock lock(mutex_);
  return drained_.wait_for(lock, timeout, [&] { return !pending_ && !in_flight_; });
}

std::uint64_t StateReport::written() const {
  std::lock_guard lock(mutex_);
  return written_;
}

std::uint64_t StateReport::stale() const {
  std::lock_guard lock(mutex_);
  return stale_;
}

void StateReport::run() {
  std::unique_lock lock(mutex_);
  bool outage = false;                               // a report failed and none was written since
  std::chrono::steady_clock::time_point outage_began{};
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || pending_.has_value(); });
    if (stopping_) return;  // the destructor flushed what it could
    Pending report = std::move(*pending_);
    pending_.reset();
    in_flight_ = true;
    lock.unlock();
    std::vector<elastic::Write> writes(report.writes.begin(), report.writes.end());
    std::optional<elastic::CommitResult> result;
    std::string error;
    try {
      result = job_.fenced_update_and_read(report.generation, report.state, std::move(writes), read_keys_);
    } catch (const Error& e) {
      error = e.what();
    }
    lock.lock();
    in_flight_ = false;
    if (result) {
      if (outage) {
        log()->info("the job state takes reports again (after {:.1f} s)",
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - outage_began).count());
        outage = false;
      }
      result->applied ? ++written_ : ++stale_;
      if (result->values.size() == read_keys_.size()) reads_ = {reads_.serial + 1, std::move(result->values)};
    } else {
      if (!outage) {
        log()->warn("cannot report to the job state: {}; retrying every {} ms, training goes on", error,
                    retry_pause_.count());
        outage = true;
        outage_began = std::chrono::steady_clock::now();
      }
      // Put back: a report posted meanwhile is newer (its state wins); the writes of both stay.
      if (pending_) {
        for (auto it = report.writes.rbegin(); it != report.writes.rend(); ++it) pending_->writes.push_front(*it);
        while (pending_->writes.size() > kMaxPendingWrites) pending_->writes.pop_front();
      } else {
        pending_ = std::move(report);
      }
    }
    if (!pending_) drained_.notify_all();
    if (!result) wake_.wait_for(lock, retry_pause_, [&] { return stopping_; });
  }
}

}  // namespace hdp::trainer
