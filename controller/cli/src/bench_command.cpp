// bench: one scenario under several policies and numbers of connections, side by side.
#include "bench_command.hpp"

#include <algorithm>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_plots.hpp"
#include "wanlab/common/version.hpp"
#include "bench_report.hpp"
#include "bench_runner.hpp"
#include "commands.hpp"
#include "run_support.hpp"
#include "ns3_command.hpp"
#include "simulate_command.hpp"
#include "wanlab/core/diagnostics.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/sim/rescale.hpp"
#include "wanlab/workload/baselines.hpp"
#include "wanlab/workload/plan.hpp"
#include "wanlab/workload/scenario.hpp"

namespace wanlab::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The lab as the bench runner's executor: each variant one run through the lab's API, again
// (at most twice) when the hypervisor took more than --max-steal of the CPU.
class LabExecutor final : public BenchExecutor {
 public:
  LabExecutor(const BenchArgs& a, const LabUse& lab, const PlacementScenarios& dp_across)
      : a_(a), lab_(lab), dp_across_(dp_across) {}

  std::string failed() const override { return "not run"; }

  VariantOutcome run(const bench::Variant& v, const workload::Scenario& scen, const fs::path& folder,
                     const std::string& tag) override {
    fmt::print("\n{}: policy {}, {} TCP connection{} per WAN peer, placement {}\n", tag, v.policy, v.connections,
               v.connections == 1 ? "" : "s", v.placement);
    std::fflush(stdout);
    RunRequest request{fs::absolute(a_.scenario), folder, v.connections, v.policy};
    if (dp_across_.contains(v.placement) || v.training_only) {
      // The modified scenario runs from the variant's folder; its topology path is absolute.
      request.scenario = folder / "bench-scenario.json";
      try {
        fs::create_directories(folder);
        write_text_file(request.scenario, workload::to_json(scen).dump(2) + "\n");
      } catch (const std::exception& e) {
        fmt::print(stderr, "wanlab: bench: {}\n", e.what());
        auto failure = failed_run(e.what());
        failure.reported = true;
        failure.give_up = true;
        return failure;
      }
    }
    // A run during which the hypervisor took more than --max-steal of the CPU measured the
    // host as much as the lab: run it again, at most twice, and keep the last.
    constexpr int kAttempts = 3;
    std::error_code ec;
    auto outcome = run_on_lab(lab_.name, request, scen, a_.quiet);
    json stolen = json::array();  // the steal of every attempt
    for (int attempt = 1; outcome.rc == 0 && !interrupted(); ++attempt) {
      const double steal = bench::number(outcome.summary, "/host_cpu/steal_fraction").value_or(0.0);
      stolen.push_back(steal);
      if (a_.max_steal <= 0 || 100 * steal <= a_.max_steal || attempt == kAttempts) break;
      fmt::print("{}: hypervisor steal {:.1f} % over --max-steal {:g} %: run again (attempt {} of {})\n", tag,
                 100 * steal, a_.max_steal, attempt + 1, kAttempts);
      std::fflush(stdout);
      fs::remove(folder / "summary.json", ec);
      outcome = run_on_lab(lab_.name, request, scen, a_.quiet);
    }
    if (outcome.rc != 0) return failed_run(outcome.error, outcome.rc);
    const json& s = outcome.summary;
    report(s, tag);
    auto done = finished_run(s);
    done.row = {{"steal_fraction", stolen.empty() ? json() : stolen.back()},
                {"attempts", stolen},
                {"engine", bench::run_engine(s)}};
    return done;
  }

  bool lost() override { return !lab_running(lab_.name); }

  void describe(json& result) const override {
    std::string backend = a_.backend;
    const auto& done = result.at("variants");
    if (!done.empty()) backend = done.front().at("summary").value("backend", backend);
    result["backend"] = backend;
    result["repeat"] = std::max(1, a_.repeat);
    result["degraded_runs"] = bench::degraded_runs(done);
  }

