// What `run` and `bench` share: the lab, starting a run, following it.
#include "run_support.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <cmath>
#include <ctime>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "commands.hpp"
#include "evidence_commands.hpp"
#include "lab_lookup.hpp"
#include "wanlab/workload/baselines.hpp"
#include "wanlab/workload/plan.hpp"
#include "wanlab/api/server.hpp"
#include "wanlab/common/printable.hpp"
#include "wanlab/lab/state.hpp"

namespace wanlab::cli {
namespace {

namespace fs = std::filesystem;
volatile std::sig_atomic_t g_interrupted = 0;

}  // namespace

bool lab_running(const std::string& name) {
  if (!lab::read_state(name)) return false;
  try {
    return api::call(lab::socket_path(name), "GET", "/v1/status", {}, std::chrono::seconds(5)).status == 200;
  } catch (const std::exception&) {
    return false;
  }
}

void write_text_file(const fs::path& file, const std::string& text) {
  std::ofstream f(file, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) throw std::runtime_error(fmt::format("cannot write {}: {}", file.string(), std::strerror(errno)));
}

std::string timestamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

run::RunMeta executor_meta(const std::string& run_id, const std::string& backend, const core::Topology& topo,
                           const workload::Scenario& scen, const std::string& scenario_file) {
  run::RunMeta meta;
  meta.run_id = run_id;
  meta.lab = topo.name;
  meta.backend = backend;
  meta.started_at = timestamp();
  meta.scale = scen.scale;
  meta.scenario_file = scenario_file;
  for (const auto& l : topo.links)
    meta.rate_bps.push_back(static_cast<std::uint64_t>(std::llround(static_cast<double>(l.params.rate.bps) * scen.scale)));
  return meta;
}

int acquire_lab(const workload::Scenario& scenario, const core::Topology& topo, const std::string& backend,
                LabUse& lab) {
  lab = LabUse{topo.name, false};
  if (!lab_running(topo.name)) {
    fmt::print("lab {} is not up: bringing it up from {}\n", topo.name, scenario.topology_path.string());
    UpArgs up;
    up.file = scenario.topology_path.string();
    up.backend = backend;
    if (const int rc = cmd_up(up); rc != 0) return rc;
    lab.brought_up = true;
    return 0;
  }
  // A lab of that name built from another topology would run the scenario on the wrong DCs.
  const auto state = lab::read_state(topo.name);
  const auto running =
      core::parse_topology(state->topology, state->topology_file, fs::path(state->topology_file).parent_path());
  if (!core::same_dcs(running, topo)) {
    fmt::print(stderr,
               "wanlab: lab {} is up with other DCs or nodes ({}) than the scenario's topology {}; take it down "
               "(wanlab down {}) or use a scenario for it\n",
               topo.name, state->topology_file, scenario.topology_path.string(), topo.name);
    return 1;
  }
  // Same DCs, other links (another file of the same name, a `link set`): the run measures
  // the lab's links, not the scenario's, so say which differ.
  if (const auto differences = core::topology_differences(running, topo); !differences.empty()) {
    fmt::print(stderr,
               "warning: lab {} (brought up from {}) differs from the scenario's topology {}; the run uses the lab's "
               "links as they are:\n",
               topo.name, state->topology_file, scenario.topology_path.string());
    for (const auto& d : differences) fmt::print(stderr, "  {}\n", d);
  }
  fmt::print("using lab {} (already up)\n", topo.name);
  return 0;
}

void release_lab(const LabUse& lab, bool keep) {
  if (lab.brought_up && !keep) cmd_down(lab.name);
}

void catch_interrupts() {
  std::signal(SIGINT, [](int) { g_interrupted = 1; });
  std::signal(SIGTERM, [](int) { g_interrupted = 1; });
}

bool interrupted() {
  return g_interrupted != 0;
}

RunOutcome run_on_lab(const std::string& lab_name, const RunRequest& request, const workload::Scenario& scenario,
                      bool quiet) {
  RunOutcome o;
  // The request is JSON, whose strings are UTF-8: a path with other bytes is named, escaped.
  for (const auto& [what, path] : {std::pair{"the scenario's path", &request.scenario}, {"the results folder", &request.out}})
    if (!valid_utf8(path->string())) {
      o.rc = 2;
      o.error = fmt::format("{} '{}' is not valid UTF-8, which the controller's API (JSON) cannot carry; rename it",
                            what, printable(path->string(), 200));
      return o;
    }
  // Through --api the controller's answers carry the summary (its files stay with it).
  const auto endpoint = remote_api() ? *remote_api() : api::Endpoint{lab::socket_path(lab_name), {}, {}};
  nlohmann::json body = {{"scenario", request.scenario.string()}, {"out", request.out.string()}};
  if (request.connections) body["connections"] = *request.connections;
  if (request.policy) body["policy"] = *request.policy;
  api::Response r;
  try {
    r = api::call(endpoint, "POST", "/v1/runs", body.dump());
  } catch (const std::exception& e) {
    o.error = fmt::format("the controller of lab {} did not answer: {}", lab_name, e.what());
    return o;
  }
  if (r.status >= 400) {
    o.error = r.body.at("error").value("message", r.body.dump());
    o.rc = r.status == 400 ? 2 : 1;
    return o;
  }
  o.id = r.body.at("run").get<std::string>();
  fmt::print("run {}: scenario {} on lab {}: {} GPUs on {} nodes, {} iterations ({} warm-up), results in {}\n", o.id,
             scenario.name, lab_name, r.body.value("workers", 0), r.body.value("nodes", 0), scenario.iterations,
             scenario.warmup, request.out.string());
  std::fflush(stdout);

  std::string last_line;
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    if (interrupted()) {
      fmt::print(stderr, "interrupted: aborting run {}\n", o.id);
      try {
        api::call(endpoint, "DELETE", "/v1/runs/" + o.id, {}, std::chrono::seconds(10));
      } catch (const std::exception&) {
      }
      o.rc = 130;
      o.error = "interrupted";
      return o;
    }
    nlohmann::json st;
    try {
      const auto s = api::call(endpoint, "GET", "/v1/runs/" + o.id, {}, std::chrono::seconds(10));
      if (s.status != 200) throw std::runtime_error(s.body.dump());
      st = s.body;
    } catch (const std::exception& e) {
      o.error = fmt::format("lost the controller of lab {}: {}", lab_name, e.what());
      return o;
    }
    const auto phase = st.value("phase", std::string{});
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto line = phase == "running" ? fmt::format("  {:6.1f} s  running: iteration {}/{} done", elapsed,
                                                       st.value("iterations_done", 0), scenario.iterations)
                                         : fmt::format("  {:6.1f} s  {}", elapsed, phase);
    if (!quiet && line.substr(10) != (last_line.size() > 10 ? last_line.substr(10) : "")) {
      fmt::print("{}\n", line);
      std::fflush(stdout);
      last_line = line;
    }
    if (phase == "done" && remote_api()) {
      if (!st.contains("summary") || !st["summary"].is_object()) {
        o.error = fmt::format("run {} is done, but {} sent no summary", o.id, endpoint.describe());
        return o;
      }
      o.summary = st["summary"];
      o.rc = 0;
      return o;
    }
    if (phase == "done") {
      std::ifstream f(request.out / "summary.json");
      try {
        o.summary = nlohmann::json::parse(f);
        o.rc = 0;
        write_lab_run_card(request.out, o.summary);
      } catch (const std::exception& e) {
        o.error = fmt::format("run done, but {}/summary.json is unreadable: {}", request.out.string(), e.what());
      }
      return o;
    }
    if (phase == "failed") {
      o.error = fmt::format("run {} failed: {}", o.id, st.value("error", std::string{"?"}));
      return o;
    }
  }
}

