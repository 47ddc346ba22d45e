#pragma once
// `wanlab bench SCENARIO`: the same scenario under several bandwidth policies and numbers
// of TCP connections (and the "DP across DCs" placement baseline), one run each on one
// lab, side by side: OUT/bench.json, OUT/bench.md (also printed), one run folder per
// variant, and plots in OUT/plots/ (bench_plots.hpp). `--mode simulate` runs the variants in
// the flow-level simulator instead (simulate_command.hpp); `--mode both` runs them in the
// lab (OUT/lab/) and in the simulator (OUT/sim/) and compares the iteration times
// (OUT/crosscheck.json, OUT/crosscheck.md, also printed).
#include <optional>
#include <string>

#include "simulate_command.hpp"

namespace wanlab::cli {

struct BenchArgs {
  std::string scenario;                    // or, with plots_only, the bench folder
  std::optional<std::string> policies;     // "fair,atlas" by default
  std::optional<std::string> connections;  // "1,<scenario's>" by default
  bool no_placement_baseline = false;
  std::optional<std::string> baselines;  // "stock,stock-flat,varuna" or "all"
  std::optional<std::string> out;
  std::string backend = "auto";
  bool keep_lab = false;
  bool quiet = false;
  bool plots_only = false;
  std::string mode = "lab";  // lab, simulate, both, ns3, or several joined by commas (bench::parse_modes)
  std::optional<long> gpus;  // simulate and ns3 only: the scenario grown to this many GPUs
  int repeat = 1;            // lab runs per variant, in rounds
  double max_steal = 5;      // percent of CPU time; a run under more steal runs again (0: never)
  SimFlags sim;
};
int cmd_bench(const BenchArgs& a);

}  // namespace wanlab::cli
