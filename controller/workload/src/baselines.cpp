#include "wanlab/workload/baselines.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "wanlab/core/json_fields.hpp"
#include "wanlab/workload/placement.hpp"

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

}  // namespace wanlab::workload
