// hdp's collective algorithms (mesh/comm/collectives.h) over an in-memory transport, ranks as
// threads, without sockets: ring reduce-scatter and allgather with uneven counts (zeros included),
// allreduce (bit-identical on every rank), broadcast from every root, barrier, the descriptor
// exchange, for 1, 2, 3, 5 and 8 ranks and every dtype and op the reductions support, against a
// straightforward reference; and a transport that fails mid-collective, or a rank that never
// comes, makes every rank's call throw within the deadline.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <tuple>

#include "common/error.h"
#include "kernels/cpu/bf16.h"
#include "mesh/comm/collectives.h"
#include "tests/support/ranks.h"

namespace hdp::mesh {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using Clock = Transport::Clock;
using ops::DType;
using ops::Tensor;

constexpr int kSizes[] = {1, 2, 3, 5, 8};
constexpr DType kDtypes[] = {DType::kF32, DType::kF64, DType::kI32, DType::kI64};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin};
constexpr auto kDeadline = 10s;

// ---- the in-memory transport --------------------------------------------------------------------

// The messages of one group of ranks: a send and a recv with the same (from, to, slot) match in
// the order they were posted, and the bytes are copied when both are there. One failure fails
// every rank's pending and later operations (as a communicator that closes its connections does).
class Network {
 public:
  struct Pending final : Transport::Message {
    std::shared_ptr<const void> keep;
    const void* from = nullptr;  // a send's data
    void* to = nullptr;          // a recv's
    std::size_t bytes = 0;
    bool done = false;  // guarded by Network::mutex_
  };

  std::shared_ptr<Pending> post(bool send, int from, int to, std::uint64_t slot, std::shared_ptr<Pending> message,
                                const std::string& what) {
    std::lock_guard lock(mutex_);
    if (failed_) throw PeerLost(what + ": " + reason_);
    const auto key = std::make_tuple(from, to, slot);
    auto& waiting = send ? recvs_[key] : sends_[key];
    if (waiting.empty()) {
      (send ? sends_ : recvs_)[key].push_back(message);
      return message;
    }
    auto other = waiting.front();
    waiting.pop_front();
    const Pending& s = send ? *message : *other;
    const Pending& r = send ? *other : *message;
    if (s.bytes != r.bytes) {
      fail_locked(what + ": a send of " + std::to_string(s.bytes) + " bytes for a recv of " + std::to_string(r.bytes));
      throw InvalidArgument(reason_);
    }
    std::memcpy(r.to, s.from, s.bytes);
    message->done = other->done = true;
    changed_.notify_all();
    return message;
  }

  void wait(const Pending& message, Clock::time_point deadline, const std::string& what) {
    std::unique_lock lock(mutex_);
    if (changed_.wait_until(lock, deadline, [&] { return message.done || failed_; })) {
      if (failed_) throw PeerLost(what + ": " + reason_);
      return;
    }
    fail_locked(what + ": timed out");
    throw TimeoutError(reason_);
  }

  void fail(const std::string& why) {
    std::lock_guard lock(mutex_);
    fail_locked(why);
  }

 private:
  void fail_locked(const std::string& why) {
    if (failed_) return;
    failed_ = true;
    reason_ = why;
    changed_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  bool failed_ = false;
  std::string reason_;
  std::map<std::tuple<int, int, std::uint64_t>, std::deque<std::shared_ptr<Pending>>> sends_, recvs_;
};

// One rank's view of the network. With fail_at >= 0, its post number fail_at fails the network
// and throws, as a connection that dies mid-collective does.
class MemoryTransport final : public Transport {
 public:
  MemoryTransport(std::shared_ptr<Network> network, int rank, int size, int fail_at = -1)
      : Transport(rank, size), network_(std::move(network)), fail_at_(fail_at) {}

  std::shared_ptr<Message> post_send(std::shared_ptr<const void> keep, const void* data, std::size_t bytes, int peer,
                                     std::uint64_t slot, const std::string& what) override {
    auto message = make(std::move(keep), bytes, what);
    message->from = data;
    return network_->post(true, rank, peer, slot, std::move(message), what);
  }
  std::shared_ptr<Message> post_recv(std::shared_ptr<const void> keep, void* data, std::size_t bytes, int peer,
                                     std::uint64_t slot, const std::string& what) override {
    auto message = make(std::move(keep), bytes, what);
    message->to = data;
    return network_->post(false, peer, rank, slot, std::move(message), what);
  }
  void wait(const std::shared_ptr<Message>& message, Clock::time_point deadline, const std::string& what) override {
    network_->wait(static_cast<const Network::Pending&>(*message), deadline, what);
  }
  void fail(const std::string& why) override { network_->fail(why); }