  void finish(const fs::path& out, const json& result, int rc) override {
    fmt::print("\n{}\nresults: {}/bench.json, bench.md, one run folder per variant\n", bench::markdown(result),
               out.string());
    std::fflush(stdout);
    release_lab(lab_, a_.keep_lab);
    if (rc == 130) {
      fmt::print("interrupted: no plots (wanlab bench --plots-only {} draws them)\n", out.string());
      return;
    }
    // A plot that cannot be drawn is a warning: the variants ran and their results are written.
    if (!result.at("variants").empty() && !make_bench_plots(out))
      fmt::print(stderr, "warning: plots not drawn (above); the variants' results stand (wanlab bench --plots-only {} "
                         "draws them again)\n",
                 out.string());
  }

 private:
  // One finished run's figures, as it finished.
  static void report(const json& s, const std::string& tag) {
    const auto num = [&](const char* pointer) { return bench::number(s, pointer).value_or(0.0); };
    fmt::print(
        "{}: iteration time {:.3f} s (p99 {:.3f} s), GPU utilization {:.1f} %, bubble {:.1f} %, WAN "
        "utilization {:.1f} %{}\n",
        tag, num("/iteration_time_s/mean"), num("/iteration_time_s/p99"), 100 * num("/gpu_utilization/mean"),
        100 * num("/bubble_fraction"), 100 * bench::wan_utilization(s),
        s.contains("host_cpu")
            ? fmt::format(", hypervisor steal {:.1f} %{}", 100 * num("/host_cpu/steal_fraction"),
                          num("/host_cpu/steal_fraction") > kStealWarning ? " (timings the host's as much as the lab's)"
                                                                          : "")
            : std::string());
    if (s.contains("prefill"))
      fmt::print("{}: prefill {} of {} requests done, TTFT p50 {:.3f} s p99 {:.3f} s, {} deadline misses, {} "
                 "preemptions\n",
                 tag, s["prefill"].value("completed", 0), s["prefill"].value("requests", 0),
                 bench::number(s, "/prefill/ttft_s/p50").value_or(0), bench::number(s, "/prefill/ttft_s/p99").value_or(0),
                 s["prefill"].value("deadline_misses", 0), s["prefill"].value("preemptions", 0));
    if (s.contains("engine") && s["engine"].is_object() && s["engine"].value("degraded", false))
      for (const auto& why : s["engine"].value("degraded_reasons", json::array()))
        fmt::print("{}: WARNING: emulation degraded: {}\n", tag, why.get<std::string>());
  }

  const BenchArgs& a_;
  const LabUse& lab_;
  const PlacementScenarios& dp_across_;
};

// `base` writing into `out`, each variant `rounds` times (the simulator's and the ns-3
// reference's one run each stands for the lab's mean in a cross-check).
BenchSetup into(BenchSetup base, fs::path out, int rounds = 1) {
  base.out = std::move(out);
  base.rounds = rounds;
  return base;
}

// The variants in the lab, one run each (--repeat: per round): bench.json, bench.md, run
// folders and plots in setup.out. Returns bench.json's object (null when the lab could not be
// had); `rc` as cmd_bench's.
json lab_variants(const BenchArgs& a, const BenchSetup& setup, int& rc) {
  LabUse lab;
  if (const int up = acquire_lab(*setup.scenario, *setup.topology, a.backend, lab); up != 0) {
    rc = up;
    return json();
  }
  catch_interrupts();
  LabExecutor executor(a, lab, *setup.dp_across);
  return run_bench(executor, setup, rc);
}

