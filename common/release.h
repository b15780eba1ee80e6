// File: common/release.h
//
// The version of the ranks' wire: the bytes they exchange over the data plane (mesh/comm/wire.h,
// whose Hello magic carries it, message framing, mesh::exchange_states' records, the step
// boundary's all-gather, the collectives' layouts). Raise kWireProtocol with any change to them.
// With the release (HDP_VERSION, hdp/config.h) it makes an agent's build, which its lease records:
// the leader does not admit a node of another build into a running job (elastic/release.h;
// docs/architecture.md, "One build, checked before a node joins"), and ranks of two wires that
// meet anyway (started together) fail their first connection on the Hello's magic.
#pragma once

namespace hdp {

inline constexpr int kWireProtocol = 1;

}  // namespace hdp