  int posts() const { return posts_; }

 private:
  std::shared_ptr<Network::Pending> make(std::shared_ptr<const void> keep, std::size_t bytes, const std::string& what) {
    if (posts_++ == fail_at_) {
      const std::string why = what + ": peer lost: injected failure";
      network_->fail(why);
      throw PeerLost(why);
    }
    auto message = std::make_shared<Network::Pending>();
    message->keep = std::move(keep);
    message->bytes = bytes;
    return message;
  }

  std::shared_ptr<Network> network_;
  int fail_at_;
  int posts_ = 0;
};

// Runs fn(transport) on one thread per rank over one network (tests/support/ranks.h); returns what
// each rank threw. fail_rank's transport fails at its post number fail_at.
std::vector<std::exception_ptr> on_ranks(int n, const std::function<void(MemoryTransport&)>& fn, int fail_rank = -1,
                                         int fail_at = -1) {
  auto network = std::make_shared<Network>();
  return test::on_ranks(n, [&](int r) {
    MemoryTransport transport(network, r, n, r == fail_rank ? fail_at : -1);
    fn(transport);
  });
}

// Like on_ranks, but fails the test with every rank's exception.
void on_ranks_ok(int n, const std::function<void(MemoryTransport&)>& fn) {
  auto network = std::make_shared<Network>();
  test::on_ranks_ok(n, [&](int r) {
    MemoryTransport transport(network, r, n, -1);
    fn(transport);
  });
}

Clock::time_point deadline() { return Clock::now() + kDeadline; }

// ---- data and the reference ---------------------------------------------------------------------

// What rank r holds at index i: small integers, negative ones included, so that every dtype holds
// them exactly and f32 sums of up to 8 ranks are exact.
double value(int r, std::int64_t i) { return static_cast<double>((r + 1) * ((i % 7) + 1) - 3 * (i % 2) - 2 * (r % 3)); }

void set(const Tensor& t, std::int64_t i, double v) {
  switch (t.dtype()) {
    case DType::kF32: t.data<float>()[i] = static_cast<float>(v); break;
    case DType::kF64: t.data<double>()[i] = v; break;
    case DType::kI32: t.data<std::int32_t>()[i] = static_cast<std::int32_t>(v); break;
    case DType::kI64: t.data<std::int64_t>()[i] = static_cast<std::int64_t>(v); break;
    case DType::kBF16: t.data<std::uint16_t>()[i] = kernels::cpu::f32_to_bf16(static_cast<float>(v)); break;
  }
}

double at(const Tensor& t, std::int64_t i) {
  switch (t.dtype()) {
    case DType::kF32: return t.data<float>()[i];
    case DType::kF64: return t.data<double>()[i];
    case DType::kI32: return static_cast<double>(t.data<std::int32_t>()[i]);
    case DType::kI64: return static_cast<double>(t.data<std::int64_t>()[i]);
    case DType::kBF16: return kernels::cpu::bf16_to_f32(t.data<std::uint16_t>()[i]);
  }
  return 0;
}

Tensor rank_data(DType dtype, std::int64_t n, int r) {
  Tensor t = Tensor::empty({n}, dtype);
  for (std::int64_t i = 0; i < n; ++i) set(t, i, value(r, i));
  return t;
}

// The reduction of every rank's value at index i, rank 0 first.
double reduced(ReduceOp op, int n, std::int64_t i) {
  double acc = value(0, i);
  for (int r = 1; r < n; ++r) {
    const double v = value(r, i);
    if (op == ReduceOp::kSum) acc += v;
    if (op == ReduceOp::kMax) acc = std::max(acc, v);
    if (op == ReduceOp::kMin) acc = std::min(acc, v);
  }
  return acc;
}

std::string name(int n, DType dtype, ReduceOp op) {
  return std::to_string(n) + " ranks, " + ops::dtype_name(dtype) + " " + op_name(op);
}

// Uneven counts, zeros included: a few patterns per size (all zero, one rank only, a mix).
std::vector<std::vector<std::int64_t>> count_patterns(int n) {
  std::vector<std::vector<std::int64_t>> patterns;
  std::vector<std::int64_t> mix, zeros(static_cast<std::size_t>(n), 0), last(static_cast<std::size_t>(n), 0);
  for (int r = 0; r < n; ++r) mix.push_back((3 * r + 1) % 4 == 0 ? 0 : (5 * r + 3) % 11);
  last.back() = 9;
  patterns.push_back(mix);
  patterns.push_back(zeros);
  patterns.push_back(last);
  patterns.push_back(std::vector<std::int64_t>(static_cast<std::size_t>(n), 4));  // equal: Bruck's allgather
  return patterns;
}

// ---- results ------------------------------------------------------------------------------------

TEST(Collectives, AllreduceEveryDtypeAndOpMatchesTheReference) {
  for (int n : kSizes) {
    for (DType dtype : kDtypes) {
      for (ReduceOp op : kOps) {
        for (std::int64_t elements : {std::int64_t{0}, std::int64_t{1}, std::int64_t{n + 2}, std::int64_t{100}}) {
          SCOPED_TRACE(name(n, dtype, op) + ", " + std::to_string(elements) + " elements");
          std::vector<Tensor> results(static_cast<std::size_t>(n));
          on_ranks_ok(n, [&](MemoryTransport& t) {
            Tensor buffer = rank_data(dtype, elements, t.rank);
            allreduce(t, 0, std::make_shared<Tensor>(buffer), bytes_of(buffer), elements, dtype, combine_for(dtype, op),
                      deadline(), "allreduce #0");
            results[static_cast<std::size_t>(t.rank)] = buffer;
          });
          for (int r = 0; r < n; ++r) {
            for (std::int64_t i = 0; i < elements; ++i) {
              ASSERT_EQ(at(results[static_cast<std::size_t>(r)], i), reduced(op, n, i)) << "rank " << r << " index " << i;
            }
          }
        }
      }
    }
  }
}

TEST(Collectives, AllreduceIsBitIdenticalOnEveryRank) {
  // Values whose sum depends on the order of the additions: every rank must still hold the same bits.
  for (int n : kSizes) {
    for (DType dtype : {DType::kF32, DType::kF64}) {
      SCOPED_TRACE(name(n, dtype, ReduceOp::kSum));
      constexpr std::int64_t kElements = 1001;
      std::vector<Tensor> inputs, results(static_cast<std::size_t>(n));
      std::mt19937 rng(static_cast<unsigned>(n));
      std::uniform_real_distribution<double> uniform(-1.0, 1.0);
      for (int r = 0; r < n; ++r) {
        inputs.push_back(Tensor::empty({kElements}, dtype));
        for (std::int64_t i = 0; i < kElements; ++i) set(inputs.back(), i, uniform(rng) * std::pow(10.0, i % 9 - 4));
      }
      on_ranks_ok(n, [&](MemoryTransport& t) {
        Tensor buffer = inputs[static_cast<std::size_t>(t.rank)].clone();
        allreduce(t, 0, std::make_shared<Tensor>(buffer), bytes_of(buffer), kElements, dtype,
                  combine_for(dtype, ReduceOp::kSum), deadline(), "allreduce #0");
        results[static_cast<std::size_t>(t.rank)] = buffer;
      });
      for (int r = 0; r < n; ++r) {
        ASSERT_EQ(std::memcmp(results[0].raw(), results[static_cast<std::size_t>(r)].raw(), results[0].bytes()), 0)
            << "rank " << r << " differs from rank 0";
      }
      for (std::int64_t i = 0; i < kElements; ++i) {
        double sum = 0;
        for (int r = 0; r < n; ++r) sum += at(inputs[static_cast<std::size_t>(r)], i);
        ASSERT_NEAR(at(results[0], i), sum, 1e-5 * std::max(1.0, std::abs(sum)) * n) << "index " << i;
      }
    }
  }
}

TEST(Collectives, ReduceScatterUnevenCountsEveryDtypeAndOp) {
  for (int n : kSizes) {
    for (const auto& counts : count_patterns(n)) {
      const auto off = offsets_of(counts);
      for (DType dtype : kDtypes) {
        for (ReduceOp op : kOps) {
          for (bool in_place : {false, true}) {
            SCOPED_TRACE(name(n, dtype, op) + (in_place ? ", in place" : ""));
            std::vector<Tensor> outputs(static_cast<std::size_t>(n)), inputs(static_cast<std::size_t>(n));
            on_ranks_ok(n, [&](MemoryTransport& t) {
              const auto r = static_cast<std::size_t>(t.rank);
              Tensor input = rank_data(dtype, off.back(), t.rank);
              Tensor output = Tensor::zeros({counts[r]}, dtype);
              std::byte* out = in_place ? bytes_of(input) + static_cast<std::size_t>(off[r]) * ops::dtype_size(dtype)
                                        : bytes_of(output);
              reduce_scatter(t, 0, 0, std::make_shared<Tensor>(input), bytes_of(input), out, counts, dtype,
                             combine_for(dtype, op), deadline(), "reduce_scatter #0");
              if (in_place) std::memcpy(output.raw(), out, output.bytes());
              outputs[r] = output;
              inputs[r] = input;
            });
            for (int r = 0; r < n; ++r) {
              const auto ru = static_cast<std::size_t>(r);
              for (std::int64_t i = 0; i < counts[ru]; ++i) {
                ASSERT_EQ(at(outputs[ru], i), reduced(op, n, off[ru] + i)) << "rank " << r << " index " << i;
              }
              if (in_place) continue;
              for (std::int64_t i = 0; i < off.back(); ++i) {  // `in` is never written
                ASSERT_EQ(at(inputs[ru], i), value(r, i)) << "rank " << r << " input index " << i;
              }
            }
          }
        }
      }
    }
  }
}

TEST(Collectives, AllgatherUnevenCountsEveryDtype) {
  for (int n : kSizes) {
    for (const auto& counts : count_patterns(n)) {
      const auto off = offsets_of(counts);
      for (DType dtype : kDtypes) {
        for (bool in_place : {false, true}) {
          SCOPED_TRACE(std::to_string(n) + " ranks, " + ops::dtype_name(dtype) + (in_place ? ", in place" : ""));
          const std::size_t elem = ops::dtype_size(dtype);
          std::vector<Tensor> outputs(static_cast<std::size_t>(n));
          on_ranks_ok(n, [&](MemoryTransport& t) {
            const auto r = static_cast<std::size_t>(t.rank);
            Tensor output = Tensor::zeros({off.back()}, dtype);
            Tensor input = Tensor::empty({counts[r]}, dtype);
            for (std::int64_t i = 0; i < counts[r]; ++i) set(input, i, value(t.rank, off[r] + i));
            const std::byte* in = bytes_of(input);
            if (in_place) {
              std::memcpy(bytes_of(output) + static_cast<std::size_t>(off[r]) * elem, in, input.bytes());
              in = bytes_of(output) + static_cast<std::size_t>(off[r]) * elem;
            }
            allgather(t, 0, 0, std::make_shared<Tensor>(output), in, bytes_of(output), counts, elem, deadline(),
                      "allgather #0");
            outputs[r] = output;
          });
          for (int r = 0; r < n; ++r) {
            for (int b = 0; b < n; ++b) {
              const auto bu = static_cast<std::size_t>(b);
              for (std::int64_t i = off[bu]; i < off[bu + 1]; ++i) {
                ASSERT_EQ(at(outputs[static_cast<std::size_t>(r)], i), value(b, i)) << "rank " << r << " index " << i;
              }
            }
          }
        }
      }
    }
  }
}

// Equal small blocks (the step boundary's rows) are gathered in ceil(log2 n) rounds, one send and
// one receive each, at any size, powers of two or not; large or unequal ones by the ring's n - 1.
TEST(Collectives, AnAllgatherOfSmallEqualBlocksTakesLog2Rounds) {
  for (int n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17}) {
    for (std::int64_t width : {std::int64_t{1}, std::int64_t{12}, std::int64_t{20000}}) {
      SCOPED_TRACE(std::to_string(n) + " ranks of " + std::to_string(width) + " i64");
      const std::vector<std::int64_t> counts(static_cast<std::size_t>(n), width);
      const auto off = offsets_of(counts);
      const bool doubling = n > 2 && width * 8 * n <= static_cast<std::int64_t>(kDoublingAllgatherBytes);
      EXPECT_EQ(gathers_by_doubling(counts, 8), doubling);
      int rounds = 0;
      for (int d = 1; d < n; d *= 2) ++rounds;
      std::vector<Tensor> outputs(static_cast<std::size_t>(n));
      std::vector<int> posts(static_cast<std::size_t>(n));
      on_ranks_ok(n, [&](MemoryTransport& t) {
        const auto r = static_cast<std::size_t>(t.rank);
        Tensor output = Tensor::zeros({off.back()}, DType::kI64);
        Tensor input = Tensor::empty({width}, DType::kI64);
        for (std::int64_t i = 0; i < width; ++i) set(input, i, value(t.rank, off[r] + i));
        allgather(t, 0, 0, std::make_shared<Tensor>(output), bytes_of(input), bytes_of(output), counts, 8, deadline(),
                  "allgather #0");
        outputs[r] = output;
        posts[r] = t.posts();
      });
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(posts[static_cast<std::size_t>(r)], 2 * (doubling ? rounds : n - 1)) << "rank " << r;
        for (int b = 0; b < n; ++b) {
          const auto bu = static_cast<std::size_t>(b);
          for (std::int64_t i = off[bu]; i < off[bu + 1]; ++i) {
            ASSERT_EQ(at(outputs[static_cast<std::size_t>(r)], i), value(b, i)) << "rank " << r << " index " << i;
          }
        }
      }
    }
  }
  EXPECT_FALSE(gathers_by_doubling({4, 4, 5}, 8));
  EXPECT_FALSE(gathers_by_doubling({0, 0, 0}, 8));
}

