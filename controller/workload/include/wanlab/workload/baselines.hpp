#pragma once
// Placement baselines for benchmarks: the same scenario laid out the way a stock
// framework would spread it across DCs, to compare against the Atlas rule.
#include "wanlab/core/topology.hpp"
#include "wanlab/workload/scenario.hpp"

namespace wanlab::workload {

/// "DP across DCs": each data-parallel replica keeps its whole pipeline (all pp stages,
/// tp GPUs each inside a node) in one DC, and the replicas are spread over the DCs, so
/// every stage's replicas sit in different DCs: the pipeline traffic stays inside the DCs
/// and the gradient all-reduce crosses the WAN (the opposite of the Atlas rule).
///
/// DCs are taken in order of free GPUs (most first, ties in topology order, as the Atlas
/// rule does) and dealt replicas in turn while they have room for a whole pipeline; each
/// DC gets a run of consecutive replicas, so the all-reduce ring (in replica order)
/// crosses the WAN once per pair of neighbouring DCs rather than at every hop.
///
/// Returns a copy of `scenario` with an explicit `placement` (and a description saying
/// so). Throws core::ConfigError naming the scenario file and "/placement" with the
/// reason when the lab cannot host it: dp 1, a one-DC lab, too few GPUs, or only one DC
/// with room for a whole pipeline.
Scenario dp_across_dcs_placement(const Scenario& scenario, const core::Topology& topo);

}  // namespace wanlab::workload
