// card.yaml and launch.sh in run folders; `wanlab analyze`; `wanlab import-trace`.
#include "evidence_commands.hpp"

#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "run_support.hpp"
#include "wanlab/core/diagnostics.hpp"
#include "wanlab/evidence/analyze.hpp"
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

}

}  // namespace wanlab::cli
