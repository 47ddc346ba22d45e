#pragma once
// A WAN link's round trip, one rule for the lab's arbiter, the simulator, the ns-3 reference
// and the baselines.
#include "wanlab/core/topology.hpp"

namespace wanlab::core {

/// A WAN link's round trip: its delay plus its reverse link's (the way its ACKs come back);
/// a topology without the reverse link is taken to mirror this one (twice its delay).
/// Jitter is not counted. The one rule the arbiter, the simulator and the reference use.
Duration round_trip(const Topology& topo, const WanLink& link);

}  // namespace wanlab::core
