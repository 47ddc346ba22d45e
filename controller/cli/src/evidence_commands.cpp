// card.yaml and launch.sh in run folders; `wanlab analyze`; `wanlab import-trace`.
#include "evidence_commands.hpp"

#include <cmath>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "run_support.hpp"
#include "wanlab/core/diagnostics.hpp"
#include "wanlab/evidence/analyze.hpp"
#include "wanlab/evidence/chakra_import.hpp"
#include "wanlab/evidence/trace_import.hpp"
#include "wanlab/run/results.hpp"
#include "wanlab/sim/simulator.hpp"
#include "wanlab/workload/gpu.hpp"
#include "wanlab/workload/metrics.hpp"
#include "wanlab/workload/plan.hpp"
#include "wanlab/workload/scenario.hpp"

namespace wanlab::cli {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {
evidence::Invocation g_invocation;
std::string g_command;
}  // namespace

void set_invocation(int argc, char** argv, const std::string& command) {
  g_invocation.argv.assign(argv, argv + argc);
  std::error_code ec;
  g_invocation.cwd = fs::current_path(ec).string();
  g_command = command;
}

const evidence::Invocation& invocation() { return g_invocation; }
const std::string& invoked_command() { return g_command; }

void write_run_card(const fs::path& dir, evidence::CardInputs in) {
  in.invocation = g_invocation;
  if (in.command.empty()) in.command = g_command.empty() ? "run" : g_command;
  try {
    evidence::write_card(dir, in);
  } catch (const std::exception& e) {
    fmt::print(stderr, "warning: no card.yaml/launch.sh in {}: {}\n", dir.string(), e.what());
  }
}

void write_lab_run_card(const fs::path& dir, const json& summary) {
  try {
    const auto scenario = workload::load_scenario(dir / "scenario.json");
    const auto topo = core::load_topology(scenario.topology_path);
    const auto plan = workload::build_plan(scenario, topo);
    evidence::CardInputs in;
    in.plan = &plan;
    in.topology = &plan.topology;
    in.summary = summary;
    in.framework = "wanlab agents";
    if (g_command == "bench") in.variant = dir.filename().string();
    write_run_card(dir, in);
  } catch (const std::exception& e) {
    fmt::print(stderr, "warning: no card.yaml/launch.sh in {}: {}\n", dir.string(), e.what());
  }
}

int cmd_analyze(const AnalyzeArgs& a) {
  json report = {{"runs", json::array()}, {"comparisons", json::array()}, {"skipped", json::array()}};
  std::vector<json> runs;
  try {
    std::vector<std::string> skipped;
    std::vector<fs::path> folders;
    for (const auto& p : a.paths)
      for (auto& f : evidence::find_run_folders(p, &skipped)) folders.push_back(std::move(f));
    for (const auto& s : skipped) report["skipped"].push_back(s);
    if (folders.empty()) {
      fmt::print(stderr, "wanlab: analyze: no run folder (summary.json and timeline.json) under {}\n",
                 fmt::join(a.paths, ", "));
      return 2;
    }
    for (const auto& f : folders) runs.push_back(evidence::analyze_run(f));
  } catch (const evidence::EvidenceError& e) {
    fmt::print(stderr, "wanlab: analyze: {}\n", e.what());
    return 2;
  }
  // Comparisons among the runs of one scenario, in the order found (a bench's baseline first).
  std::vector<std::string> order;
  std::map<std::string, std::vector<json>> by_scenario;
  for (const auto& r : runs) {
    const auto s = r.value("scenario", std::string());
    if (!by_scenario.count(s)) order.push_back(s);
    by_scenario[s].push_back(r);
  }
  for (const auto& s : order)
    if (by_scenario[s].size() >= 2) {
      auto c = evidence::compare_runs(by_scenario[s]);
      c["scenario"] = s;
      report["comparisons"].push_back(std::move(c));
    }
  for (auto& r : runs) report["runs"].push_back(std::move(r));
  const auto md = evidence::analysis_markdown(report);
  if (a.out) {
    try {
      fs::create_directories(*a.out);
      write_text_file(fs::path(*a.out) / "analysis.json", report.dump(2) + "\n");
      write_text_file(fs::path(*a.out) / "analysis.md", md);
    } catch (const std::exception& e) {
      fmt::print(stderr, "wanlab: analyze: {}\n", e.what());
      return 1;
    }
  }
  fmt::print("{}", a.json ? report.dump(2) + "\n" : md);
  return 0;
}

int cmd_import_trace(const ImportTraceArgs& a) {
  core::Topology topo;
  try {
    topo = core::load_topology(a.topology);
  } catch (const core::ConfigError& e) {
    fmt::print(stderr, "wanlab: import-trace: {}\n", e.what());
    return 2;
  }
  double eff = 0;
  try {
    eff = workload::effective_flops(a.gpu, workload::Dtype::bf16, a.mfu);
  } catch (const std::exception& e) {
    fmt::print(stderr, "wanlab: import-trace: --gpu {}: {}\n", a.gpu, e.what());
    return 2;
  }
  evidence::ImportOptions options;
  options.effective_flops = eff;
  options.message_bytes = a.message_bytes;
  std::vector<fs::path> files(a.traces.begin(), a.traces.end());
  evidence::ImportedJob job;
  workload::Plan plan;
  try {
    job = !files.empty() && evidence::is_chakra_trace(files.front()) ? evidence::import_chakra_traces(files, options)
                                                                      : evidence::import_pytorch_traces(files, options);
    plan = evidence::replay_plan(job, topo, a.placement, eff, std::max(job.iterations, 1) + 1, 1);
  } catch (const evidence::EvidenceError& e) {
    fmt::print(stderr, "wanlab: import-trace: {}\n", e.what());
    return 2;
  }
  const fs::path out = fs::absolute(a.out ? fs::path(*a.out) : fs::path("imports") / ("import-" + timestamp()));
  try {
    fs::create_directories(out);
    write_text_file(out / "import.json", job.to_json().dump(2) + "\n");
  } catch (const std::exception& e) {
    fmt::print(stderr, "wanlab: import-trace: {}\n", e.what());
    return 1;
  }
  fmt::print("imported {} ranks ({}), {} iterations; measured iteration time {:.4f} s (the slowest rank's, mean)\n",
             job.programs.size(), job.source, job.iterations, job.measured_iteration_mean_s);
  for (const auto& n : job.notes) fmt::print("  note: {}\n", n);
  for (const auto& u : job.unsupported) fmt::print("  not imported: {}\n", u);
  if (a.no_simulate) {
    fmt::print("programs in {}\n", (out / "import.json").string());
    return 0;
  }
  const auto r = sim::simulate(plan);
  const auto reports = r.by_worker();
  std::vector<run::LinkSample> samples;
  for (const auto& l : r.wan)
    samples.push_back({static_cast<double>(r.end_ns()) / 1e9, l.src, l.dst,
                       static_cast<std::uint64_t>(std::llround(l.wire_bytes)),
                       static_cast<std::uint64_t>(std::llround(l.payload_bytes)), 0, 0});
  run::RunMeta meta;
  meta.run_id = "import-sim";
  meta.lab = topo.name;
  meta.backend = "simulate";
  meta.started_at = timestamp();
  for (const auto& l : topo.links) meta.rate_bps.push_back(l.params.rate.bps);
  auto summary = run::make_summary(plan, topo, reports, samples, meta);
  const double predicted = summary["iteration_time_s"].value("mean", 0.0);
  const double error = job.measured_iteration_mean_s > 0 ? predicted / job.measured_iteration_mean_s - 1 : 0.0;
  summary["import"] = {{"measured_iteration_s", job.measured_iteration_mean_s},
                       {"predicted_iteration_s", predicted},
                       {"error", error}};
  const fs::path folder = out / "sim";
  try {
    fs::create_directories(folder);
    write_text_file(folder / "summary.json", summary.dump(2) + "\n");
    write_text_file(folder / "timeline.json", workload::chrome_trace(plan, r.reports()).dump() + "\n");
    write_text_file(folder / "links.csv", run::links_csv(topo, samples));
  } catch (const std::exception& e) {
    fmt::print(stderr, "wanlab: import-trace: {}\n", e.what());
    return 1;
  }
  evidence::CardInputs card;
  card.command = "import";
  card.plan = &plan;
  card.topology = &plan.topology;
  card.summary = summary;
  card.framework = job.source + " (imported), replayed by the wanlab simulator";
  card.launched = a.traces;
  write_run_card(folder, card);
  fmt::print("simulated on {}: iteration time {:.4f} s, {:+.1f} % against the measured {:.4f} s; run folder {} "
             "(wanlab analyze it)\n",
             topo.name, predicted, 100 * error, job.measured_iteration_mean_s, folder.string());
  return 0;
}

}  // namespace wanlab::cli
