// What a candidate is made of beyond its numbers: a layer split balanced for its stages'
// speeds and memory, and the files `wanlab plan` writes for it (its topology, the DCs grown
// to hold it, and its scenario), which run, bench and simulate take.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "wanlab/planner/memory.hpp"
#include "wanlab/planner/search.hpp"
#include "wanlab/workload/cost.hpp"
#include "wanlab/workload/gpu.hpp"
#include "wanlab/workload/placement.hpp"
#include "wanlab/workload/plan.hpp"

namespace wanlab::planner {

std::vector<int> balanced_layers(const workload::Scenario& base, const std::vector<double>& stage_flops) {
  const auto& par = base.parallelism;
  const int pp = par.pp;
  const int total = base.model.layers;
  const int v = std::max(1, base.virtual_stages);
  const auto even = workload::split_layers(total, pp);
  if (pp < 2 || total <= pp * v || static_cast<int>(stage_flops.size()) != pp) return even;
  // One layer's forward and backward, and its parameters per GPU: a stage of two layers
  // less a stage of one (neither holding the embedding or the head).
  const auto one = workload::stage_costs(base.model, par, base.micro_batch_size, even);
  auto shape = one.front().shape;
  shape.vocab = 0;
  const auto fb_of = [](const program::StageShape& sh) {
    return program::gemm_flops(program::stage_gemms(sh, program::OpKind::forward)) +
           program::gemm_flops(program::stage_gemms(sh, program::OpKind::backward));
  };
  shape.layers = 1;
  const double fb1 = fb_of(shape);
  shape.layers = 2;
  const double fb_layer = fb_of(shape) - fb1;
  // Memory per layer of each stage at the even split: the state (weights, gradients,
  // optimizer, all proportional to the layers) and the activations held (proportional too).
  const auto mem = stage_memory_use(base, par, base.schedule, base.micro_batches, base.micro_batch_size, even, v);
  const double per_param = 2.0 * workload::dtype_bytes(base.model.dtype) +
                           workload::optimizer_bytes_per_parameter(base) /
                               (base.memory.distributed_optimizer ? par.dp : 1);
  const double layer_params = static_cast<double>(workload::layer_parameters(base.model)) / par.tp;
  std::vector<double> extra(pp), fixed(pp), per_layer(pp);
  for (int s = 0; s < pp; ++s) {
    const auto i = static_cast<std::size_t>(s);
    extra[i] = one[i].forward_flops + one[i].backward_flops - even[i] * fb_layer;
    per_layer[i] = layer_params * per_param + static_cast<double>(mem[i].activations) / even[i];
    fixed[i] = static_cast<double>(mem[i].needed()) - even[i] * per_layer[i];
  }
  std::vector<int> out(static_cast<std::size_t>(pp), v);
  for (int left = total - pp * v; left > 0; --left) {
    std::size_t pick = 0;
    bool pick_fits = false;
    double pick_time = 0, pick_mem = 0;
    for (std::size_t i = 0; i < out.size(); ++i) {
      const double t = ((out[i] + 1) * fb_layer + extra[i]) / stage_flops[i];
      const double m = fixed[i] + (out[i] + 1) * per_layer[i];
      const bool f = m <= kGpuMemoryBytes;
      const bool better = i == 0 || (f && !pick_fits) ||
                          (f == pick_fits && (f ? (t < pick_time || (t == pick_time && m < pick_mem)) : m < pick_mem));
      if (better) {
        pick = i;
        pick_fits = f;
        pick_time = t;
        pick_mem = m;
      }
    }
    ++out[pick];
  }
  return out;
}

core::Topology candidate_topology(const core::Topology& topo, const Candidate& c) {
  core::Topology out = topo;
  for (std::size_t i = 0; i < c.chain.size(); ++i) {
    auto& dc = out.dcs.at(c.chain[i]);
    const int per_node = dc.gpus_per_node / c.par.tp;
    const int replicas = c.stages[i] * c.par.dp;
    dc.nodes = std::max(dc.nodes, (replicas + per_node - 1) / per_node);
  }
  return out;
}

workload::Scenario candidate_scenario(const workload::Scenario& base, const core::Topology& topo, const Candidate& c,
                                      const std::string& name, const std::filesystem::path& topology_file) {
  workload::Scenario s = base;
  s.name = name;
  s.description = fmt::format("{}{} (wanlab plan from {})", c.greedy ? "Atlas's greedy rule: " : "",
                              c.describe(topo), base.name);
  s.source_file = name;
  s.topology_path = topology_file;
  s.parallelism = c.par;
  s.micro_batch_size = c.micro_batch_size;
  s.micro_batches = c.micro_batches;
  s.schedule = c.schedule;
  s.virtual_stages = c.virtual_stages;
  s.layers_per_stage.clear();
  if (c.balanced) s.layers_per_stage = c.layers;
  s.connections = c.connections;
  s.policy = c.policy;
  s.prefill.reset();  // a training plan: the prefill load's nodes belong to the original lab
  s.placement.clear();
  for (std::size_t i = 0; i < c.chain.size(); ++i)
    for (int k = 0; k < c.stages[i]; ++k)
      s.placement.emplace_back(static_cast<std::size_t>(c.par.dp), topo.dcs.at(c.chain[i]).name);
  return s;
}

}  // namespace wanlab::planner
