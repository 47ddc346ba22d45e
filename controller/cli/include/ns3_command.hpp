#pragma once
// `wanlab bench --mode ns3` (alone or with lab and simulate): a scenario's variants run by
// the packet-level ns-3 reference executor (controller/ns3ref), written as the simulator's
// are: OUT/bench.json, OUT/bench.md and per variant a run folder with summary.json (backend
// "ns3"), links.csv (with the drops of each WAN link's queue), windows.csv (policies with
// windows) and scenario.json. Built only with ns-3 (WANLAB_HAVE_NS3); otherwise
// ns3_available() says why not.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_report.hpp"
#include "bench_runner.hpp"
#include "run_support.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/workload/scenario.hpp"

namespace wanlab::cli {

/// nullopt when this build has the ns-3 reference executor, else why not (one line).
std::optional<std::string> ns3_unavailable();

/// As simulate_variants(), in the ns-3 reference. A variant the reference cannot express
/// is skipped with its one-line reason (and `rc` set to 1). Throws std::runtime_error when
/// a file cannot be written or the build has no ns-3.
nlohmann::json ns3_variants(BenchSetup setup, double compute_jitter, int& rc);

}  // namespace wanlab::cli
