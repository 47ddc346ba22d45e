#include "wanlab/planner/memory.hpp"

namespace wanlab::planner {

MemoryUse memory_use(const workload::Scenario& base, const workload::Parallelism& par, workload::Schedule schedule,
                     int micro_batches, int micro_batch_size) {
  workload::Scenario s = base;
  s.parallelism = par;
  s.schedule = schedule;
  s.micro_batches = micro_batches;
  s.micro_batch_size = micro_batch_size;
  s.layers_per_stage.clear();
  s.virtual_stages = 1;
  MemoryUse worst;
  for (const auto& m : workload::stage_memory(s)) {
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
