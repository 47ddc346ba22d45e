#include "wanlab/workload/placement.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <string_view>

#include "wanlab/core/json_fields.hpp"

namespace wanlab::workload {
namespace {

// The free GPUs of every node of every DC while workers are handed out. Allocation never
// frees, so a node's next free GPU is simply the count already used.
class Capacity {
 public:
  explicit Capacity(const core::Topology& topo) : topo_(topo) {
    for (const auto& dc : topo.dcs) used_.emplace_back(static_cast<std::size_t>(dc.nodes), 0);
  }

  int free_gpus(std::size_t dc) const {
    int n = 0;
    for (std::size_t node = 0; node < used_[dc].size(); ++node) n += free_in(dc, node);
    return n;
  }

  // How many replicas of `tp` GPUs, each inside one node, still fit in the DC.
  int replicas_fit(std::size_t dc, int tp) const {
    int n = 0;
    for (std::size_t node = 0; node < used_[dc].size(); ++node) n += free_in(dc, node) / tp;
    return n;
  }

  // Takes `tp` GPUs on the first node that has them: (node, first gpu), or none.
  std::optional<std::pair<int, int>> take(std::size_t dc, int tp) {
    for (std::size_t node = 0; node < used_[dc].size(); ++node) {
      if (free_in(dc, node) < tp) continue;
      const int first = used_[dc][node];
      used_[dc][node] += tp;
      return std::pair{static_cast<int>(node), first};
    }
    return std::nullopt;
  }

 private:
  int free_in(std::size_t dc, std::size_t node) const { return topo_.dcs[dc].gpus_per_node - used_[dc][node]; }

  const core::Topology& topo_;
  std::vector<std::vector<int>> used_;  // [dc][node] GPUs taken
};

void assign_replica(std::vector<WorkerPlacement>& out, const Parallelism& par, int stage, int replica, std::size_t dc,
                    std::pair<int, int> where) {
  for (int t = 0; t < par.tp; ++t) {
    const int id = worker_id(par, stage, replica, t);
    out[static_cast<std::size_t>(id)] = WorkerPlacement{id, stage, replica, t, dc, where.first, where.second + t};
  }
}

std::string dc_list(const core::Topology& topo, const std::vector<std::size_t>& order, const Capacity& cap) {
  std::vector<std::string> parts;
  for (auto dc : order) parts.push_back(fmt::format("{}: {}", topo.dcs[dc].name, cap.free_gpus(dc)));
  return core::fields::join(parts);
}

void place_atlas(const Scenario& s, const core::Topology& topo, std::vector<WorkerPlacement>& out,
                 core::Diagnostics& d) {
  const auto& par = s.parallelism;
  Capacity cap(topo);
  std::vector<std::size_t> order(topo.dcs.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return cap.free_gpus(a) > cap.free_gpus(b); });

  int largest_node = 0;
  for (const auto& dc : topo.dcs) largest_node = std::max(largest_node, dc.nodes > 0 ? dc.gpus_per_node : 0);
  if (par.tp > largest_node) {
    d.add("/parallelism/tp", fmt::format("tp {} does not fit in one node: a replica's TP GPUs must share a node, "
                                         "and the largest node of the lab has {} GPUs",
                                         par.tp, largest_node));
    return;
  }

  std::size_t pos = 0;
  for (int stage = 0; stage < par.pp; ++stage) {
    while (pos < order.size() && cap.replicas_fit(order[pos], par.tp) < par.dp) ++pos;
    if (pos == order.size()) {
      std::string reason = fmt::format("stage {} needs {} GPUs in one DC (dp {} x tp {}); the DCs left have {}", stage,
                                       par.dp * par.tp, par.dp, par.tp, dc_list(topo, order, cap));
      for (auto dc : order)
        if (cap.free_gpus(dc) >= par.dp * par.tp)
          reason += fmt::format(
              "; {} has {} free GPUs, but not {} nodes with {} free each (a replica's TP GPUs "
              "must share a node)",
              topo.dcs[dc].name, cap.free_gpus(dc), par.dp, par.tp);
      d.add("/parallelism", reason);
      return;
    }
    for (int r = 0; r < par.dp; ++r) assign_replica(out, par, stage, r, order[pos], *cap.take(order[pos], par.tp));
  }
}

void place_override(const Scenario& s, const core::Topology& topo, std::vector<WorkerPlacement>& out,
                    core::Diagnostics& d) {
  const auto& par = s.parallelism;
  const auto& placement = s.placement;
  if (placement.size() != static_cast<std::size_t>(par.pp) ||
      std::any_of(placement.begin(), placement.end(),
                  [&](const auto& dcs) { return dcs.size() != static_cast<std::size_t>(par.dp); })) {
    d.add("/placement",
          fmt::format("give {} entries (one per stage) of {} DC names (one per DP replica)", par.pp, par.dp));
    return;
  }
  std::vector<std::string_view> names;
  for (const auto& dc : topo.dcs) names.push_back(dc.name);

  // Resolve every name first, so the capacity messages can say what the placement asks of a DC.
  std::vector<std::vector<std::optional<std::size_t>>> dcs(placement.size());
  std::map<std::size_t, int> demand;  // DC -> GPUs the placement puts there
  for (std::size_t stage = 0; stage < placement.size(); ++stage) {
    for (std::size_t r = 0; r < placement[stage].size(); ++r) {
      const auto& name = placement[stage][r];
      auto dc = topo.dc_index(name);
      if (!dc)
        d.add(core::fields::child(core::fields::child("/placement", stage), r),
              fmt::format("unknown DC \"{}\"{}; the lab's DCs: {}", name, core::fields::did_you_mean(name, names),
                          core::fields::join(names)));
      else
        demand[*dc] += par.tp;
      dcs[stage].push_back(dc);
    }
  }

  Capacity cap(topo);
  for (int stage = 0; stage < par.pp; ++stage) {
    for (int r = 0; r < par.dp; ++r) {
      const auto dc = dcs[static_cast<std::size_t>(stage)][static_cast<std::size_t>(r)];
      if (!dc) continue;
      if (auto where = cap.take(*dc, par.tp)) {
        assign_replica(out, par, stage, r, *dc, *where);
        continue;
      }
      const auto& spec = topo.dcs[*dc];
      d.add(core::fields::child(core::fields::child("/placement", static_cast<std::size_t>(stage)), static_cast<std::size_t>(r)),
            fmt::format("no node of DC \"{}\" has {} free GPUs left for stage {}, DP replica {} (a replica's TP GPUs "
                        "must share a node): the placement puts {} GPUs in {}, which has {} node{} of {} GPUs",
                        spec.name, par.tp, stage, r, demand[*dc], spec.name, spec.nodes, spec.nodes == 1 ? "" : "s",
                        spec.gpus_per_node));
    }
  }
}

}  // namespace

int worker_id(const Parallelism& par, int stage, int dp_rank, int tp_rank) {
  return (stage * par.dp + dp_rank) * par.tp + tp_rank;
}

std::vector<WorkerPlacement> place_workers(const Scenario& s, const core::Topology& topo) {
  core::Diagnostics d(s.source_file);
  std::vector<WorkerPlacement> out(static_cast<std::size_t>(s.parallelism.gpus()));
  if (s.placement.empty())
    place_atlas(s, topo, out, d);
  else
    place_override(s, topo, out, d);
  d.throw_if_any();
  return out;
}

}  // namespace wanlab::workload