TEST(Collectives, BroadcastFromEveryRoot) {
  for (int n : kSizes) {
    for (DType dtype : kDtypes) {
      for (std::int64_t elements : {std::int64_t{0}, std::int64_t{1}, std::int64_t{37}}) {
        for (int root = 0; root < n; ++root) {
          SCOPED_TRACE(std::to_string(n) + " ranks, " + ops::dtype_name(dtype) + ", " + std::to_string(elements) +
                       " elements, root " + std::to_string(root));
          std::vector<Tensor> results(static_cast<std::size_t>(n));
          on_ranks_ok(n, [&](MemoryTransport& t) {
            Tensor buffer = rank_data(dtype, elements, t.rank);
            broadcast(t, 0, std::make_shared<Tensor>(buffer), bytes_of(buffer), buffer.bytes(), root, deadline(),
                      "broadcast #0");
            results[static_cast<std::size_t>(t.rank)] = buffer;
          });
          for (int r = 0; r < n; ++r) {
            for (std::int64_t i = 0; i < elements; ++i) {
              ASSERT_EQ(at(results[static_cast<std::size_t>(r)], i), value(root, i)) << "rank " << r << " index " << i;
            }
          }
        }
      }
    }
  }
}

TEST(Collectives, NoRankLeavesABarrierBeforeEveryRankEnteredIt) {
  for (int n : kSizes) {
    SCOPED_TRACE(std::to_string(n) + " ranks");
    std::atomic<int> entered{0};
    on_ranks_ok(n, [&](MemoryTransport& t) {
      for (std::uint64_t seq = 0; seq < 3; ++seq) {
        std::this_thread::sleep_for(std::chrono::milliseconds(t.rank));
        ++entered;
        barrier(t, seq, deadline(), "barrier #" + std::to_string(seq));
        EXPECT_GE(entered.load(), n * static_cast<int>(seq + 1)) << "rank " << t.rank;
      }
    });
  }
}

