// run: a scenario on its lab, from the command line.
#include "run_command.hpp"

#include <filesystem>

#include <fmt/format.h>

#include "bench_plots.hpp"
#include "commands.hpp"
#include "lab_lookup.hpp"
#include "run_support.hpp"
#include "wanlab/core/diagnostics.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/workload/plan.hpp"
#include "wanlab/workload/scenario.hpp"

namespace wanlab::cli {
namespace {

namespace fs = std::filesystem;

double num(const nlohmann::json& j, const char* a, const char* b = nullptr) {
  const auto& v = b ? j.at(a).at(b) : j.at(a);
  return v.is_number() ? v.get<double>() : 0.0;
}

void print_summary(const nlohmann::json& s, const std::string& out) {
  fmt::print("\nrun {} ({} policy, {} backend, scale {}):\n", s.value("run", "?"), s.value("policy", "?"),
             s.value("backend", "?"), s.value("scale", 1.0));
  fmt::print("  iteration time  mean {:.3f} s, p50 {:.3f} s, p99 {:.3f} s\n", num(s, "iteration_time_s", "mean"),
             num(s, "iteration_time_s", "p50"), num(s, "iteration_time_s", "p99"));
  fmt::print("  GPU utilization {:.1f} % (mean over {} GPUs), bubble fraction {:.1f} %\n",
             100 * num(s, "gpu_utilization", "mean"), s.at("gpu_utilization").at("per_gpu").size(),
             100 * num(s, "bubble_fraction"));
  for (const auto& w : s.value("wan", nlohmann::json::array())) {
    if (w.value("payload_bytes", 0.0) == 0 && w.value("expected_payload_bytes", 0.0) == 0) continue;
    fmt::print("  WAN {:>4} -> {:<4} {:>9.1f} MB (scenario {:.1f} MB), utilization {:.1f} %\n",
               w.value("src", "?"), w.value("dst", "?"), w.value("payload_bytes", 0.0) / 1e6,
               w.value("expected_payload_bytes", 0.0) / 1e6, 100 * w.value("utilization", 0.0));
  }
  for (const auto& t : s.value("tcp", nlohmann::json::array())) {
    const auto& c = t.at("cwnd_segments");
    const auto& ss = t.at("ssthresh_segments");
    fmt::print("  TCP {:>4} -> {:<4} {} connections{}: cwnd p50 {} (min {}), ssthresh p50 {} ({} still in slow start), {} "
               "segments sent again\n",
               t.value("src", "?"), t.value("dst", "?"), t.value("connections", 0),
               t.contains("paced_connections") ? fmt::format(" ({} paced)", t.value("paced_connections", 0)) : "",
               c.value("p50", 0.0), c.value("min", 0.0),
               ss.contains("p50") ? fmt::format("{}", ss.value("p50", 0.0)) : std::string("-"),
               ss.value("in_slow_start", 0), t.value("retransmitted_segments", 0));
  }
  if (s.contains("host_cpu")) {
    const double steal = s["host_cpu"].value("steal_fraction", 0.0);
    fmt::print("  host CPU busy {:.1f} %, hypervisor steal {:.1f} %{}\n", 100 * s["host_cpu"].value("busy_fraction", 0.0),
               100 * steal, steal > kStealWarning ? ": the host took CPU time from this run, its timings are the host's as much as the lab's" : "");
  }
  if (s.contains("engine") && s["engine"].is_object()) {
    const auto& e = s["engine"];
    const auto p99 = e.value("release_late_p99_us", nlohmann::json());
    fmt::print("  userspace engine ({}) {:.0f} % of a core, {:.0f} packets released {:.1f} µs late on average (p99 {}, "
               "{:.2f} % over 100 µs, {:.3f} % over 1 ms), {:.0f} frames lost in its RX rings\n",
               e.value("scheduling", std::string("scheduling unknown")), 100 * e.value("cpu_fraction_of_a_core", 0.0),
               e.value("releases", 0.0), e.value("release_late_mean_us", 0.0),
               p99.is_number() ? fmt::format("{:g} µs", p99.get<double>()) : std::string("over 100 ms"),
               100 * e.value("released_late_over_100us_fraction", 0.0),
               100 * e.value("released_late_over_1ms_fraction", 0.0),
               e.value("rx_ring_dropped", 0.0) + e.value("rx_big_ring_dropped", 0.0));
    if (e.value("degraded", false))
      for (const auto& why : e.value("degraded_reasons", nlohmann::json::array()))
        fmt::print("  WARNING: emulation degraded: {}; this run's timings are the busy host's as much as the WAN's "
                   "(see --engine-sched)\n",
                   why.get<std::string>());
  }
  fmt::print("  results in {}/ (summary.json, timeline.json: open in https://ui.perfetto.dev, links.csv)\n",
             out);
}

}  // namespace

int cmd_run(const RunArgs& a) {
  workload::Scenario scenario;
  core::Topology topo;
  try {
    scenario = workload::load_scenario(a.scenario);
    topo = core::load_topology(scenario.topology_path);
    if (a.connections) scenario.connections = *a.connections;
    (void)workload::build_plan(scenario, topo);  // placement refusals, before anything is built
  } catch (const core::ConfigError& e) {
    fmt::print(stderr, "wanlab: {}\n", e.what());
    return 2;
  }
  if (remote_api()) {
    // The controller --api names runs it: the scenario and the run folder are its paths
    // (relative ones under its working folder, --api-dir), the summary comes back in its
    // answers. The scenario is checked here first, from this host's copy of the project.
    RemoteLab remote;
    try {
      remote = find_remote_lab(std::nullopt);
    } catch (const std::exception& e) {
      fmt::print(stderr, "wanlab: {}\n", e.what());
      return 1;
    }
    const fs::path out =
        remote_path(a.out ? *a.out : (fs::path("bench-results") / (scenario.name + "-" + timestamp())).string());
    catch_interrupts();
    const auto outcome =
        run_on_lab(remote.lab, RunRequest{remote_path(a.scenario), out, a.connections, std::nullopt}, scenario, a.quiet);
    if (outcome.rc == 0)
      print_summary(outcome.summary, fmt::format("{}: {}", remote_api()->tcp, out.string()));
    else if (outcome.rc != 130)
      fmt::print(stderr, "wanlab: {}\n", outcome.error);
    return outcome.rc;
  }
  // A lab that is up is used through its API (a router-only lab's too); bringing one up needs more.
  if (!lab_running(topo.name) && !check_privileges("run")) return 1;
  const fs::path out = fs::absolute(a.out ? fs::path(*a.out) : fs::path("runs") / (scenario.name + "-" + timestamp()));
  LabUse lab;
  if (const int rc = acquire_lab(scenario, topo, a.backend, lab); rc != 0) return rc;

  catch_interrupts();
  RunRequest request{fs::absolute(a.scenario), out, a.connections, std::nullopt};
  const auto outcome = run_on_lab(lab.name, request, scenario, a.quiet);
  if (outcome.rc == 0) {
    print_summary(outcome.summary, out.string());
    make_run_links_plot(out);  // plots/links.svg; a plot that fails is reported, the run stands
  } else if (outcome.rc != 130)
    fmt::print(stderr, "wanlab: {}\n", outcome.error);
  release_lab(lab, a.keep_lab);
  return outcome.rc;
}

}  // namespace wanlab::cli
