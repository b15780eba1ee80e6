// File: elastic/control.h
//
// Requests that act on a running job, from any machine that can reach its store (`hdp drain`,
// `hdp stop`, `hdp checkpoint`, `hdp cordon`/`uncordon`; docs/operations.md), and how the job reads
// them. Two keys of the job's namespace (docs/redis-schema.md):
//  - `control` (JSON): the pending requests. A stop (the whole job, as SIGUSR1 to every agent) and
//    a drain (one node's incarnation leaves, as SIGTERM to its agent) are read by the agents in
//    their heartbeat's own read (one key more in its MGET), so they reach a job whatever it is
//    doing (training, waiting below its minimum, standing by); a checkpoint is read by rank 0 in
//    its per-step report and taken by every rank at one step. A drain names the incarnation it
//    was written for (fencing by construction): an agent started again on that node is a new
//    incarnation and is not drained by it.
//  - `cordons` (JSON): nodes that the leader does not admit while they are cordoned (a member
//    stays until it leaves; a new incarnation of it, or a standby, waits until it is uncordoned).
// Each request is written with an event `request` (op, id, by) in the same commit, and its end
// with an event `request_done` (op, id, outcome, ...) by whoever acted on it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "elastic/live_settings.h"
#include "elastic/store.h"

namespace hdp::elastic {

struct Request {
  std::string id;      // 16 hex digits, random
  std::string by;      // who asked: user@host
  std::int64_t at_ms = 0;  // wall clock
};

struct DrainRequest : Request {
  std::string incarnation;  // the incarnation of the node it drains
};

struct ControlRequests {
  std::optional<Request> stop;
  std::optional<Request> checkpoint;
  std::map<std::string, DrainRequest> drains;  // by node

  bool empty() const { return !stop && !checkpoint && drains.empty(); }
  // The drain for this node's incarnation, if one is pending.
  const DrainRequest* drain_of(const std::string& node, const std::string& incarnation) const;
};

std::string encode(const ControlRequests& requests);
// Throws InvalidArgument naming `what` and the field.
ControlRequests decode_control(std::string_view text, std::string_view what);

struct Cordon {
  std::string by;
  std::int64_t at_ms = 0;
};
using Cordons = std::map<std::string, Cordon>;  // by node

std::string encode(const Cordons& cordons);
Cordons decode_cordons(std::string_view text, std::string_view what);

// The live settings (`settings` key, `hdp config set`) are elastic/live_settings.h's table.

// The number of node ids in a comma-separated list ("n4,n7"; "" is 0), nullopt when it is not
// one (an empty entry, a character other than letters, digits, '.', '-', '_').
std::optional<int> count_node_list(std::string_view list);

// The writes of the `hdp` subcommands. Each is a read-modify-write of one key, committed only if
// the key still holds what was read (retried a bounded number of times against concurrent
// writers), with its `request` event in the same commit. A `control` or `cordons` value that does
// not decode is refused (InvalidArgument naming the key): a person must look at it.
class JobControl {
 public:
  JobControl(std::shared_ptr<Store> job_store, std::string by) : store_(std::move(job_store)), by_(std::move(by)) {}

  // A pending request of the same kind is returned as it is (asking twice is asking once).
  Request stop();
  Request checkpoint();
  // `incarnation`: the node's current one (its `node:<id>` claim).
  Request drain(const std::string& node, const std::string& incarnation);
  // Returns false when the node was already (un)cordoned.
  bool cordon(const std::string& node);
  bool uncordon(const std::string& node);
  // Applies `assignments` (name=value, each checked first) to the `settings` key, with a `config`
  // event; returns the settings now in the key.
  LiveSettings set(const std::vector<std::string>& assignments);

  const std::string& by() const { return by_; }

 private:
  Request ask(const char* op, std::optional<Request> ControlRequests::*slot);

  std::shared_ptr<Store> store_;
  std::string by_;
};

// The acting side: removes a request once it was acted on (only if it is still the one with this
// id), with its `request_done` event {op, id, outcome, details...} in the same commit. Errors
// are logged, never thrown (the request then stays; every reader tolerates a done one: a drain is
// fenced by its incarnation, a checkpoint by its id, a stop by the job's outcome).
void finish_request(Store& job_store, const std::string& op, const std::string& id, const std::string& outcome,
                    const Fields& details = {}, const std::string& node = {});

// An agent starting for the job resumes it: a pending stop is withdrawn (event `request_done`,
// outcome `withdrawn`). Errors are logged. Returns whether one was withdrawn.
bool withdraw_stop(Store& job_store);

// `user@host` of this process (USER, else the password entry; the host name).
std::string requester();

}  // namespace hdp::elastic