TEST(Collectives, ASequenceOfCollectivesWithTheirDescriptors) {
  // Back to back on one transport, each with its own sequence number (its own slots), each
  // starting with the descriptor exchange, as the communicator's worker runs them.
  for (int n : kSizes) {
    SCOPED_TRACE(std::to_string(n) + " ranks");
    on_ranks_ok(n, [&](MemoryTransport& t) {
      std::uint64_t seq = 0;
      auto exchange = [&](Kind kind, std::int64_t elements) {
        const Descriptor d{.seq = seq, .kind = static_cast<std::uint32_t>(kind), .elements = elements};
        exchange_descriptor(t, d, deadline(), std::string(kind_name(d.kind)) + " #" + std::to_string(seq));
      };
      Tensor x = rank_data(DType::kI64, 10, t.rank);
      exchange(Kind::kAllreduce, 10);
      allreduce(t, seq++, std::make_shared<Tensor>(x), bytes_of(x), 10, DType::kI64,
                combine_for(DType::kI64, ReduceOp::kSum), deadline(), "allreduce");
      exchange(Kind::kBroadcast, 10);
      broadcast(t, seq++, std::make_shared<Tensor>(x), bytes_of(x), x.bytes(), n - 1, deadline(), "broadcast");
      exchange(Kind::kBarrier, 0);
      barrier(t, seq++, deadline(), "barrier");
      for (std::int64_t i = 0; i < 10; ++i) EXPECT_EQ(at(x, i), reduced(ReduceOp::kSum, n, i));
    });
  }
}

