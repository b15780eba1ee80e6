// File: elastic/release.h
//
// One build per job, decided before a node joins (docs/architecture.md, "One build, checked before a
// node joins"): the leader does not admit a node whose lease names another build (`version`,
// `wire`: common/release.h) than the live members' (elastic/membership_decision.h), and writes its
// refusal (keys::refusal, per incarnation) with a `node_refused` event; the node's agent reads it
// in its heartbeat (MembershipAgent::refused()), stops its workers, leaves and exits
// kExitRefused (5). Here: what counts as another build, and the refusal's record.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "elastic/membership.h"

namespace hdp::elastic {

// The build a lease names, as one phrase: "hdp 0.1.0, wire 1" ("wire unknown" for 0).
std::string release_of(const NodeLease& lease);

// How `node` differs from `job` in build, as the refusal says it, or nullopt when it does not:
// another version, or another wire where both recorded one (an older agent records none).
std::optional<std::string> release_difference(const NodeLease& node, const NodeLease& job);

// A node's refusal, keys::refusal(node, incarnation): why, and by whom (the leader's member id).
struct Refusal {
  std::string why;
  std::string by;
  std::int64_t at_ms = 0;  // wall clock
};
std::string encode(const Refusal& refusal);
// Throws InvalidArgument naming `what` and the field.
Refusal decode_refusal(std::string_view text, std::string_view what);

}  // namespace hdp::elastic