// `--mode` with ns3 (alone or with lab and simulate): each executor into OUT (alone) or
// OUT/lab, OUT/sim, OUT/ns3, then crosscheck.json and crosscheck.md side by side.
int bench_executors(const BenchArgs& a, const std::vector<std::string>& modes, const BenchSetup& base) {
  const fs::path& out = base.out;
  const bool alone = modes.size() == 1;
  std::map<std::string, json> benches;
  int rc = 0;
  for (const auto& mode : modes) {
    int mode_rc = 0;
    try {
      if (mode == "lab") {
        auto lab = lab_variants(a, into(base, alone ? out : out / "lab", a.repeat), mode_rc);
        if (!lab.is_null()) benches["lab"] = std::move(lab);
        if (mode_rc == 130) return mode_rc;
      } else if (mode == "simulate") {
        fmt::print("\nsimulating the variants\n");
        benches["simulate"] = simulate_variants(into(base, alone ? out : out / "sim"), a.sim, mode_rc);
      } else {
        fmt::print("\nrunning the variants in the ns-3 reference (minutes each)\n");
        std::fflush(stdout);
        benches["ns3"] = ns3_variants(into(base, alone ? out : out / "ns3"), parse_sim_flags(a.sim).compute_jitter,
                                      mode_rc);
      }
    } catch (const std::exception& e) {
      fmt::print(stderr, "wanlab: bench: {}: {}\n", mode, e.what());
      mode_rc = 1;
    }
    rc = rc != 0 ? rc : mode_rc;
  }
  if (alone) {
    if (!benches.empty())
      fmt::print("\n{}\nresults: {}/bench.json, bench.md, one run folder per variant\n",
                 bench::markdown(benches.begin()->second), out.string());
    return rc;
  }
  if (benches.empty()) return rc != 0 ? rc : 1;
  const auto check = bench::crosscheck_executors(benches);
  const auto md = bench::crosscheck_executors_markdown(check);
  try {
    write_text_file(out / "crosscheck.json", check.dump(2) + "\n");
    write_text_file(out / "crosscheck.md", md);
  } catch (const std::exception& e) {
    fmt::print(stderr, "wanlab: bench: {}\n", e.what());
    return 1;
  }
  fmt::print("\n{}\nresults: {}/{{lab,sim,ns3}}, crosscheck.json, crosscheck.md\n", md, out.string());
  return rc;
}

// What a bench runs: the scenario (rescaled by --gpus), its topology and the lists of the flags.
struct BenchInputs {
  workload::Scenario scenario;
  core::Topology topo;
  std::vector<std::string> policies;
  std::vector<int> connections;
  std::vector<std::string> modes;
  std::vector<std::string> baselines;
};

// Reads and checks the flags, the scenario and its topology; 0, or the exit status of a refusal.
int load_inputs(const BenchArgs& a, BenchInputs& in) {
  try {
    in.modes = bench::parse_modes(a.mode);
    if (std::find(in.modes.begin(), in.modes.end(), "ns3") != in.modes.end()) {
      if (const auto why = ns3_unavailable()) throw std::invalid_argument(fmt::format("--mode {}: {}", a.mode, *why));
    }
    if (a.gpus && std::find(in.modes.begin(), in.modes.end(), "lab") != in.modes.end())
      throw std::invalid_argument(fmt::format("--gpus {}: only for the executors without a lab (--mode simulate, ns3 "
                                              "or simulate,ns3); the lab runs the GPUs its topology has",
                                              *a.gpus));
    if (a.mode != "lab") (void)parse_sim_flags(a.sim);
    in.policies = bench::parse_known_policies(a.policies.value_or("fair,atlas"));
    in.scenario = workload::load_scenario(a.scenario);
    in.topo = core::load_topology(in.scenario.topology_path);
    in.connections =
        a.connections ? bench::parse_connections(*a.connections) : bench::default_connections(in.scenario.connections);
    if (a.gpus) {
      try {
        auto r = sim::rescale_gpus(in.scenario, in.topo, *a.gpus);
        in.scenario = std::move(r.scenario);
        in.topo = std::move(r.topology);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(fmt::format("--gpus: {}", e.what()));
      }
    }
    (void)workload::build_plan(in.scenario, in.topo);  // placement refusals, before anything is built
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "wanlab: bench: {}\n", e.what());
    return 2;
  } catch (const core::ConfigError& e) {
    fmt::print(stderr, "wanlab: {}\n", e.what());
    return 2;
  }

  try {
    if (a.baselines) in.baselines = bench::parse_baselines(*a.baselines);
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "wanlab: bench: --baselines: {}\n", e.what());
    return 2;
  }
  return 0;
}

// The results folder: new, empty or an earlier bench's; 0, or the exit status.
int make_results_folder(const fs::path& out) {
  if (!usable_results_folder(out)) {
    fmt::print(stderr,
               "wanlab: bench: {} exists and is not an earlier bench's folder (no bench.json or crosscheck.json); give an "
               "empty or new --out\n",
               out.string());
    return 2;
  }
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) {
    fmt::print(stderr, "wanlab: bench: cannot create {}: {}\n", out.string(), ec.message());
    return 1;
  }
  return 0;
}