// ---- failures -----------------------------------------------------------------------------------

// Every rank threw one of hdp's errors, and the whole run ended well before the deadline.
template <typename Fn>
void expect_every_rank_throws(int n, Fn&& fn, int fail_rank, int fail_at, std::chrono::milliseconds within) {
  const auto start = Clock::now();
  const auto errors = on_ranks(n, fn, fail_rank, fail_at);
  EXPECT_LT(Clock::now() - start, within);
  for (int r = 0; r < n; ++r) {
    const auto& e = errors[static_cast<std::size_t>(r)];
    ASSERT_TRUE(e) << "rank " << r << " returned";
    try {
      std::rethrow_exception(e);
    } catch (const Error&) {
      // PeerLost, TimeoutError or InvalidArgument, as the case says
    } catch (const std::exception& other) {
      ADD_FAILURE() << "rank " << r << " threw something else: " << other.what();
    }
  }
}

TEST(CollectivesFailure, ATransportThatFailsMidCollectiveFailsEveryRank) {
  // Each rank's allreduce of 64 elements over n ranks posts 2(n-1) messages in its reduce-scatter
  // and 2(n-1) in its allgather, or 2 ceil(log2 n) where its equal blocks are gathered by doubling
  // (8 ranks): fail rank 1's at the first, in the middle, and at the last of them.
  for (int n : {2, 3, 5, 8}) {
    int gather_posts = 2 * (n - 1);
    if (gathers_by_doubling(std::vector<std::int64_t>(static_cast<std::size_t>(n), 64 / n), 4) && 64 % n == 0) {
      gather_posts = 0;
      for (int d = 1; d < n; d *= 2) gather_posts += 2;
    }
    const int posts = 2 * (n - 1) + gather_posts;
    for (int fail_at : {0, 2 * (n - 1), posts - 1}) {
      SCOPED_TRACE(std::to_string(n) + " ranks, post " + std::to_string(fail_at) + " fails");
      expect_every_rank_throws(
          n,
          [&](MemoryTransport& t) {
            Tensor x = rank_data(DType::kF32, 64, t.rank);
            allreduce(t, 0, std::make_shared<Tensor>(x), bytes_of(x), 64, DType::kF32,
                      combine_for(DType::kF32, ReduceOp::kSum), deadline(), "allreduce #0");
            // Ranks that finished before the failure reached them fail at their next collective.
            barrier(t, 1, deadline(), "barrier #1");
          },
          1, fail_at, 5s);
    }
  }
}

