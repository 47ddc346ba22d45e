#pragma once
// Whether a plan fits in its GPUs' memory, by the workload layer's memory model
// (workload/memory.hpp, docs/workloads.md): per GPU of each stage, bf16 weights and
// gradients, the optimizer state the scenario implies (mixed-precision Adam by default),
// and the activations of the micro-batches the schedule holds in flight (with the
// scenario's recomputation and sequence-parallel settings), against an 80 GiB GPU (A100,
// H100: what the shipped topologies' DCs have).
#include <cstdint>
#include <vector>

#include "wanlab/workload/memory.hpp"
#include "wanlab/workload/scenario.hpp"

namespace wanlab::planner {

inline constexpr double kGpuMemoryBytes = 80.0 * workload::kGiB;

struct MemoryUse {
  double peak_bytes = 0;  // the stage that needs most, per GPU
  int stage = 0;          // which stage that is
  double state_bytes = 0;       // its weights, gradients and optimizer state
  double activation_bytes = 0;  // its activations in flight (and the model's reserve)
  bool fits() const { return peak_bytes <= kGpuMemoryBytes; }
};

/// Per GPU: `base` (model, memory settings) split as `par` with `schedule`, `micro_batches`
/// of `micro_batch_size`, `layers` per stage (empty: split evenly) and `virtual_stages`
/// model chunks per GPU. Requires a valid split (1 <= pp <= layers, tp divides heads; the
/// schedule's own conditions, see workload::pipeline_steps).
MemoryUse memory_use(const workload::Scenario& base, const workload::Parallelism& par, workload::Schedule schedule,
                     int micro_batches, int micro_batch_size, const std::vector<int>& layers = {},
                     int virtual_stages = 1);
/// Every stage's figures of the same (workload::stage_memory).
std::vector<workload::StageMemory> stage_memory_use(const workload::Scenario& base, const workload::Parallelism& par,
                                                    workload::Schedule schedule, int micro_batches,
                                                    int micro_batch_size, const std::vector<int>& layers = {},
                                                    int virtual_stages = 1);

}  // namespace wanlab::planner
