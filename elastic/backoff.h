// File: elastic/backoff.h
//
// Capped exponential backoff with jitter, for reconnect and retry loops (after c10d's
// ExponentialBackoffWithJitter). Interval n is min(max, initial * multiplier^n), then spread
// uniformly over [interval * (1 - jitter), interval * (1 + jitter)] and capped again at max.
// Not thread-safe: each retry loop owns its Backoff.
//
// Example:
//   Backoff backoff({.initial = 50ms, .max = 2s});
//   while (!try_connect()) std::this_thread::sleep_for(backoff.next());
#pragma once

#include <chrono>
#include <cstdint>
#include <random>

namespace hdp::elastic {

struct BackoffOptions {
  std::chrono::milliseconds initial{50};
  std::chrono::milliseconds max{2000};
  double multiplier = 2.0;
  double jitter = 0.5;  // fraction in [0, 1]; 0 makes the sequence deterministic
};

class Backoff {
 public:
  // Throws InvalidArgument for initial <= 0, max < initial, multiplier < 1 or jitter outside [0, 1].
  explicit Backoff(BackoffOptions options = {}, std::uint64_t seed = std::random_device{}());

  // The next interval to wait; grows until max.
  std::chrono::milliseconds next();
  void reset() { attempt_ = 0; }
  int attempts() const { return attempt_; }

 private:
  BackoffOptions options_;
  int attempt_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace hdp::elastic