TEST(CollectivesFailure, EveryCollectiveThrowsOnEveryRankWhenOneRankFailsIn) {
  using Body = std::function<void(MemoryTransport&)>;
  const std::vector<std::pair<std::string, Body>> bodies = {
      {"reduce_scatter",
       [](MemoryTransport& t) {
         std::vector<std::int64_t> counts(static_cast<std::size_t>(t.size), 3);
         Tensor in = rank_data(DType::kI32, 3 * t.size, t.rank), out = Tensor::empty({3}, DType::kI32);
         reduce_scatter(t, 0, 0, std::make_shared<Tensor>(in), bytes_of(in), bytes_of(out), counts, DType::kI32,
                        combine_for(DType::kI32, ReduceOp::kMax), deadline(), "reduce_scatter #0");
       }},
      {"allgather",
       [](MemoryTransport& t) {
         std::vector<std::int64_t> counts(static_cast<std::size_t>(t.size), 2);
         Tensor in = rank_data(DType::kF64, 2, t.rank), out = Tensor::empty({2 * t.size}, DType::kF64);
         allgather(t, 0, 0, std::make_shared<Tensor>(out), bytes_of(in), bytes_of(out), counts, 8, deadline(),
                   "allgather #0");
       }},
      {"broadcast",
       [](MemoryTransport& t) {
         Tensor x = rank_data(DType::kI64, 5, t.rank);
         broadcast(t, 0, std::make_shared<Tensor>(x), bytes_of(x), x.bytes(), 0, deadline(), "broadcast #0");
       }},
      {"barrier", [](MemoryTransport& t) { barrier(t, 0, deadline(), "barrier #0"); }},
  };
  for (const auto& [what, body] : bodies) {
    for (int n : {2, 3, 5, 8}) {
      SCOPED_TRACE(what + ", " + std::to_string(n) + " ranks");
      // The last rank fails at its first post; ranks that got through then fail at a barrier.
      expect_every_rank_throws(
          n,
          [&](MemoryTransport& t) {
            body(t);
            barrier(t, 1, deadline(), "barrier #1");
          },
          n - 1, 0, 5s);
    }
  }
}

