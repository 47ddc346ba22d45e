#pragma once
// `wanlab plan SCENARIO`: which DCs, how many GPUs and which split of the scenario's model
// train fastest, as a what-if search on the flow-level simulator (controller/planner).
// Prints the best K with their predicted iteration time, GPU utilization, WAN use and
// tokens per second, Atlas's greedy rule marked; writes OUT/plan.json, OUT/plan.md, one
// folder per plan with scenario.json and topology.json (which run, bench and simulate
// accept), and OUT/plots/iteration-time.svg (gnuplot): predicted iteration time against
// GPUs used, one line per DC set. docs/plan.md has the details.
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>

#include "wanlab/core/topology.hpp"
#include "wanlab/planner/search.hpp"
#include "wanlab/workload/scenario.hpp"

namespace wanlab::cli {

struct PlanArgs {
  std::string scenario;
  std::optional<std::string> gpus;  // N or LO-HI
  std::optional<std::string> dcs;   // NAME[:GPUS],...
  std::size_t top = 5;
  std::optional<std::string> out;
  double budget = 60;
  std::optional<long> batch;
};
int cmd_plan(const PlanArgs& a);

/// Writes the search's results into `out` (created): plan.json, plan.md, a folder per
/// ranked plan (the best `top`) and per greedy-rule plan, each with scenario.json and
/// topology.json, and plots/iteration-time.{dat,gp} (drawn to .svg when gnuplot is there).
/// Returns plan.json's object. Throws std::runtime_error when a file cannot be written.
nlohmann::json write_plan(const workload::Scenario& scenario, const std::string& scenario_file,
                          const core::Topology& topo, const planner::SearchResult& result, std::size_t top,
                          const std::filesystem::path& out);

}  // namespace wanlab::cli
