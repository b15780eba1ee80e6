#include "elastic/control.h"

#include <pwd.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <thread>

#include "common/log.h"
#include "elastic/backoff.h"
#include "elastic/job_keys.h"
#include "elastic/job_state.h"
#include "elastic/json_fields.h"
#include "elastic/node_registration.h"

namespace hdp::elastic {
namespace {

using namespace json_fields;

// More entries than this in `control` or `cordons` is garbage (a node id per entry).
constexpr std::size_t kMaxEntries = 1 << 20;
// Concurrent writers of one key retry at most this often. Each failed try means another writer
// committed in between; the loser then waits a jittered, growing interval (1 ms doubling to 50 ms)
// before reading again, so a writer that is slower than the others (preempted between its read and
// its commit on a loaded machine) is not outrun on every try: without the wait, 8 threads on 2
// cores once lost 64 tries in a row. The waits add up to at most about 3 s.
constexpr int kAttempts = 64;
constexpr BackoffOptions kConflictBackoff{.initial = std::chrono::milliseconds(1),
                                          .max = std::chrono::milliseconds(50),
                                          .multiplier = 2.0,
                                          .jitter = 0.5};

json request_json(const Request& r) { return {{"id", r.id}, {"by", r.by}, {"at_ms", r.at_ms}}; }

void read_request(const json& object, std::string_view what, Request& r) {
  if (!object.is_object()) bad(what, "a request is not an object");
  r.id = field<std::string>(object, "id", what);
  if (r.id.empty()) bad(what, "field 'id' is empty");
  r.by = field<std::string>(object, "by", what);
  r.at_ms = bounded(object, "at_ms", what, 0, std::numeric_limits<std::int64_t>::max());
}

std::optional<Request> optional_request(const json& value, const char* name, std::string_view what) {
  auto it = value.find(name);
  if (it == value.end()) return std::nullopt;
  Request r;
  read_request(*it, what, r);
  return r;
}

Request new_request(const std::string& by) { return {new_incarnation(), by, now_ms()}; }

// Commits `key` := change(current value), requiring it unchanged, with `writes` after it (events).
// `change` returns nullopt when there is nothing to write (then nothing is committed). Throws
// Error when other writers kept winning for kAttempts tries.
template <typename Change>
bool update(Store& store, const char* key, Change&& change) {
  std::optional<Backoff> backoff;  // made at the first conflict
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    if (attempt > 0) {
      if (!backoff) backoff.emplace(kConflictBackoff);
      std::this_thread::sleep_for(backoff->next());
    }
    const std::optional<std::string> current = store.get(key);
    std::vector<Write> writes;
    std::optional<std::string> next = change(current, writes);
    if (!next) return false;
    Transaction txn;
    if (current) {
      txn.require(key, *current);
    } else {
      txn.require_absent(key);
    }
    txn.add(next->empty() ? Write::erase(key) : Write::set(key, *next));
    for (auto& write : writes) txn.add(std::move(write));
    if (commit_with_job_state(store, txn)) return true;
  }
  throw Error(std::string("could not update Redis key '") + key + "': other writers changed it " +
              std::to_string(kAttempts) + " times in a row");
}

ControlRequests read_control(const std::optional<std::string>& value) {
  return value ? decode_control(*value, keys::kControl) : ControlRequests{};
}

Cordons read_cordons(const std::optional<std::string>& value) {
  return value ? decode_cordons(*value, keys::kCordons) : Cordons{};
}

Fields request_event_fields(const std::string& op, const Request& r, const std::string& node = {}) {
  Fields fields{{"op", op}, {"id", r.id}, {"by", r.by}};
  if (!node.empty()) fields.emplace_back("node", node);
  return fields;
}

}  // namespace

const DrainRequest* ControlRequests::drain_of(const std::string& node, const std::string& incarnation) const {
  auto it = drains.find(node);
  return it != drains.end() && it->second.incarnation == incarnation ? &it->second : nullptr;
}