TEST(CollectivesFailure, ARankThatNeverComesTimesOutEveryOtherRank) {
  // Rank 0 never calls: its neighbours wait until the deadline (short here), then fail the
  // transport, which ends every other rank's wait.
  for (int n : {2, 3, 5}) {
    SCOPED_TRACE(std::to_string(n) + " ranks");
    const auto start = Clock::now();
    const auto errors = on_ranks(n, [&](MemoryTransport& t) {
      if (t.rank == 0) return;
      Tensor x = rank_data(DType::kF64, 16, t.rank);
      allreduce(t, 0, std::make_shared<Tensor>(x), bytes_of(x), 16, DType::kF64,
                combine_for(DType::kF64, ReduceOp::kSum), Clock::now() + 200ms, "allreduce #0");
    });
    EXPECT_LT(Clock::now() - start, 5s);
    bool timed_out = false;
    for (int r = 1; r < n; ++r) {
      ASSERT_TRUE(errors[static_cast<std::size_t>(r)]) << "rank " << r << " returned";
      try {
        std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
      } catch (const TimeoutError& e) {
        timed_out = true;
        EXPECT_THAT(e.what(), HasSubstr("allreduce #0"));
      } catch (const PeerLost&) {
        // a rank whose wait the first timeout ended
      }
    }
    EXPECT_TRUE(timed_out);
  }
}

TEST(CollectivesFailure, DescriptorsThatDifferFailEveryRank) {
  // Rank 2 of 5 starts a broadcast from another root: the first of it and its neighbours to compare
  // throws InvalidArgument naming both descriptors and kills the transport, so every other rank
  // fails too (the ranks whose neighbours agreed, at the next collective).
  constexpr int n = 5;
  const auto start = Clock::now();
  const auto errors = on_ranks(n, [&](MemoryTransport& t) {
    const Descriptor d{.kind = static_cast<std::uint32_t>(Kind::kBroadcast), .dtype = 0, .root = t.rank == 2 ? 1 : 0,
                       .elements = 4};
    exchange_descriptor(t, d, deadline(), "broadcast #0");
    barrier(t, 1, deadline(), "barrier #1");
  });
  EXPECT_LT(Clock::now() - start, 5s);
  int invalid = 0;
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(errors[static_cast<std::size_t>(r)]) << "rank " << r << " returned";
    try {
      std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
    } catch (const InvalidArgument& e) {
      ++invalid;
      EXPECT_TRUE(r >= 1 && r <= 3) << "rank " << r;
      EXPECT_THAT(e.what(), HasSubstr("collectives differ across ranks"));
      EXPECT_THAT(e.what(), HasSubstr("broadcast #0 of 4 f32 from root 1"));
      EXPECT_THAT(e.what(), HasSubstr("broadcast #0 of 4 f32 from root 0"));
    } catch (const PeerLost&) {
      // the transport failed under it (a rank that compared first killed it)
    }
  }
  EXPECT_GE(invalid, 1);
}

}  // namespace
}  // namespace hdp::mesh
