#pragma once
// `wanlab simulate SCENARIO`: the scenario's variants (policies x connections, as `wanlab
// bench` makes them) run in the flow-level simulator (controller/sim) instead of a lab:
// no root, no lab, any size (`--gpus`). Writes what `bench` writes: OUT/bench.json,
// OUT/bench.md (also printed) and per variant a run folder with summary.json (backend
// "simulate"), timeline.json (full, per-stage or none), links.csv, windows.csv and
// scenario.json (+ topology.json when --gpus rescaled it).
// `wanlab bench --mode simulate|both` runs the same code (simulate_variants()).
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_report.hpp"
#include "bench_runner.hpp"
#include "run_support.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/sim/simulator.hpp"
#include "wanlab/workload/scenario.hpp"

namespace wanlab::cli {

/// The simulator's settings as given on the command line (strings parsed by
/// parse_sim_settings()).
struct SimFlags {
  std::optional<std::string> lan_rate;    // "10Gbit"
  std::optional<std::string> tcp_window;  // "3MiB"
  bool slow_start = false;
  std::string bursts = sim::to_string(sim::SimOptions{}.bursts);  // paced, shared, fifo
  bool no_acks = false;
  std::optional<std::string> paced_piece;   // "1ms"
  std::optional<std::string> paced_stream;  // "8ms"
  double compute_jitter = sim::SimOptions{}.compute_jitter;  // fraction
  std::string timeline = "auto";  // auto, full, per-stage, none
  int feedback_rounds = 4;  // with a prefill load: simulations at most (sim::simulate_with_prefill)
  bool no_sensitivity = false;    // leave out the sensitivity runs (bench.md "Model sensitivity")
};

/// The options of a sensitivity run (bench::kSensitivityKnobs): "default" as given,
/// "step/4" the paced model's step (and long pieces) a quarter as long, "shared" and "fifo"
/// the other burst models, "jitter x10" the compute jitter ten times as large (at most 0.5;
/// nullopt without jitter). Only for the paced model (the default); nullopt otherwise.
std::optional<sim::SimOptions> sensitivity_options(const sim::SimOptions& given, std::string_view knob);

/// Turns the flags into options; throws std::invalid_argument naming the flag and the reason.
sim::SimOptions parse_sim_flags(const SimFlags& flags);

struct SimulateArgs {
  std::string scenario;
  std::optional<long> gpus;
  std::optional<std::string> policies;
  std::optional<std::string> connections;
  bool no_placement_baseline = false;
  std::optional<std::string> baselines;  // "stock,stock-flat,varuna" or "all"
  std::optional<std::string> out;
  SimFlags sim;
  int repeat = 1;  // rounds, as bench's --repeat
  bool quiet = false;
  std::optional<std::string> rails_policy;   // the scenario's "rails" policy, replaced
  std::optional<std::string> rails_latency;  // every OCS DC's reconfiguration latency, replaced
};
int cmd_simulate(const SimulateArgs& a);

/// --rails-policy and --rails-latency: the scenario's rail policy (its phases kept for
/// phase, dropped for another policy) and every OCS rails DC's reconfiguration latency.
/// Throws std::invalid_argument naming the flag and the reason (an unknown policy, a
/// latency that is not a duration, negative or over core::kMaxReconfiguration, a topology
/// without OCS rails).
void apply_rails_flags(const std::optional<std::string>& policy, const std::optional<std::string>& latency,
                       workload::Scenario& scenario, core::Topology& topo);

/// Simulates the variants of `setup` (bench_runner.hpp) into setup.out (created; one folder
/// per variant, bench.json and bench.md), setup.rounds times each (run r of a variant in
/// NAME-runR); with a prefill load each variant gets a training-only twin. Returns
/// bench.json's object; `rc` is set to 1 if a variant failed. Throws std::runtime_error
/// when a file cannot be written.
nlohmann::json simulate_variants(BenchSetup setup, const SimFlags& flags, int& rc);

/// The WAN link traces of a topology as the simulator takes them (rate steps); throws
/// core::ConfigError for an unreadable or invalid trace file.
std::vector<sim::LinkTrace> load_link_traces(const core::Topology& topo);

}  // namespace wanlab::cli
