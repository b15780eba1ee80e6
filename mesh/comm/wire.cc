#include "mesh/comm/wire.h"

#include <xxhash.h>

#include <charconv>

namespace hdp::mesh::wire {

Hello hello_for(const Identity& mine, int to) {
  Hello h;
  h.group = mine.group;
  h.generation = mine.generation;
  h.from = mine.rank;
  h.to = to;
  h.size = mine.size;
  return h;
}

Verdict check_hello(const Hello& hello, const Identity& mine) {
  if (hello.magic != kMagic) return Verdict::kBadMagic;
  // The generation first: a rank of an older generation (whose group differs too) is told so.
  if (hello.generation != mine.generation) return Verdict::kOtherGeneration;
  if (hello.group != mine.group) return Verdict::kOtherGroup;
  if (hello.size != mine.size) return Verdict::kOtherSize;
  if (hello.to != mine.rank) return Verdict::kWrongRank;
  if (hello.from < 0 || hello.from >= mine.size || !initiates(hello.from, mine.rank)) return Verdict::kBadSource;
  return Verdict::kAccepted;
}

const char* verdict_name(std::uint32_t verdict) {
  switch (static_cast<Verdict>(verdict)) {
    case Verdict::kAccepted: return "accepted";
    case Verdict::kBadMagic: return "not an hdp rank of this wire protocol (bad magic number)";
    case Verdict::kOtherGroup: return "a rank of another job or channel";
    case Verdict::kOtherGeneration: return "a rank of another generation";
    case Verdict::kOtherSize: return "a rank of a communicator of another size";
    case Verdict::kWrongRank: return "meant for another rank";
    case Verdict::kBadSource: return "from a rank that may not connect to this one";
    case Verdict::kDuplicate: return "that rank is connected already (or was lost)";
  }
  return "an unknown verdict";
}

std::string describe(Verdict verdict, const Hello& hello, const Identity& mine) {
  std::string text = "rank " + std::to_string(hello.from) + " of generation " + std::to_string(hello.generation) +
                     " (size " + std::to_string(hello.size) + ") to rank " + std::to_string(hello.to) + ": " +
                     verdict_name(static_cast<std::uint32_t>(verdict));
  switch (verdict) {
    case Verdict::kOtherGeneration:
      text += " (" + std::to_string(hello.generation) + ", not " + std::to_string(mine.generation) + ")";
      break;
    case Verdict::kOtherSize:
      text += " (" + std::to_string(hello.size) + ", not " + std::to_string(mine.size) + ")";
      break;
    case Verdict::kWrongRank:
      text += " (this is rank " + std::to_string(mine.rank) + ")";
      break;
    default:
      break;
  }
  return text;
}

std::uint64_t group_of(std::string_view name) { return XXH64(name.data(), name.size(), 0); }

std::string record_key(int rank) { return "addr/" + std::to_string(rank); }

std::string record(std::string_view host, std::uint16_t port) {
  const bool v6 = host.find(':') != std::string_view::npos;
  return (v6 ? "[" + std::string(host) + "]" : std::string(host)) + ":" + std::to_string(port);
}

std::optional<Address> parse_record(std::string_view text) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 >= text.size()) return std::nullopt;
  unsigned port = 0;
  const char* first = text.data() + colon + 1;
  const char* last = text.data() + text.size();
  const auto [end, error] = std::from_chars(first, last, port);
  if (error != std::errc{} || end != last || port == 0 || port > 65535) return std::nullopt;
  std::string host(text.substr(0, colon));
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return Address{std::move(host), static_cast<std::uint16_t>(port)};
}

}  // namespace hdp::mesh::wire
