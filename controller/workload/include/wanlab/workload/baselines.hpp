#pragma once
// Placement baselines for benchmarks: the same scenario laid out the way a stock
// framework would spread it across DCs, to compare against the Atlas rule.
#include <string>
#include <utility>
#include <vector>

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

/// The baselines users name (docs/baselines.md), each the scenario as that system would run
/// it on the lab, training only (any prefill load is dropped):
///   stock:      DP across DCs as a stock framework runs it: dp_across_dcs_placement, a
///               hierarchical all-reduce (AllReduce::hierarchical), one TCP connection per
///               peer, policy fair (Linux's own sharing), no window clamp beyond the scenario's;
///   stock-flat: the same with one flat ring over all replicas (2(n-1) steps, each hop
///               between DCs a WAN hop), today's "DP across DCs";
///   varuna:     PP across DCs as Varuna runs it over commodity networks: the scenario's
///               placement (stages across DCs), GPipe with activation recomputation (each
///               backward runs its forward again), the micro-batch size chosen for the
///               network (varuna_micro_batch_size()), one connection per peer, policy fair.
inline constexpr const char* kStock = "stock";
inline constexpr const char* kStockFlat = "stock-flat";
inline constexpr const char* kVaruna = "varuna";
/// {"stock", "stock-flat", "varuna"}.
const std::vector<std::string>& baseline_names();
/// The scenario as baseline `name` runs it. Throws std::invalid_argument for an unknown
/// name (listing the known ones), core::ConfigError (naming the scenario file and field)
/// where the lab cannot host it (see dp_across_dcs_placement).
Scenario baseline_scenario(const std::string& name, const Scenario& scenario, const core::Topology& topo);

/// Varuna's choice of micro-batch size for the network: the global batch (micro_batch_size
/// x micro_batches) is kept, and among the sizes that divide it, the one whose estimated
/// GPipe iteration time is least:
///   T(b) = max((M + pp - 1)(f + r), M c + (pp - 1)(f + r)) + 2 (pp - 1) d,
/// M = global / b micro-batches, f + r = a micro-batch's forward plus its backward with
/// recomputation on the slowest stage, c = one boundary message of b samples per TP rank at
/// its fair share of the slowest stage boundary's WAN link (rate / (tp x dp x 2 directions'
/// messages sharing it: rate / (tp x dp)), at most one connection's window / RTT), d that
/// link's one-way delay. Ties go to the smaller size. Returns {size, count}.
std::pair<int, int> varuna_micro_batches(const Scenario& scenario, const core::Topology& topo);

}  // namespace wanlab::workload