std::string encode(const ControlRequests& requests) {
  if (requests.empty()) return {};
  json value = json::object();
  if (requests.stop) value["stop"] = request_json(*requests.stop);
  if (requests.checkpoint) value["checkpoint"] = request_json(*requests.checkpoint);
  if (!requests.drains.empty()) {
    json drains = json::object();
    for (const auto& [node, d] : requests.drains) {
      json entry = request_json(d);
      entry["incarnation"] = d.incarnation;
      drains[node] = std::move(entry);
    }
    value["drain"] = std::move(drains);
  }
  return value.dump();
}

ControlRequests decode_control(std::string_view text, std::string_view what) {
  const json value = parse(text, what);
  for (const auto& [name, entry] : value.items()) {
    if (name != "stop" && name != "checkpoint" && name != "drain") bad(what, "unknown request " + quote_value(name));
  }
  ControlRequests requests;
  requests.stop = optional_request(value, "stop", what);
  requests.checkpoint = optional_request(value, "checkpoint", what);
  if (auto it = value.find("drain"); it != value.end()) {
    if (!it->is_object()) bad(what, "field 'drain' is not an object");
    if (it->size() > kMaxEntries) bad(what, "more than " + std::to_string(kMaxEntries) + " drains");
    for (const auto& [node, entry] : it->items()) {
      if (node.empty()) bad(what, "a drain names no node");
      DrainRequest d;
      read_request(entry, what, d);
      d.incarnation = field<std::string>(entry, "incarnation", what);
      requests.drains.emplace(node, std::move(d));
    }
  }
  return requests;
}

std::string encode(const Cordons& cordons) {
  if (cordons.empty()) return {};
  json value = json::object();
  for (const auto& [node, c] : cordons) value[node] = {{"by", c.by}, {"at_ms", c.at_ms}};
  return value.dump();
}

Cordons decode_cordons(std::string_view text, std::string_view what) {
  const json value = parse(text, what);
  if (value.size() > kMaxEntries) bad(what, "more than " + std::to_string(kMaxEntries) + " cordons");
  Cordons cordons;
  for (const auto& [node, entry] : value.items()) {
    if (node.empty()) bad(what, "a cordon names no node");
    if (!entry.is_object()) bad(what, "cordon " + quote_value(node) + " is not an object");
    cordons[node] = {field<std::string>(entry, "by", what),
                     bounded(entry, "at_ms", what, 0, std::numeric_limits<std::int64_t>::max())};
  }
  return cordons;
}

namespace {

LiveSettings read_settings(const std::optional<std::string>& value) {
  return value ? decode_settings(*value, keys::kSettings) : LiveSettings{};
}

}  // namespace

std::optional<int> count_node_list(std::string_view list) {
  if (list.empty()) return 0;
  int nodes = 1;
  bool entry = false;  // the current entry has a character
  for (const char c : list) {
    if (c == ',') {
      if (!entry) return std::nullopt;
      ++nodes;
      entry = false;
    } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_') {
      entry = true;
    } else {
      return std::nullopt;
    }
  }
  if (!entry) return std::nullopt;
  return nodes;
}

LiveSettings JobControl::set(const std::vector<std::string>& assignments) {
  LiveSettings change;
  for (const auto& a : assignments) assign_setting(change, a);  // every one checked before any is written
  LiveSettings result;
  update(*store_, keys::kSettings, [&](const std::optional<std::string>& value, std::vector<Write>& writes) {
    result = read_settings(value);
    for (const auto& a : assignments) assign_setting(result, a);
    writes.push_back(event_write("config", {{"set", change.describe()}, {"by", by_}}));
    return std::optional<std::string>(encode(result));
  });
  return result;
}

// A job-wide request (stop, checkpoint) in the `slot` of ControlRequests: the pending one, or a new one.
Request JobControl::ask(const char* op, std::optional<Request> ControlRequests::*slot) {
  Request result;
  update(*store_, keys::kControl, [&](const std::optional<std::string>& value, std::vector<Write>& writes) {
    ControlRequests requests = read_control(value);
    if (requests.*slot) {
      result = *(requests.*slot);
      return std::optional<std::string>();
    }
    requests.*slot = result = new_request(by_);
    writes.push_back(event_write("request", request_event_fields(op, result)));
    return std::optional<std::string>(encode(requests));
  });
  return result;
}

