#include "elastic/release.h"

#include <limits>

#include "elastic/json_fields.h"

namespace hdp::elastic {

using json_fields::bounded;
using json_fields::field;
using json_fields::json;

std::string release_of(const NodeLease& lease) {
  return "hdp " + lease.version + ", wire " + (lease.wire > 0 ? std::to_string(lease.wire) : std::string("unknown"));
}

std::optional<std::string> release_difference(const NodeLease& node, const NodeLease& job) {
  const bool version = node.version != job.version;
  const bool wire = node.wire > 0 && job.wire > 0 && node.wire != job.wire;
  if (!version && !wire) return std::nullopt;
  return "its build (" + release_of(node) + ") is not the job's (" + release_of(job) + ", node " + job.node + ")";
}

std::string encode(const Refusal& refusal) {
  return json{{"why", refusal.why}, {"by", refusal.by}, {"at_ms", refusal.at_ms}}.dump(-1, ' ', false,
                                                                                     json::error_handler_t::replace);
}

Refusal decode_refusal(std::string_view text, std::string_view what) {
  const json value = json_fields::parse(text, what);
  Refusal refusal{field<std::string>(value, "why", what), field<std::string>(value, "by", what),
                  bounded(value, "at_ms", what, 0, std::numeric_limits<std::int64_t>::max())};
  if (refusal.why.empty()) json_fields::bad(what, "field 'why' is empty");
  return refusal;
}

}  // namespace hdp::elastic
