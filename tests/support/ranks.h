// File: tests/support/ranks.h
//
// Helpers of the data plane's tests, where ranks are threads of the test process (each with its
// communicator from mesh::connect_local): run a function on every rank, and deterministic
// normal-distributed data to train on.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <random>
#include <thread>
#include <vector>

namespace hdp::test {

// Runs fn(rank) on one thread per rank; returns what each threw (null: nothing).
inline std::vector<std::exception_ptr> on_ranks(int n, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// Like on_ranks, but fails the test with every rank's exception.
inline void on_ranks_ok(int n, const std::function<void(int)>& fn) {
  const auto errors = on_ranks(n, fn);
  for (std::size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << " threw: " << e.what();
    }
  }
}

// n draws of N(0, 1) from a generator seeded with `seed`: the same values for the same seed.
inline std::vector<float> pattern(std::int64_t n, std::uint32_t seed) {
  std::vector<float> v(static_cast<std::size_t>(n));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& x : v) x = normal(rng);
  return v;
}

}  // namespace hdp::test
