// `wanlab memory`: memory_command.hpp.
#include "memory_command.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <exception>

#include "wanlab/core/diagnostics.hpp"
#include "wanlab/workload/baselines.hpp"
#include "wanlab/workload/cost.hpp"
#include "wanlab/workload/memory.hpp"
#include "wanlab/workload/placement.hpp"

namespace wanlab::cli {

using nlohmann::json;

namespace {

double gib(std::uint64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(workload::kGiB); }

}  // namespace

json memory_report(const workload::Scenario& scenario, const core::Topology& topo) {
  std::vector<std::vector<std::size_t>> stage_dcs(static_cast<std::size_t>(scenario.parallelism.pp));
  for (const auto& w : workload::place_workers(scenario, topo))
    stage_dcs.at(static_cast<std::size_t>(w.stage)).push_back(w.dc);
  const auto fit = workload::memory_fit(scenario, topo, stage_dcs);
  // What one GPU of each stage computes per micro-batch: the shape wanlab-gpu-probe times.
  const auto costs = workload::stage_costs(scenario.model, scenario.parallelism, scenario.micro_batch_size,
                                           workload::stage_layers(scenario));
  json stages = json::array();
  const workload::StageFit* worst = nullptr;
  for (const auto& f : fit) {
    const auto& m = f.memory;
    stages.push_back({{"stage", m.stage},
                      {"needed_gib", gib(m.needed())},
                      {"weights_gib", gib(m.weights)},
                      {"gradients_gib", gib(m.gradients)},
                      {"optimizer_gib", gib(m.optimizer)},
                      {"activations_gib", gib(m.activations)},
                      {"reserve_gib", gib(m.reserve)},
                      {"in_flight", m.peak_in_flight},
                      {"available_gib", gib(f.available)},
                      {"gpu", f.gpu},
                      {"dc", f.dc},
                      {"fits", f.fits()}});
    if (const auto i = static_cast<std::size_t>(m.stage); i < costs.size()) {
      stages.back()["shape"] = program::to_json(costs[i].shape);
      stages.back()["forward_flops"] = costs[i].forward_flops;
      stages.back()["backward_flops"] = costs[i].backward_flops;
    }
    // The stage closest to (or furthest past) its GPUs' memory.
    const auto over = [](const workload::StageFit& x) {
      return static_cast<double>(x.memory.needed()) / static_cast<double>(std::max<std::uint64_t>(x.available, 1));
    };
    if (worst == nullptr || over(f) > over(*worst)) worst = &f;
  }
  json j{{"scenario", scenario.source_file},
         {"fits", workload::fits(fit)},
         {"schedule", workload::to_string(scenario.schedule)},
         {"micro_batches", scenario.micro_batches},
         {"micro_batch_size", scenario.micro_batch_size},
         {"recompute", scenario.memory.recompute},
         {"stages", stages}};
  if (worst != nullptr) {
    j["stage"] = worst->memory.stage;
    j["needed_gib"] = gib(worst->memory.needed());
    j["available_gib"] = gib(worst->available);
  }
  return j;
}

int cmd_memory(const MemoryArgs& a) {
  json all = json::array();
  bool every_fits = true;
  for (const auto& file : a.scenarios) {
    try {
      auto scenario = workload::load_scenario(file);
      const auto topo = core::load_topology(scenario.topology_path);
      if (a.baseline) {
        const std::string source = scenario.source_file;
        scenario = workload::baseline_scenario(*a.baseline, scenario, topo);
        scenario.source_file = source;
      }
      auto j = memory_report(scenario, topo);
      if (a.baseline) j["baseline"] = *a.baseline;
      every_fits = every_fits && j["fits"].get<bool>();
      if (!a.json) {
        fmt::print("{}{}: pp {} x dp {} x tp {}, {} x {} micro-batches, {}{}: {}\n", file,
                   a.baseline ? fmt::format(" ({})", *a.baseline) : "", scenario.parallelism.pp,
                   scenario.parallelism.dp, scenario.parallelism.tp, scenario.micro_batches,
                   scenario.micro_batch_size, workload::to_string(scenario.schedule),
                   scenario.memory.recompute ? ", recompute" : "", j["fits"].get<bool>() ? "fits" : "DOES NOT FIT");
        for (const auto& f : j["stages"])
          fmt::print("  stage {}: {:.1f} GiB of {:.1f} ({} in {}; weights {:.1f}, gradients {:.1f}, optimizer {:.1f}, "
                     "activations {:.1f} with {} in flight){}\n",
                     f["stage"].get<int>(), f["needed_gib"].get<double>(), f["available_gib"].get<double>(),
                     f["gpu"].get<std::string>(), f["dc"].get<std::string>(), f["weights_gib"].get<double>(),
                     f["gradients_gib"].get<double>(), f["optimizer_gib"].get<double>(),
                     f["activations_gib"].get<double>(), f["in_flight"].get<int>(),
                     f["fits"].get<bool>() ? "" : "  <- does not fit");
      }
      all.push_back(std::move(j));
    } catch (const core::ConfigError& e) {
      std::string line;
      for (const auto& d : e.diagnostics()) line += (line.empty() ? "" : "; ") + d.to_string();
      fmt::print(stderr, "wanlab: memory: {}\n", line);
      return 2;
    } catch (const std::exception& e) {
      fmt::print(stderr, "wanlab: memory: {}: {}\n", file, e.what());
      return 2;
    }
  }
  if (a.json) fmt::print("{}\n", all.dump(1));
  return every_fits ? 0 : 1;
}

}  // namespace wanlab::cli
