// File: mesh/comm/wire.h
//
// What the ranks of one communicator say to each other over TCP (tcp_network.h), and the address
// record each rank publishes in the store. Written once here; both ends of a connection include it.
//
// A connection: the lower rank of the pair connects to the higher one's published address and
// sends a Hello (who it is, which communicator and generation it belongs to, whom it means to
// reach); the listener checks it against its own Identity (check_hello) and answers with an Ack
// carrying the verdict. A refused connection is closed after the Ack, and counted. Then frames:
// a FrameHeader (slot, byte count) followed by that many bytes, in both directions, and, before an
// orderly close, a goodbye (kGoodbyeSlot).
//
// The address record (one per rank and communicator, under the communicator's namespace in the
// store, key record_key(rank)): "host:port", a few dozen bytes. A rank reads only the records of
// the peers it connects to.
//
// All integers are in the host's byte order: the ranks of a job share one architecture (as
// Gloo's and NCCL's wire formats assume); the magic number catches a peer that does not.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/release.h"

namespace hdp::mesh::wire {

// "HDPMESH" and the wire protocol's digit, in little-endian bytes ("HDPMESH1" for protocol 1): a
// change to anything this header or the collectives put on the wire raises kWireProtocol
// (common/release.h), and a peer of another wire fails its Hello (kBadMagic); the leader refuses a
// node of another wire before it joins a running job (elastic/release.h).
static_assert(kWireProtocol >= 1 && kWireProtocol <= 9, "the magic carries the wire protocol as one digit");
inline constexpr std::uint64_t kMagic =
    0x004853454d504448ULL | (static_cast<std::uint64_t>('0' + kWireProtocol) << 56);
static_assert(kWireProtocol != 1 || kMagic == 0x314853454d504448ULL);

// Which communicator a rank belongs to: its group (a hash of the communicator's namespace, which
// names the job, the generation and the channel), the generation, its rank and the size.
struct Identity {
  std::uint64_t group = 0;
  std::int64_t generation = 0;
  std::int32_t rank = 0;
  std::int32_t size = 0;
};

struct Hello {
  std::uint64_t magic = kMagic;
  std::uint64_t group = 0;
  std::int64_t generation = 0;
  std::int32_t from = 0;  // the connecting rank
  std::int32_t to = 0;    // the rank it means to reach
  std::int32_t size = 0;
  std::int32_t reserved = 0;
};
static_assert(sizeof(Hello) == 40);

enum class Verdict : std::uint32_t {
  kAccepted = 0,
  kBadMagic = 1,         // not an hdp rank (or another byte order / wire protocol)
  kOtherGroup = 2,       // another job or channel
  kOtherGeneration = 3,  // a rank of an older (or newer) generation
  kOtherSize = 4,
  kWrongRank = 5,        // meant for another rank (a stale or wrong address record)
  kBadSource = 6,        // from a rank out of range, itself, or one that must not connect to us
  kDuplicate = 7,        // that rank is connected already, or its connection was lost
};

struct Ack {
  std::uint64_t magic = kMagic;
  std::uint32_t verdict = 0;
  std::uint32_t reserved = 0;
};
static_assert(sizeof(Ack) == 16);

struct FrameHeader {
  std::uint64_t slot = 0;
  std::uint64_t bytes = 0;
};
static_assert(sizeof(FrameHeader) == 16);

// The last frame of a connection closed in order (the communicator destroyed with nothing in
// flight): a header with this slot and no bytes. The end of the stream after it is no failure;
// without it, the peer's process is gone or its connection was cut (TcpNetwork::first_loss).
inline constexpr std::uint64_t kGoodbyeSlot = ~std::uint64_t{0};

// Which rank of a pair connects: the lower one.
inline bool initiates(int rank, int peer) { return rank < peer; }

// The hello `from` sends to reach `to` in `mine`'s communicator.
Hello hello_for(const Identity& mine, int to);

// The listener's check of a hello (everything but duplicates, which need the connection table).
Verdict check_hello(const Hello& hello, const Identity& mine);

// "rank 3 of generation 7 (group 0x…) to rank 1: a rank of another generation (7, not 8)".
std::string describe(Verdict verdict, const Hello& hello, const Identity& mine);
const char* verdict_name(std::uint32_t verdict);

// A 64-bit hash (xxHash) of a communicator's namespace.
std::uint64_t group_of(std::string_view name);

// The address record. It lives as long as its communicator: written with a TTL of kRecordTtl and
// rewritten every kRecordRefresh (a pair of a later step's plan may connect hours into a
// generation), so that a generation's records vanish within an hour of its end, like its other
// keys (docs/redis-schema.md).
inline constexpr std::chrono::minutes kRecordTtl{60};
inline constexpr std::chrono::minutes kRecordRefresh{15};
std::string record_key(int rank);
std::string record(std::string_view host, std::uint16_t port);
struct Address {
  std::string host;
  std::uint16_t port = 0;
};
// nullopt for anything but "host:port" with a port in [1, 65535].
std::optional<Address> parse_record(std::string_view text);

}  // namespace hdp::mesh::wire
