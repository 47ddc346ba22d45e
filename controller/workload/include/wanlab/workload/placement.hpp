#pragma once
// Which GPU of which node of which DC runs each worker of a scenario.
//
// Worker ids are stage-major, then DP replica, then TP rank:
//   worker = (stage x dp + dp_rank) x tp + tp_rank
// so the TP group of a replica is a run of consecutive ids.
//
// The Atlas rule (no `placement` in the scenario): a stage's dp x tp GPUs all sit in one DC,
// and a replica's tp GPUs inside one node. DCs are taken in order of free GPUs (most
// first, ties in topology order) and filled with consecutive stages; a stage that does not
// fit in what is left of the current DC moves on to the next one. With a `placement`, the
// scenario names the DC of every (stage, replica) and only nodes and GPUs are chosen here.
// Either way nodes are filled first-fit in index order, GPUs in index order.
#include <cstddef>
#include <vector>

#include "wanlab/core/topology.hpp"
#include "wanlab/workload/scenario.hpp"

namespace wanlab::workload {

struct WorkerPlacement {
  int worker = 0;
  int stage = 0;
  int dp_rank = 0;
  int tp_rank = 0;
  std::size_t dc = 0;  // index into Topology::dcs
  int node = 0;        // within the DC: node_name(dc, node)
  int gpu = 0;         // within the node
  bool operator==(const WorkerPlacement&) const = default;
};

int worker_id(const Parallelism& par, int stage, int dp_rank, int tp_rank);

/// One entry per worker, indexed by worker id. Throws core::ConfigError naming the scenario
/// file and "/parallelism" (Atlas rule) or "/placement/<stage>/<replica>" (override) with
/// the reason when the plan does not fit the lab.
std::vector<WorkerPlacement> place_workers(const Scenario& scenario, const core::Topology& topo);

}  // namespace wanlab::workload
