// compose: the docker-compose file of a lab (compose/compose.hpp, docs/docker.md).
#include <algorithm>
#include <filesystem>
#include <fmt/format.h>

#include "commands.hpp"
#include "wanlab/compose/compose.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/workload/scenario.hpp"

namespace wanlab::cli {
namespace {

namespace fs = std::filesystem;

// `path` as a path inside `project`, which must be under `folder` of it (e.g. "topologies");
// nullopt and one line on stderr otherwise.
std::optional<std::string> in_project(const fs::path& project, const fs::path& path, const std::string& folder,
                                      const std::string& what) {
  std::error_code ec;
  const auto abs_project = fs::weakly_canonical(project, ec);
  const auto abs_path = fs::weakly_canonical(path, ec);
  const auto rel = abs_path.lexically_relative(abs_project);
  const auto parent = rel.parent_path().generic_string();
  if (rel.empty() || parent != folder) {
    fmt::print(stderr,
               "wanlab: compose: {} {} is not in {}/{}/: the containers see the project's topologies/, traces/ and "
               "bench/scenarios/ folders only (project folder {}; --project DIR to change it)\n",
               what, path.string(), project.string(), folder, abs_project.string());
    return std::nullopt;
  }
  return rel.generic_string();
}

}  // namespace

int cmd_compose(const ComposeArgs& a, const std::string& command_line) {
  core::Topology topo;
  try {
    topo = core::load_topology(a.topology);
  } catch (const core::ConfigError& e) {
    fmt::print(stderr, "wanlab: {}\n", e.what());
    return 2;
  }
  compose::ComposeOptions o;
  o.command = command_line;
  o.results = a.results;
  o.bench = !a.no_bench;
  o.monitoring = a.monitoring;
  const auto topology = in_project(a.project, a.topology, "topologies", "topology");
  if (!topology) return 2;
  o.topology = *topology;
  for (const auto& l : topo.links) {
    if (!l.trace) continue;
    const auto trace = in_project(a.project, *l.trace, "traces", fmt::format("the trace of {} ({})", l.json_path,
                                                                             topo.source_file));
    if (!trace) return 2;
    if (std::find(o.traces.begin(), o.traces.end(), *trace) == o.traces.end()) o.traces.push_back(*trace);
  }
  if (!a.hosts.empty() && !a.swarm) {
    fmt::print(stderr, "wanlab: compose: --host places services of a swarm stack: add --swarm\n");
    return 2;
  }
  for (const auto& h : a.hosts) {
    const auto eq = h.find('=');
    if (eq == std::string::npos || eq == 0) {
      fmt::print(stderr, "wanlab: compose: --host {}: expected DC=HOST or controller=HOST\n", h);
      return 2;
    }
    o.hosts[h.substr(0, eq)] = h.substr(eq + 1);
  }
  o.project = a.project;
  if (a.api_port && !a.swarm) {
    fmt::print(stderr, "wanlab: compose: --api-port publishes a swarm stack's control API: add --swarm\n");
    return 2;
  }
  if (a.api_port) o.api_port = *a.api_port;
  if (a.scenario) {
    try {
      const auto scenario = workload::load_scenario(*a.scenario);
      std::error_code ec;
      if (!fs::equivalent(scenario.topology_path, a.topology, ec)) {
        fmt::print(stderr, "wanlab: compose: scenario {} runs on topology {}, not on {}\n", *a.scenario,
                   scenario.topology_path.string(), a.topology);
        return 2;
      }
    } catch (const core::ConfigError& e) {
      fmt::print(stderr, "wanlab: {}\n", e.what());
      return 2;
    }
    o.scenario = in_project(a.project, *a.scenario, "bench/scenarios", "scenario");
    if (!o.scenario) return 2;
  }
  try {
    fmt::print("{}", a.swarm ? compose::stack_file(topo, o) : compose::compose_file(topo, o));
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "wanlab: compose: {}\n", e.what());
    return 2;
  }
  return 0;
}

}  // namespace wanlab::cli
