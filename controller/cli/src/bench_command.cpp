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

// The variants in the lab, one run each: bench.json, bench.md, run folders and plots in `out`.
// Returns bench.json's object (null when the lab could not be had); `rc` as cmd_bench's.
json lab_variants(const BenchArgs& a, const workload::Scenario& scenario, const core::Topology& topo,
                  const std::vector<bench::Variant>& variants_in, json skipped,
                  const PlacementScenarios& dp_across, const std::vector<std::string>& policies,
                  const std::vector<int>& connections, const fs::path& out, int& rc) {
  const auto baseline = bench::baseline_name(connections);
  // With a prefill load, each variant's twin without it gives its training slowdown.
  const std::vector<bench::Variant> variants =
      scenario.prefill ? bench::add_training_only_twins(variants_in) : variants_in;
  std::optional<workload::Scenario> training_only;
  if (scenario.prefill) {
    training_only = scenario;
    training_only->prefill.reset();
  }
  std::error_code ec;
  LabUse lab;
  if (const int up = acquire_lab(scenario, topo, a.backend, lab); up != 0) {
    rc = up;
    return json();
  }
  catch_interrupts();

  const int rounds = std::max(1, a.repeat);
  // Each variant's runs, one per round (null: not run in that round); round r runs every
  // variant once, in bench::round_order (reversed in even rounds). Run 1 lives in the
  // variant's folder, run r in NAME-runR.
  std::vector<json> runs(variants.size(), json::array());
  std::vector<json> first(variants.size());  // the first run's bench.json entry
  std::vector<bool> given_up(variants.size(), false);
  bool stop = false;
  for (int round = 1; round <= rounds; ++round) {
    std::vector<json> summaries(variants.size());  // this round's, of the runs that finished
    const auto order = bench::round_order(variants.size(), round, rounds);
    for (std::size_t k = 0; k < order.size(); ++k) {
      const std::size_t i = order[k];
      const auto& v = variants[i];
      const auto name = round == 1 ? v.name : fmt::format("{}-run{}", v.name, round);
      const auto tag = rounds == 1 ? fmt::format("[{}/{}] {}", k + 1, variants.size(), v.name)
                                   : fmt::format("[{}/{} round {}/{}] {}", k + 1, variants.size(), round, rounds, v.name);
      if (given_up[i]) {
        runs[i].push_back(nullptr);
        continue;
      }
      if (stop || interrupted()) {
        skipped.push_back({{"name", name}, {"reason", interrupted() ? "interrupted" : "the controller was lost"}});
        runs[i].push_back(nullptr);
        continue;
      }
      fmt::print("\n{}: policy {}, {} TCP connection{} per WAN peer, placement {}\n", tag, v.policy, v.connections,
                 v.connections == 1 ? "" : "s", v.placement);
      std::fflush(stdout);
      const fs::path folder = out / name;
      fs::remove_all(folder, ec);  // an earlier bench's run of this variant
      const auto special = dp_across.find(v.placement);
      const workload::Scenario& scen = special != dp_across.end() ? special->second
                                       : v.training_only         ? *training_only
                                                                 : scenario;
      RunRequest request{fs::absolute(a.scenario), folder, v.connections, v.policy};
      if (special != dp_across.end() || v.training_only) {
        // The modified scenario runs from the variant's folder; its topology path is absolute.
        request.scenario = folder / "bench-scenario.json";
        try {
          fs::create_directories(folder);
          write_text_file(request.scenario, workload::to_json(scen).dump(2) + "\n");
        } catch (const std::exception& e) {
          fmt::print(stderr, "wanlab: bench: {}\n", e.what());
          skipped.push_back({{"name", name}, {"reason", e.what()}});
          rc = 1;
          given_up[i] = true;
          runs[i].push_back(nullptr);
          continue;
        }
      }
      // A run during which the hypervisor took more than --max-steal of the CPU measured the
      // host as much as the lab: run it again, at most twice, and keep the last.
      constexpr int kAttempts = 3;
      auto outcome = run_on_lab(lab.name, request, scen, a.quiet);
      json stolen = json::array();  // the steal of every attempt
      for (int attempt = 1; outcome.rc == 0 && !interrupted(); ++attempt) {
        const double steal = bench::number(outcome.summary, "/host_cpu/steal_fraction").value_or(0.0);
        stolen.push_back(steal);
        if (a.max_steal <= 0 || 100 * steal <= a.max_steal || attempt == kAttempts) break;
        fmt::print("{}: hypervisor steal {:.1f} % over --max-steal {:g} %: run again (attempt {} of {})\n", tag,
                   100 * steal, a.max_steal, attempt + 1, kAttempts);
        std::fflush(stdout);
        fs::remove(folder / "summary.json", ec);
        outcome = run_on_lab(lab.name, request, scen, a.quiet);
      }
      if (outcome.rc == 0) {
        json s = outcome.summary;
        const auto num = [&](const char* pointer) { return bench::number(s, pointer).value_or(0.0); };
        fmt::print(
            "{}: iteration time {:.3f} s (p99 {:.3f} s), GPU utilization {:.1f} %, bubble {:.1f} %, WAN "
            "utilization {:.1f} %{}\n",
            tag, num("/iteration_time_s/mean"), num("/iteration_time_s/p99"), 100 * num("/gpu_utilization/mean"),
            100 * num("/bubble_fraction"), 100 * bench::wan_utilization(s),
            s.contains("host_cpu") ? fmt::format(", hypervisor steal {:.1f} %{}", 100 * num("/host_cpu/steal_fraction"),
                                                 num("/host_cpu/steal_fraction") > kStealWarning ? " (timings the host's as much as the lab's)" : "")
                                   : std::string());
        if (s.contains("prefill"))
          fmt::print("{}: prefill {} of {} requests done, TTFT p50 {:.3f} s p99 {:.3f} s, {} deadline misses, {} "
                     "preemptions\n",
                     tag, s["prefill"].value("completed", 0), s["prefill"].value("requests", 0),
                     bench::number(s, "/prefill/ttft_s/p50").value_or(0), bench::number(s, "/prefill/ttft_s/p99").value_or(0),
                     s["prefill"].value("deadline_misses", 0), s["prefill"].value("preemptions", 0));
        runs[i].push_back({{"round", round},
                           {"folder", name},
                           {"iteration_time_s", s.value("iteration_time_s", json())},
                           {"gpu_utilization", s.value("gpu_utilization", json())},
                           {"bubble_fraction", s.value("bubble_fraction", json())},
                           {"wan_utilization", bench::wan_utilization(s)},
                           {"steal_fraction", stolen.empty() ? json() : stolen.back()},
                           {"attempts", stolen},
                           {"engine", bench::run_engine(s)}});
        if (s.contains("engine") && s["engine"].is_object() && s["engine"].value("degraded", false))
          for (const auto& why : s["engine"].value("degraded_reasons", json::array()))
            fmt::print("{}: WARNING: emulation degraded: {}\n", tag, why.get<std::string>());
        summaries[i] = std::move(s);
        continue;
      }
      runs[i].push_back(nullptr);
      if (outcome.rc == 130) {
        skipped.push_back({{"name", name}, {"reason", "interrupted"}});
        rc = 130;
        continue;
      }
      fmt::print(stderr, "{}: not run: {}\n", tag, outcome.error);
      skipped.push_back({{"name", name}, {"reason", outcome.error}});
      rc = 1;
      given_up[i] = round == 1;  // refused by the controller: it will be again
      stop = !lab_running(lab.name);  // nothing more can run without the controller
    }
    // This round's runs (runs[i].back()) that finished: with a prefill load, the slowdown
    // against the twin of this round (which ran before or after it), into the run's summary
    // too; a variant's first finished run is its bench.json entry.
    for (std::size_t i = 0; i < variants.size(); ++i) {
      json& s = summaries[i];
      if (!s.is_object()) continue;
      const auto& v = variants[i];
      const auto name = runs[i].back().at("folder").get<std::string>();
      if (s.contains("prefill")) {
        for (std::size_t j = 0; j < variants.size(); ++j)
          if (variants[j].name == v.name + bench::kTrainingOnlySuffix && runs[j].back().is_object())
            s["training_slowdown"] = bench::training_slowdown(s, runs[j].back());
        fmt::print("[round {}/{}] {}: training slowdown {}\n", round, rounds, v.name,
                   s.value("training_slowdown", json()).is_number()
                       ? fmt::format("{:+.2f} % against {}{}", 100 * s["training_slowdown"].get<double>(), v.name,
                                     bench::kTrainingOnlySuffix)
                       : std::string("n/a (its twin did not run)"));
        if (s.contains("training_slowdown")) runs[i].back()["training_slowdown"] = s["training_slowdown"];
        try {
          write_text_file(out / name / "summary.json", s.dump(2) + "\n");
        } catch (const std::exception& e) {
          fmt::print(stderr, "wanlab: bench: {}\n", e.what());
        }
      }
      if (!first[i].is_null()) continue;
      first[i] = {{"name", v.name},           {"policy", v.policy}, {"connections", v.connections},
                  {"placement", v.placement}, {"folder", name},     {"summary", std::move(s)}};
      if (v.training_only) first[i]["training_only"] = true;
    }
    if (stop || interrupted()) break;  // the later rounds are not listed one by one
  }
  json done = json::array();
  for (std::size_t i = 0; i < variants.size(); ++i) {
    if (first[i].is_null()) continue;
    if (rounds > 1) first[i]["runs"] = runs[i];
    done.push_back(std::move(first[i]));
  }

  // Ratios against the baseline, when it ran.
  const json* base = nullptr;
  for (const auto& d : done)
    if (d.at("name") == baseline) base = &d.at("summary");
  for (auto& d : done) d["ratios"] = bench::ratios(d.at("summary"), base ? *base : json::object());
  if (rounds > 1) bench::add_repeat_ratios(done, baseline);
  std::string backend = a.backend;
  if (!done.empty()) backend = done.front().at("summary").value("backend", backend);
  const json result = {
      {"scenario", scenario.name}, {"scenario_file", fs::absolute(a.scenario).lexically_normal().string()},
      {"lab", topo.name},          {"topology", scenario.topology_path.string()},
      {"backend", backend},        {"scale", scenario.scale},
      {"created_at", timestamp()}, {"baseline", baseline},
      {"policies", policies},      {"connections", connections},
      {"repeat", rounds},          {"variants", done},
      {"skipped", skipped},        {"wanlab", build_info()},
      {"degraded_runs", bench::degraded_runs(done)}};
  const auto md = bench::markdown(result);
  try {
    write_text_file(out / "bench.json", result.dump(2) + "\n");
    write_text_file(out / "bench.md", md);
  } catch (const std::exception& e) {
    fmt::print(stderr, "wanlab: bench: {}\n", e.what());
    rc = 1;
  }
  fmt::print("\n{}\nresults: {}/bench.json, bench.md, one run folder per variant\n", md, out.string());
  std::fflush(stdout);
  release_lab(lab, a.keep_lab);

  if (rc == 130) {
    fmt::print("interrupted: no plots (wanlab bench --plots-only {} draws them)\n", out.string());
    return result;
  }
  // A plot that cannot be drawn is a warning: the variants ran and their results are written.
  if (!done.empty() && !make_bench_plots(out))
    fmt::print(stderr, "warning: plots not drawn (above); the variants' results stand (wanlab bench --plots-only {} "
                       "draws them again)\n",
               out.string());
  return result;
}

