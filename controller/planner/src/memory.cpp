#include "wanlab/planner/memory.hpp"

#include <algorithm>

#include "wanlab/workload/cost.hpp"

namespace wanlab::planner {

MemoryUse memory_use(const workload::ModelSpec& model, const workload::Parallelism& par, workload::Schedule schedule,
                     int micro_batches, int micro_batch_size) {
  const auto stages = workload::stage_costs(model, par, micro_batch_size);
  const double per_layer = kActivationBytesPerLayerToken * model.seq_len * static_cast<double>(micro_batch_size) *
                           model.hidden / par.tp;
  MemoryUse worst;
  for (const auto& s : stages) {
    const int in_flight =
        schedule == workload::Schedule::gpipe ? micro_batches : std::min(micro_batches, par.pp - s.stage);
    MemoryUse m;
    m.stage = s.stage;
    m.state_bytes = kStateBytesPerParameter * static_cast<double>(s.parameters_per_gpu);
    m.activation_bytes = per_layer * s.layers * in_flight;
    m.peak_bytes = m.state_bytes + m.activation_bytes;
    if (m.peak_bytes > worst.peak_bytes) worst = m;
  }
  return worst;
}

}  // namespace wanlab::planner