Request JobControl::stop() { return ask("stop", &ControlRequests::stop); }
Request JobControl::checkpoint() { return ask("checkpoint", &ControlRequests::checkpoint); }

Request JobControl::drain(const std::string& node, const std::string& incarnation) {
  Request result;
  update(*store_, keys::kControl, [&](const std::optional<std::string>& value, std::vector<Write>& writes) {
    ControlRequests requests = read_control(value);
    if (const DrainRequest* pending = requests.drain_of(node, incarnation)) {
      result = *pending;
      return std::optional<std::string>();
    }
    DrainRequest d;
    static_cast<Request&>(d) = result = new_request(by_);
    d.incarnation = incarnation;
    requests.drains[node] = std::move(d);  // replaces one for an earlier incarnation
    Fields fields = request_event_fields("drain", result, node);
    fields.emplace_back("incarnation", incarnation);
    writes.push_back(event_write("request", std::move(fields)));
    return std::optional<std::string>(encode(requests));
  });
  return result;
}

bool JobControl::cordon(const std::string& node) {
  return update(*store_, keys::kCordons, [&](const std::optional<std::string>& value, std::vector<Write>& writes) {
    Cordons cordons = read_cordons(value);
    if (cordons.contains(node)) return std::optional<std::string>();
    cordons[node] = {by_, now_ms()};
    writes.push_back(event_write("cordon", {{"node", node}, {"by", by_}}));
    return std::optional<std::string>(encode(cordons));
  });
}

bool JobControl::uncordon(const std::string& node) {
  return update(*store_, keys::kCordons, [&](const std::optional<std::string>& value, std::vector<Write>& writes) {
    Cordons cordons = read_cordons(value);
    if (!cordons.erase(node)) return std::optional<std::string>();
    writes.push_back(event_write("uncordon", {{"node", node}, {"by", by_}}));
    return std::optional<std::string>(encode(cordons));
  });
}

void finish_request(Store& job_store, const std::string& op, const std::string& id, const std::string& outcome,
                    const Fields& details, const std::string& node) {
  try {
    update(job_store, keys::kControl, [&](const std::optional<std::string>& value, std::vector<Write>& writes) {
      ControlRequests requests = read_control(value);
      bool found = false;
      if (op == "stop" && requests.stop && requests.stop->id == id) {
        requests.stop.reset();
        found = true;
      } else if (op == "checkpoint" && requests.checkpoint && requests.checkpoint->id == id) {
        requests.checkpoint.reset();
        found = true;
      } else if (op == "drain" && requests.drains.contains(node) && requests.drains[node].id == id) {
        requests.drains.erase(node);
        found = true;
      }
      if (!found) return std::optional<std::string>();
      Fields fields{{"op", op}, {"id", id}, {"outcome", outcome}};
      if (!node.empty()) fields.emplace_back("node", node);
      fields.insert(fields.end(), details.begin(), details.end());
      writes.push_back(event_write("request_done", std::move(fields)));
      return std::optional<std::string>(encode(requests));
    });
  } catch (const Error& e) {
    log()->warn("the {} request {} was done ({}) but not marked so: {}", op, id, outcome, e.what());
  }
}

bool withdraw_stop(Store& job_store) {
  try {
    const auto value = job_store.get(keys::kControl);
    if (!value) return false;
    const ControlRequests requests = decode_control(*value, keys::kControl);
    if (!requests.stop) return false;
    finish_request(job_store, "stop", requests.stop->id, "withdrawn");
    return true;
  } catch (const Error& e) {
    log()->warn("could not withdraw a pending stop: {}", e.what());
    return false;
  }
}

std::string requester() {
  std::string user;
  if (const char* name = std::getenv("USER"); name && *name) {
    user = name;
  } else if (const passwd* entry = getpwuid(geteuid()); entry && entry->pw_name) {
    user = entry->pw_name;
  } else {
    user = "uid" + std::to_string(geteuid());
  }
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return user + "@" + (host[0] ? host : "unknown");
}

}  // namespace hdp::elastic