// `--mode` with ns3 (alone or with lab and simulate): each executor into OUT (alone) or
// OUT/lab, OUT/sim, OUT/ns3, then crosscheck.json and crosscheck.md side by side.
int bench_executors(const BenchArgs& a, const std::vector<std::string>& modes, const workload::Scenario& scenario,
                    const std::string& scenario_file, const core::Topology& topo,
                    const std::vector<bench::Variant>& variants, const json& skipped,
                    const PlacementScenarios& dp_across, const std::vector<std::string>& policies,
                    const std::vector<int>& connections, const fs::path& out) {
  const bool alone = modes.size() == 1;
  std::map<std::string, json> benches;
  int rc = 0;
  for (const auto& mode : modes) {
    int mode_rc = 0;
    try {
      if (mode == "lab") {
        auto lab = lab_variants(a, scenario, topo, variants, skipped, dp_across, policies, connections,
                                alone ? out : out / "lab", mode_rc);
        if (!lab.is_null()) benches["lab"] = std::move(lab);
        if (mode_rc == 130) return mode_rc;
      } else if (mode == "simulate") {
        fmt::print("\nsimulating the variants\n");
        benches["simulate"] = simulate_variants(scenario, scenario_file, topo, variants, dp_across, skipped, policies,
                                                connections, a.sim, alone ? out : out / "sim", mode_rc);
      } else {
        fmt::print("\nrunning the variants in the ns-3 reference (minutes each)\n");
        std::fflush(stdout);
        benches["ns3"] = ns3_variants(scenario, scenario_file, topo, variants, dp_across, skipped, policies,
                                      connections, parse_sim_flags(a.sim).compute_jitter, alone ? out : out / "ns3",
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

}  // namespace

int cmd_bench(const BenchArgs& a) {
  if (a.plots_only) return make_bench_plots(fs::path(a.scenario)) ? 0 : 1;

  workload::Scenario scenario;
  core::Topology topo;
  std::vector<std::string> policies;
  std::vector<int> connections;
  std::vector<std::string> modes;
  try {
    modes = bench::parse_modes(a.mode);
    if (std::find(modes.begin(), modes.end(), "ns3") != modes.end()) {
      if (const auto why = ns3_unavailable()) throw std::invalid_argument(fmt::format("--mode {}: {}", a.mode, *why));
    }
    if (a.gpus && std::find(modes.begin(), modes.end(), "lab") != modes.end())
      throw std::invalid_argument(fmt::format("--gpus {}: only for the executors without a lab (--mode simulate, ns3 "
                                              "or simulate,ns3); the lab runs the GPUs its topology has",
                                              *a.gpus));
    if (a.mode != "lab") (void)parse_sim_flags(a.sim);
    if (a.mode == "simulate" && a.repeat > 1)
      throw std::invalid_argument(
          fmt::format("--repeat {}: the simulator is deterministic, so repeated runs give the same figures; --repeat "
                      "is for the lab (--mode lab or both)",
                      a.repeat));
    policies = bench::parse_known_policies(a.policies.value_or("fair,atlas"));
    scenario = workload::load_scenario(a.scenario);
    topo = core::load_topology(scenario.topology_path);
    connections =
        a.connections ? bench::parse_connections(*a.connections) : bench::default_connections(scenario.connections);
    if (a.gpus) {
      try {
        auto r = sim::rescale_gpus(scenario, topo, *a.gpus);
        scenario = std::move(r.scenario);
        topo = std::move(r.topology);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(fmt::format("--gpus: {}", e.what()));
      }
    }
    (void)workload::build_plan(scenario, topo);  // placement refusals, before anything is built
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "wanlab: bench: {}\n", e.what());
    return 2;
  } catch (const core::ConfigError& e) {
    fmt::print(stderr, "wanlab: {}\n", e.what());
    return 2;
  }

  std::vector<std::string> baselines;
  try {
    if (a.baselines) baselines = bench::parse_baselines(*a.baselines);
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "wanlab: bench: --baselines: {}\n", e.what());
    return 2;
  }
  auto variants = bench::expand_variants(policies, connections, !a.no_placement_baseline,
                                         scenario.placement.empty() ? bench::kAtlasRule : bench::kScenarioPlacement,
                                         baselines);
  const auto baseline = bench::baseline_name(connections);
  json skipped = json::array();
  const auto dp_across = dp_across_dcs_variant(scenario, topo, variants, skipped, "running");

  // A lab that is up is used through its API (a router-only lab's too); bringing one up needs more.
  const bool with_lab = std::find(modes.begin(), modes.end(), "lab") != modes.end();
  if (with_lab && !lab_running(topo.name) && !check_privileges("bench")) return 1;
  const auto scenario_file = fs::absolute(a.scenario).lexically_normal().string();
  const fs::path out =
      fs::absolute(a.out ? fs::path(*a.out) : fs::path("bench-results") / (scenario.name + "-" + timestamp()));
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
  std::string names;
  for (const auto& v : variants) names += (names.empty() ? "" : ", ") + v.name;
  fmt::print("bench {}: {} variant{} ({}), baseline {}, results in {}\n", scenario.name, variants.size(),
             variants.size() == 1 ? "" : "s", names, baseline, out.string());

  int rc = 0;
  if (std::find(modes.begin(), modes.end(), "ns3") != modes.end())
    return bench_executors(a, modes, scenario, scenario_file, topo, variants, skipped, dp_across, policies,
                           connections, out);
  if (a.mode == "simulate") {
    try {
      const auto result = simulate_variants(scenario, scenario_file, topo, variants, dp_across, skipped, policies,
                                            connections, a.sim, out, rc);
      fmt::print("\n{}\nresults: {}/bench.json, bench.md, one run folder per variant\n", bench::markdown(result),
                 out.string());
    } catch (const std::exception& e) {
      fmt::print(stderr, "wanlab: bench: {}\n", e.what());
      return 1;
    }
    return rc;
  }
  if (a.mode == "lab") {
    (void)lab_variants(a, scenario, topo, variants, skipped, dp_across, policies, connections, out, rc);
    return rc;
  }
  // both: the lab first (it takes minutes), then the simulator, then the comparison.
  const auto lab = lab_variants(a, scenario, topo, variants, skipped, dp_across, policies, connections, out / "lab", rc);
  if (lab.is_null() || rc == 130) return rc;
  int sim_rc = 0;
  json simulated;
  try {
    fmt::print("\nsimulating the same variants\n");
    simulated = simulate_variants(scenario, scenario_file, topo, variants, dp_across, skipped, policies, connections,
                                  a.sim, out / "sim", sim_rc);
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

}  // namespace wanlab::cli
