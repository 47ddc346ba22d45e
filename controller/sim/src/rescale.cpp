#include "wanlab/sim/rescale.hpp"

#include <fmt/format.h>

namespace wanlab::sim {

Rescaled rescale_gpus(const workload::Scenario& scenario, const core::Topology& topo, long gpus) {
  const auto& par = scenario.parallelism;
  const long per_replica = static_cast<long>(par.pp) * par.tp;
  if (gpus < 1) throw std::invalid_argument(fmt::format("{} GPUs: give a positive number", gpus));
  if (!scenario.programs.empty())
    throw std::invalid_argument(fmt::format("the scenario replays the {} workers of {} (`programs`): an imported job "
                                            "keeps its own worker count",
                                            scenario.programs.size(), scenario.programs_file.string()));
  if (gpus % per_replica != 0) {
    const long below = gpus / per_replica * per_replica;
    throw std::invalid_argument(fmt::format(
        "{} GPUs is not a multiple of pp x tp = {} x {} = {} (one pipeline); the nearest that are: {}{}", gpus, par.pp,
        par.tp, per_replica, below > 0 ? fmt::format("{} and ", below) : "", below + per_replica));
  }
  const long dp = gpus / per_replica;
  if (dp > 1'000'000) throw std::invalid_argument(fmt::format("{} GPUs: at most 1,000,000 replicas", gpus));
  Rescaled out{scenario, topo};
  out.scenario.parallelism.dp = static_cast<int>(dp);
  const long factor = dp > par.dp ? (dp + par.dp - 1) / par.dp : 1;
  for (auto& dc : out.topology.dcs) dc.nodes = static_cast<int>(dc.nodes * factor);
  if (!scenario.placement.empty()) {
    std::vector<std::vector<std::string>> placement;
    for (std::size_t s = 0; s < scenario.placement.size(); ++s) {
      const auto& replicas = scenario.placement[s];
      for (const auto& dc : replicas)
        if (dc != replicas.front())
          throw std::invalid_argument(fmt::format(
              "the scenario's placement puts stage {} in DCs {} and {}; --gpus can only grow a placement that "
              "keeps each stage in one DC",
              s, replicas.front(), dc));
      placement.emplace_back(static_cast<std::size_t>(dp), replicas.empty() ? std::string{} : replicas.front());
    }
    out.scenario.placement = std::move(placement);
  }
  out.scenario.description = fmt::format("{} (rescaled to {} GPUs: dp {}, DC nodes x{})", scenario.description, gpus,
                                         dp, factor);
  return out;
}

}  // namespace wanlab::sim
