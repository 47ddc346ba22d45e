// card.yaml and launch.sh in run folders.
#include "evidence_commands.hpp"

#include <fmt/format.h>

#include "wanlab/core/diagnostics.hpp"
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

}

}  // namespace wanlab::cli
