#include "wanlab/workload/baselines.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <tuple>

#include "wanlab/core/json_fields.hpp"
#include "wanlab/workload/cost.hpp"
#include "wanlab/workload/gpu.hpp"
#include "wanlab/workload/placement.hpp"
#include "wanlab/workload/plan.hpp"
#include "wanlab/core/round_trip.hpp"

namespace wanlab::workload {

Scenario dp_across_dcs_placement(const Scenario& scenario, const core::Topology& topo) {
  const auto& par = scenario.parallelism;
  core::Diagnostics d(scenario.source_file);
  const auto refuse = [&](const std::string& reason) {
    d.add("/placement", "DP across DCs: " + reason);
    d.throw_if_any();
  };
  if (par.dp < 2)
    refuse(fmt::format("dp {}: each stage has a single replica, so there is nothing to spread across DCs", par.dp));
  if (topo.dcs.size() < 2) refuse(fmt::format("lab {} has a single DC", topo.name));

  // Whole pipelines (pp groups of tp GPUs, each group inside a node) each DC can host.
  // Groups of one size packed first-fit never waste room, so this count is exact.
  std::vector<int> room(topo.dcs.size(), 0);
  std::vector<int> free_gpus(topo.dcs.size(), 0);
  for (std::size_t i = 0; i < topo.dcs.size(); ++i) {
    const auto& dc = topo.dcs[i];
    free_gpus[i] = dc.nodes * dc.gpus_per_node;
    room[i] = dc.nodes * (dc.gpus_per_node / par.tp) / par.pp;
  }
  std::vector<std::size_t> order(topo.dcs.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return free_gpus[a] > free_gpus[b]; });

  const auto rooms = [&] {
    std::vector<std::string> parts;
    for (auto i : order) parts.push_back(fmt::format("{}: {}", topo.dcs[i].name, room[i]));
    return core::fields::join(parts);
  };
  const int total = std::accumulate(room.begin(), room.end(), 0);
  if (total < par.dp)
    refuse(
        fmt::format("{} replicas of a whole pipeline ({} stages x tp {} = {} GPUs, a replica's TP GPUs inside one "
                    "node) do not fit: the DCs have room for {} ({})",
                    par.dp, par.pp, par.tp, par.pp * par.tp, total, rooms()));
  if (std::count_if(room.begin(), room.end(), [](int r) { return r > 0; }) < 2)
    refuse(fmt::format("only one DC has room for a whole pipeline ({} stages x tp {} = {} GPUs): {}", par.pp, par.tp,
                       par.pp * par.tp, rooms()));

  // Deal the replicas to the DCs in turn, then lay them out as runs in DC order.
  std::vector<int> count(topo.dcs.size(), 0);
  std::size_t cursor = 0;
  for (int r = 0; r < par.dp; ++r) {
    while (count[order[cursor]] >= room[order[cursor]]) cursor = (cursor + 1) % order.size();
    ++count[order[cursor]];
    cursor = (cursor + 1) % order.size();
  }
  std::vector<std::string> replica_dc;
  for (auto i : order)
    for (int n = 0; n < count[i]; ++n) replica_dc.push_back(topo.dcs[i].name);

  Scenario out = scenario;
  out.placement.assign(static_cast<std::size_t>(par.pp), replica_dc);
  out.description = scenario.description.empty() ? "DP across DCs (placement baseline)"
                                                 : scenario.description + " [placement baseline: DP across DCs]";
  (void)place_workers(out, topo);  // the counts above are exact; this only confirms it
  return out;
}

const std::vector<std::string>& baseline_names() {
  static const std::vector<std::string> names{kStock, kStockFlat, kVaruna};
  return names;
}

std::pair<int, int> varuna_micro_batches(const Scenario& scenario, const core::Topology& topo) {
  const auto& par = scenario.parallelism;
  const int global = scenario.micro_batch_size * scenario.micro_batches;
  Scenario s = scenario;
  s.prefill.reset();
  const auto workers = place_workers(s, topo);
  // The slowest stage boundary's WAN link (replica 0's stages; the Atlas rule keeps a
  // stage's replicas together): its per-connection share and one-way delay.
  double share_bps = std::numeric_limits<double>::infinity();
  double delay_s = 0;
  const double window = run_tcp_window(s) / s.scale;  // full-size bytes in flight
  for (int st = 0; st + 1 < par.pp; ++st) {
    const auto a = workers.at(static_cast<std::size_t>(worker_id(par, st, 0, 0))).dc;
    const auto b = workers.at(static_cast<std::size_t>(worker_id(par, st + 1, 0, 0))).dc;
    if (a == b) continue;
    const auto* l = topo.find_link(a, b);
    if (l == nullptr) continue;
    const double d = std::chrono::duration<double>(l->params.delay).count();
    const double rtt = std::chrono::duration<double>(core::round_trip(topo, *l)).count();
    double share = static_cast<double>(l->params.rate.bps) / (par.tp * par.dp);
    if (rtt > 0) share = std::min(share, window * 8 / rtt);
    if (share < share_bps) {
      share_bps = share;
      delay_s = d;
    }
  }
  double best = std::numeric_limits<double>::infinity();
  std::pair<int, int> choice{scenario.micro_batch_size, scenario.micro_batches};
  for (int b = 1; b <= global; ++b) {
    if (global % b != 0) continue;
    const int m = global / b;
    const auto costs = stage_costs(s.model, par, b);
    double fr = 0;
    for (const auto& c : costs) {
      const double flops = effective_flops(topo.dcs.front().gpu, s.model.dtype, s.mfu);
      fr = std::max(fr, (2 * c.forward_flops + c.backward_flops) / flops);
    }
    const double bytes = static_cast<double>(activation_bytes(s.model, b)) / par.tp;
    const double c = std::isfinite(share_bps) ? bytes * 8 / share_bps : 0;
    const double t = std::max((m + par.pp - 1) * fr, m * c + (par.pp - 1) * fr) + 2 * (par.pp - 1) * delay_s;
    if (t < best * (1 - 1e-9)) {
      best = t;
      choice = {b, m};
    }
  }
  return choice;
}

Scenario baseline_scenario(const std::string& name, const Scenario& scenario, const core::Topology& topo) {
  Scenario out;
  if (name == kStock || name == kStockFlat) {
    out = dp_across_dcs_placement(scenario, topo);
    out.allreduce = name == kStock ? AllReduce::hierarchical : AllReduce::ring;
  } else if (name == kVaruna) {
    out = scenario;
    out.schedule = Schedule::gpipe;
    out.memory.recompute = true;
    std::tie(out.micro_batch_size, out.micro_batches) = varuna_micro_batches(scenario, topo);
  } else {
    throw std::invalid_argument(
        fmt::format("unknown baseline \"{}\"; baselines: {}", name, core::fields::join(baseline_names())));
  }
  out.prefill.reset();
  out.connections = 1;
  out.policy = "fair";
  const std::string what = name == kStock        ? "stock: DP across DCs, hierarchical all-reduce, 1 connection"
                           : name == kStockFlat  ? "stock-flat: DP across DCs, flat ring all-reduce, 1 connection"
                                                 : fmt::format("varuna: GPipe with recomputation, {} micro-batches of "
                                                               "{}, 1 connection",
                                                               out.micro_batches, out.micro_batch_size);
  out.description = scenario.description.empty() ? what : scenario.description + " [baseline " + what + "]";
  (void)build_plan(out, topo);  // refuses what the lab cannot host, with the field
  return out;
}

}  // namespace wanlab::workload
