#pragma once
// `wanlab memory SCENARIO...`: what each plan needs per GPU and stage against its GPUs'
// memory, by the workload layer's memory model (workload/memory.hpp, docs/workloads.md),
// without running it: the query bench/paper.py and bench/paper_scale.py pick plans with,
// the same figures `run`, `bench` and `simulate` refuse a plan by.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wanlab/core/topology.hpp"
#include "wanlab/workload/scenario.hpp"

namespace wanlab::cli {

struct MemoryArgs {
  std::vector<std::string> scenarios;
  std::optional<std::string> baseline;  // the baseline's variant of each scenario (workload/baselines.hpp)
  bool json = false;                    // one JSON array on stdout, one object per scenario
};
int cmd_memory(const MemoryArgs& a);

/// One scenario's figures: {"scenario", "fits", "needed_gib" (the fullest stage's),
/// "available_gib", "stage", "stages": [{"stage", "needed_gib", "weights_gib",
/// "gradients_gib", "optimizer_gib", "activations_gib", "reserve_gib", "in_flight",
/// "available_gib", "gpu", "dc", "fits", "shape" (what one GPU of the stage computes per
/// micro-batch, program::to_json), "forward_flops", "backward_flops" (per GPU per
/// micro-batch)}], "schedule", "micro_batches",
/// "micro_batch_size", "recompute"}; placed on `topo` as the scenario places it.
nlohmann::json memory_report(const workload::Scenario& scenario, const core::Topology& topo);

}  // namespace wanlab::cli