std::string config_reasons(const core::ConfigError& e) {
  std::string out;
  for (const auto& d : e.diagnostics()) out += (out.empty() ? "" : "; ") + d.reason;
  return out;
}

bool usable_results_folder(const std::filesystem::path& out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(out, ec)) return true;
  if (!fs::is_directory(out, ec)) return false;
  return fs::is_empty(out, ec) || fs::exists(out / "bench.json", ec) || fs::exists(out / "crosscheck.json", ec);
}

PlacementScenarios dp_across_dcs_variant(const workload::Scenario& scenario, const core::Topology& topo,
                                         std::vector<bench::Variant>& variants, nlohmann::json& skipped,
                                         const std::string& verb) {
  PlacementScenarios dp_across;
  for (auto it = variants.begin(); it != variants.end();) {
    const bool named = bench::is_named_baseline(it->placement);
    if (it->placement != bench::kDpAcrossDcs && !named) {
      ++it;
      continue;
    }
    try {
      auto scen = named ? workload::baseline_scenario(it->placement, scenario, topo)
                        : workload::dp_across_dcs_placement(scenario, topo);
      (void)workload::build_plan(scen, topo);
      dp_across[it->placement] = std::move(scen);
      ++it;
    } catch (const core::ConfigError& e) {
      fmt::print("not {} {}: lab {} cannot host it: {}\n", verb, it->name, topo.name, config_reasons(e));
      skipped.push_back(
          {{"name", it->name}, {"reason", fmt::format("lab {} cannot host it: {}", topo.name, config_reasons(e))}});
      it = variants.erase(it);
    }
  }
  return dp_across;
}

}  // namespace wanlab::cli
