// run: a scenario on its lab, from the command line.
#include "run_command.hpp"

#include <csignal>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "commands.hpp"
#include "wanlab/api/server.hpp"
#include "wanlab/core/diagnostics.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/lab/state.hpp"
#include "wanlab/workload/plan.hpp"
#include "wanlab/workload/scenario.hpp"

namespace wanlab::cli {
namespace {

namespace fs = std::filesystem;
volatile std::sig_atomic_t g_interrupted = 0;

std::string timestamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

// The lab's controller answers on its socket.
bool lab_running(const std::string& name) {
  if (!lab::read_state(name)) return false;
  try {
    return api::call(lab::socket_path(name), "GET", "/v1/status", {}, std::chrono::seconds(5)).status == 200;
  } catch (const std::exception&) {
    return false;
  }
}

double num(const nlohmann::json& j, const char* a, const char* b = nullptr) {
  const auto& v = b ? j.at(a).at(b) : j.at(a);
  return v.is_number() ? v.get<double>() : 0.0;
}

void print_summary(const nlohmann::json& s, const fs::path& out) {
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
  fmt::print("  results in {}/ (summary.json, timeline.json: open in https://ui.perfetto.dev, links.csv)\n",
             out.string());
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
  if (!check_privileges("run")) return 1;
  const fs::path out = fs::absolute(a.out ? fs::path(*a.out) : fs::path("runs") / (scenario.name + "-" + timestamp()));
  const auto& lab_name = topo.name;

  bool brought_up = false;
  if (!lab_running(lab_name)) {
    fmt::print("lab {} is not up: bringing it up from {}\n", lab_name, scenario.topology_path.string());
    UpArgs up;
    up.file = scenario.topology_path.string();
    up.backend = a.backend;
    if (const int rc = cmd_up(up); rc != 0) return rc;
    brought_up = true;
  } else {
    // A lab of that name built from another topology would run the scenario on the wrong DCs.
    const auto state = lab::read_state(lab_name);
    const auto running = core::parse_topology(state->topology, state->topology_file, fs::path(state->topology_file).parent_path());
    if (!core::same_dcs(running, topo)) {
      fmt::print(stderr,
                 "wanlab: lab {} is up with other DCs or nodes ({}) than the scenario's topology {}; take it down "
                 "(wanlab down {}) or use a scenario for it\n",
                 lab_name, state->topology_file, scenario.topology_path.string(), lab_name);
      return 1;
    }
    fmt::print("using lab {} (already up)\n", lab_name);
  }
  auto take_down = [&] {
    if (brought_up && !a.keep_lab) cmd_down(lab_name);
  };

  nlohmann::json body = {{"scenario", fs::absolute(a.scenario).string()}, {"out", out.string()}};
  if (a.connections) body["connections"] = *a.connections;
  api::Response r;
  try {
    r = api::call(lab::socket_path(lab_name), "POST", "/v1/runs", body.dump());
  } catch (const std::exception& e) {
    fmt::print(stderr, "wanlab: the controller of lab {} did not answer: {}\n", lab_name, e.what());
    take_down();
    return 1;
  }
  if (r.status >= 400) {
    fmt::print(stderr, "wanlab: {}\n", r.body.at("error").value("message", r.body.dump()));
    take_down();
    return r.status == 400 ? 2 : 1;
  }
  const auto id = r.body.at("run").get<std::string>();
  fmt::print("run {}: scenario {} on lab {}: {} GPUs on {} nodes, {} iterations ({} warm-up), results in {}\n", id,
             scenario.name, lab_name, r.body.value("workers", 0), r.body.value("nodes", 0), scenario.iterations,
             scenario.warmup, out.string());

  std::signal(SIGINT, [](int) { g_interrupted = 1; });
  std::signal(SIGTERM, [](int) { g_interrupted = 1; });
  std::string last_line;
  int rc = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    if (g_interrupted) {
      fmt::print(stderr, "interrupted: aborting run {}\n", id);
      try {
        api::call(lab::socket_path(lab_name), "DELETE", "/v1/runs/" + id, {}, std::chrono::seconds(10));
      } catch (const std::exception&) {
      }
      rc = 130;
      break;
    }
    nlohmann::json st;
    try {
      const auto s = api::call(lab::socket_path(lab_name), "GET", "/v1/runs/" + id, {}, std::chrono::seconds(10));
      if (s.status != 200) throw std::runtime_error(s.body.dump());
      st = s.body;
    } catch (const std::exception& e) {
      fmt::print(stderr, "wanlab: lost the controller of lab {}: {}\n", lab_name, e.what());
      rc = 1;
      break;
    }
    const auto phase = st.value("phase", std::string{});
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto line = phase == "running"
                          ? fmt::format("  {:6.1f} s  running: iteration {}/{} done", elapsed,
                                        st.value("iterations_done", 0), scenario.iterations)
                          : fmt::format("  {:6.1f} s  {}", elapsed, phase);
    if (!a.quiet && line.substr(10) != (last_line.size() > 10 ? last_line.substr(10) : "")) {
      fmt::print("{}\n", line);
      std::fflush(stdout);
      last_line = line;
    }
    if (phase == "done") {
      std::ifstream f(out / "summary.json");
      try {
        print_summary(nlohmann::json::parse(f), out);
      } catch (const std::exception& e) {
        fmt::print(stderr, "wanlab: run done, but {}/summary.json is unreadable: {}\n", out.string(), e.what());
        rc = 1;
      }
      break;
    }
    if (phase == "failed") {
      fmt::print(stderr, "wanlab: run {} failed: {}\n", id, st.value("error", std::string{"?"}));
      rc = 1;
      break;
    }
  }
  take_down();
  return rc;
}

}  // namespace wanlab::cli
