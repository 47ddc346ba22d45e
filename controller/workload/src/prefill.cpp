#include "wanlab/workload/prefill.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "wanlab/core/diagnostics.hpp"
#include "wanlab/workload/gpu.hpp"

namespace wanlab::workload {

PrefillCost prefill_cost(const ModelSpec& m, int tokens) {
  PrefillCost c;
  c.tokens = tokens;
  c.layers = m.layers;
  program::StageShape layer{1, tokens, m.hidden, m.ffn_hidden, m.heads, m.kv_heads, tokens, 0, m.gated_mlp, 1};
  c.flops_per_layer = program::gemm_flops(program::stage_gemms(layer, program::OpKind::forward));
  c.flops = c.flops_per_layer * m.layers + 2.0 * m.hidden * static_cast<double>(m.vocab);
  c.prompt_bytes = 4 * static_cast<std::uint64_t>(tokens);
  const auto head_dim = static_cast<std::uint64_t>(m.hidden / m.heads);
  c.kv_bytes = 2 * static_cast<std::uint64_t>(m.layers) * static_cast<std::uint64_t>(m.kv_heads) * head_dim *
               static_cast<std::uint64_t>(tokens) * static_cast<std::uint64_t>(dtype_bytes(m.dtype));
  return c;
}

std::vector<PrefillArrival> prefill_arrivals(const PrefillSpec& spec, std::uint64_t seed, double horizon_s) {
  std::vector<PrefillArrival> out;
  if (spec.arrival == PrefillSpec::Arrival::trace) {
    if (spec.trace.empty()) return out;
    const double period = spec.trace.back().at_s;
    for (double base = 0;; base += period) {
      for (const auto& a : spec.trace) {
        if (base + a.at_s > horizon_s) return out;
        out.push_back({base + a.at_s, a.prompt_tokens});
      }
      // A loop of a trace whose rows all share one instant would never advance.
      if (!spec.loop || period <= 0) return out;
    }
  }
  // A stream of its own: the training side's random streams are not disturbed.
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
  std::exponential_distribution<double> gap(spec.rate_per_s);
  const auto& p = spec.prompt;
  std::uniform_int_distribution<int> uniform(p.min, p.max);
  std::lognormal_distribution<double> lognormal(std::log(p.median), p.sigma);
  for (double t = gap(rng); t <= horizon_s; t += gap(rng)) {
    int tokens = p.tokens;
    if (p.kind == PromptTokens::Kind::uniform) tokens = uniform(rng);
    if (p.kind == PromptTokens::Kind::lognormal)
      tokens = std::clamp(static_cast<int>(std::lround(lognormal(rng))), p.min, p.max);
    out.push_back({t, tokens});
  }
  return out;
}

PrefillPlan plan_prefill(const Plan& plan) {
  const auto& s = plan.scenario;
  const auto& topo = plan.topology;
  PrefillPlan out;
  out.spec = s.prefill.value();
  out.bytes_scale = out.spec.scale > 0 ? out.spec.scale : s.scale;
  core::Diagnostics d(s.source_file);
  std::map<std::string, std::pair<std::size_t, int>> nodes;  // name -> (dc, index)
  std::vector<std::string> names;
  for (std::size_t dc = 0; dc < topo.dcs.size(); ++dc)
    for (int n = 0; n < topo.dcs[dc].nodes; ++n) {
      nodes[core::node_name(topo.dcs[dc], n)] = {dc, n};
      names.push_back(core::node_name(topo.dcs[dc], n));
    }
  const auto lookup = [&](const std::string& name, const std::string& path) -> const std::pair<std::size_t, int>* {
    const auto it = nodes.find(name);
    if (it != nodes.end()) return &it->second;
    d.add(path, fmt::format("no node \"{}\" in lab {} ({}); nodes are named DC-INDEX, e.g. {}", name, topo.name,
                            topo.source_file, names.front()));
    return nullptr;
  };
  out.loadgen_node = out.spec.loadgen_node.empty() ? names.front() : out.spec.loadgen_node;
  out.decode_nodes = out.spec.decode_nodes.empty() ? std::vector<std::string>{out.loadgen_node} : out.spec.decode_nodes;
  if (const auto* n = lookup(out.loadgen_node, "/prefill/loadgen")) out.loadgen_dc = n->first;
  out.decode_node_of_dc.assign(topo.dcs.size(), out.decode_nodes.front());
  std::set<std::size_t> decode_dcs;
  for (std::size_t i = 0; i < out.decode_nodes.size(); ++i) {
    const auto path = out.spec.decode_nodes.empty() ? std::string("/prefill/loadgen") : fmt::format("/prefill/decode/{}", i);
    if (const auto* n = lookup(out.decode_nodes[i], path)) {
      if (!decode_dcs.insert(n->first).second)
        d.add(path, fmt::format("a second decode node in DC {}: give at most one per DC", topo.dcs[n->first].name));
      out.decode_node_of_dc[n->first] = out.decode_nodes[i];
    }
  }
  std::set<std::string> training_nodes;
  for (const auto& w : plan.workers) {
    const auto& dc = topo.dcs.at(w.dc);
    training_nodes.insert(core::node_name(dc, w.node));
    out.gpus.push_back({core::node_name(dc, w.node), w.dc, w.gpu, w.worker,
                        plan.effective_flops.at(static_cast<std::size_t>(w.worker))});
  }
  std::set<std::string> seen;
  for (std::size_t i = 0; i < out.spec.inference_nodes.size(); ++i) {
    const auto& name = out.spec.inference_nodes[i];
    const auto path = fmt::format("/prefill/inference_nodes/{}", i);
    const auto* n = lookup(name, path);
    if (n == nullptr) continue;
    if (training_nodes.count(name)) {
      d.add(path, fmt::format("node {} hosts training workers; an inference node must be one the placement leaves free",
                              name));
      continue;
    }
    if (!seen.insert(name).second) {
      d.add(path, fmt::format("node {} is listed twice", name));
      continue;
    }
    const auto& dc = topo.dcs.at(n->first);
    for (int g = 0; g < dc.gpus_per_node; ++g)
      out.gpus.push_back({name, n->first, g, -1, effective_flops(dc.gpu, out.spec.model.dtype, s.mfu)});
  }
  d.throw_if_any();
  return out;
}

nlohmann::json prefill_load_summary(const PrefillPlan& plan) {
  const auto& sp = plan.spec;
  return {{"offered_rate_per_s", sp.arrival == PrefillSpec::Arrival::poisson ? sp.rate_per_s : 0.0},
          {"model", sp.model.preset.empty() ? "custom" : sp.model.preset},
          {"deadline_s", sp.deadline_s},
          {"margin", sp.margin},
          {"bytes_scale", plan.bytes_scale},
          {"loadgen", plan.loadgen_node},
          {"decode", plan.decode_nodes}};
}

}  // namespace wanlab::workload