int simulated_bench(const BenchArgs& a, const BenchSetup& base) {
  const fs::path& out = base.out;
  int rc = 0;
  try {
    const auto result = simulate_variants(into(base, out, a.repeat), a.sim, rc);
    fmt::print("\n{}\nresults: {}/bench.json, bench.md, one run folder per variant\n", bench::markdown(result),
               out.string());
  } catch (const std::exception& e) {
    fmt::print(stderr, "wanlab: bench: {}\n", e.what());
    return 1;
  }
  return rc;
}

// Both: the lab first (it takes minutes), then the simulator, then the comparison.
int lab_and_simulated_bench(const BenchArgs& a, const BenchSetup& base) {
  const fs::path& out = base.out;
  int rc = 0;
  const auto lab = lab_variants(a, into(base, out / "lab", a.repeat), rc);
  if (lab.is_null() || rc == 130) return rc;
  int sim_rc = 0;
  json simulated;
  try {
    fmt::print("\nsimulating the same variants\n");
    simulated = simulate_variants(into(base, out / "sim"), a.sim, sim_rc);
  } catch (const std::exception& e) {
    fmt::print(stderr, "wanlab: bench: {}\n", e.what());
    return 1;
  }
  const auto check = bench::crosscheck(lab, simulated);
  const auto md = bench::crosscheck_markdown(check);
  try {
    write_text_file(out / "crosscheck.json", check.dump(2) + "\n");
    write_text_file(out / "crosscheck.md", md);
  } catch (const std::exception& e) {
    fmt::print(stderr, "wanlab: bench: {}\n", e.what());
    return 1;
  }
  fmt::print("\n{}\nresults: {}/lab, {}/sim, crosscheck.json, crosscheck.md\n", md, out.string(), out.string());
  return rc != 0 ? rc : sim_rc;
}

}  // namespace

int cmd_bench(const BenchArgs& a) {
  if (a.plots_only) return make_bench_plots(fs::path(a.scenario)) ? 0 : 1;

  BenchInputs in;
  if (const int refused = load_inputs(a, in); refused != 0) return refused;
  const auto& scenario = in.scenario;
  const auto& topo = in.topo;
  const auto& modes = in.modes;
  auto variants = bench::expand_variants(in.policies, in.connections, !a.no_placement_baseline,
                                         scenario.placement.empty() ? bench::kAtlasRule : bench::kScenarioPlacement,
                                         in.baselines);
  const auto baseline = bench::baseline_name(in.connections);
  json skipped = json::array();
  const auto dp_across = dp_across_dcs_variant(scenario, topo, variants, skipped, "running");

  // A lab that is up is used through its API (a router-only lab's too); bringing one up needs more.
  const bool with_lab = std::find(modes.begin(), modes.end(), "lab") != modes.end();
  if (with_lab && !lab_running(topo.name) && !check_privileges("bench")) return 1;
  const auto scenario_file = fs::absolute(a.scenario).lexically_normal().string();
  const fs::path out =
      fs::absolute(a.out ? fs::path(*a.out) : fs::path("bench-results") / (scenario.name + "-" + timestamp()));
  if (const int failed = make_results_folder(out); failed != 0) return failed;
  std::string names;
  for (const auto& v : variants) names += (names.empty() ? "" : ", ") + v.name;
  fmt::print("bench {}: {} variant{} ({}), baseline {}, results in {}\n", scenario.name, variants.size(),
             variants.size() == 1 ? "" : "s", names, baseline, out.string());

  const BenchSetup base{.scenario = &scenario,
                        .scenario_file = scenario_file,
                        .topology = &topo,
                        .variants = variants,
                        .dp_across = &dp_across,
                        .skipped = skipped,
                        .policies = in.policies,
                        .connections = in.connections,
                        .rounds = 1,
                        .out = out};
  if (std::find(modes.begin(), modes.end(), "ns3") != modes.end()) return bench_executors(a, modes, base);
  if (a.mode == "simulate") return simulated_bench(a, base);
  if (a.mode == "lab") {
    int rc = 0;
    (void)lab_variants(a, into(base, out, a.repeat), rc);
    return rc;
  }
  return lab_and_simulated_bench(a, base);
}

}  // namespace wanlab::cli
