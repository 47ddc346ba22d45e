#pragma once
// `wanlab simulate --gpus N`: a scenario grown (or shrunk) to N GPUs for paper-scale runs.
//
// The model, the pipeline (pp stages) and the tensor parallelism (tp) stay; the data
// parallelism becomes dp = N / (pp x tp), which must be a whole number. Every DC's node
// count is multiplied by ceil(new dp / old dp) (1 when dp does not grow), so the DCs keep
// their proportions and each stage lands in the DC it had: the Atlas rule fills the DCs
// in the same order with stages that all grew by the same factor; a scenario `placement`
// that keeps each stage in one DC is extended to the new replicas (one that splits a
// stage over DCs cannot be, and is refused). WAN links, LAN and GPUs are unchanged.
#include <stdexcept>

#include "wanlab/core/topology.hpp"
#include "wanlab/workload/scenario.hpp"

namespace wanlab::sim {

struct Rescaled {
  workload::Scenario scenario;
  core::Topology topology;
};

/// Throws std::invalid_argument with the reason (N not a multiple of pp x tp, with the
/// nearest values that are; a placement that splits a stage).
Rescaled rescale_gpus(const workload::Scenario& scenario, const core::Topology& topo, long gpus);

}  // namespace wanlab::sim
