#include "wanlab/planner/memory.hpp"

namespace wanlab::planner {

std::vector<workload::StageMemory> stage_memory_use(const workload::Scenario& base, const workload::Parallelism& par,
                                                    workload::Schedule schedule, int micro_batches,
                                                    int micro_batch_size, const std::vector<int>& layers,
                                                    int virtual_stages) {
  workload::Scenario s = base;
  s.parallelism = par;
  s.schedule = schedule;
  s.micro_batches = micro_batches;
  s.micro_batch_size = micro_batch_size;
  s.layers_per_stage = layers;
  s.virtual_stages = virtual_stages;
  return workload::stage_memory(s);
}

MemoryUse memory_use(const workload::Scenario& base, const workload::Parallelism& par, workload::Schedule schedule,
                     int micro_batches, int micro_batch_size, const std::vector<int>& layers, int virtual_stages) {
  MemoryUse worst;
  for (const auto& m :
       stage_memory_use(base, par, schedule, micro_batches, micro_batch_size, layers, virtual_stages)) {
    const auto needed = static_cast<double>(m.needed());
    if (needed <= worst.peak_bytes) continue;
    worst.peak_bytes = needed;
    worst.stage = m.stage;
    worst.state_bytes = static_cast<double>(m.weights + m.gradients + m.optimizer);
    worst.activation_bytes = static_cast<double>(m.activations + m.reserve);
  }
  return worst;
}

}  // namespace wanlab::planner
