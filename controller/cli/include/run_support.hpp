#pragma once
// What `run` and `bench` share: finding or bringing up a scenario's lab, starting a run on
// it through the controller, following it to the end (progress lines, Ctrl-C aborts it).
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "bench_report.hpp"
#include "wanlab/core/diagnostics.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/run/results.hpp"
#include "wanlab/workload/scenario.hpp"

namespace wanlab::cli {

/// Local time as YYYYMMDD-HHMMSS, for default result folders.
std::string timestamp();

/// The summary metadata of a variant run by an executor without a lab (`simulate`, `ns3`):
/// `run_id`, the topology's name for the lab, `backend`, now, the scenario's scale and the
/// WAN link rates it scales.
run::RunMeta executor_meta(const std::string& run_id, const std::string& backend, const core::Topology& topo,
                           const workload::Scenario& scen, const std::string& scenario_file);

// Above this share of the machine's CPU time taken by the hypervisor during a run (summary
// `host_cpu.steal_fraction`), `run` and `bench` say that its timings are the host's as much
// as the lab's: a quiet host stays well below it, and runs under more steal are slower
// (bench/results/2026-11-26-bubbletea.md, "Figures that were code comments").
constexpr double kStealWarning = 0.02;

/// Writes `text` to `file` (replacing it); throws std::runtime_error with the reason.
void write_text_file(const std::filesystem::path& file, const std::string& text);

/// The lab's controller answers on its socket.
bool lab_running(const std::string& name);

/// A ConfigError's problems on one line, "; "-separated, without the "N problems found" header.
std::string config_reasons(const core::ConfigError& e);

/// The scenarios of the variants that run a modified scenario, by placement: the "DP across
/// DCs" placement baseline (bench::kDpAcrossDcs) and the named baselines
/// (workload::baseline_scenario).
using PlacementScenarios = std::map<std::string, workload::Scenario>;

/// The scenarios of the placement and named baselines among `variants` where the lab can
/// host them; a variant it cannot host is dropped, said with `verb` ("running",
/// "simulating") and recorded in `skipped` with the reason.
PlacementScenarios dp_across_dcs_variant(const workload::Scenario& scenario, const core::Topology& topo,
                                         std::vector<bench::Variant>& variants, nlohmann::json& skipped,
                                         const std::string& verb);

/// Whether OUT may receive a bench's or a simulation's results: new, empty, or an earlier
/// one's folder (with bench.json or crosscheck.json; its variants' folders are redone).
bool usable_results_folder(const std::filesystem::path& out);

/// The lab a command runs on, and whether the command brought it up.
struct LabUse {
  std::string name;
  bool brought_up = false;
};

/// Uses the scenario's lab if it is up (refusing one of that name with other DCs or nodes),
/// else brings it up from the scenario's topology with `backend`. Prints what it does.
/// Returns 0, or the exit status to give up with.
int acquire_lab(const workload::Scenario& scenario, const core::Topology& topo, const std::string& backend,
                LabUse& lab);
/// Takes the lab down if the command brought it up, unless `keep`.
void release_lab(const LabUse& lab, bool keep);

/// From here on, SIGINT and SIGTERM set a flag that follow_run() and interrupted() see.
void catch_interrupts();
bool interrupted();

struct RunRequest {
  std::filesystem::path scenario;  // absolute
  std::filesystem::path out;       // absolute
  std::optional<int> connections;
  std::optional<std::string> policy;
};

struct RunOutcome {
  /// 0 done (summary holds summary.json), 1 failed, 2 refused by the controller (bad
  /// scenario, policy or folder), 130 interrupted (the run was aborted).
  int rc = 1;
  std::string error;  // why, when rc != 0 (without a "wanlab: " prefix)
  std::string id;     // the run's id, once the controller accepted it
  nlohmann::json summary;
};

/// Starts a run on the lab (POST /v1/runs), prints one line when the controller accepts
/// it, then polls it until it ends: a progress line whenever its phase or iteration
/// changes (unless `quiet`), an abort (DELETE) when interrupted. Call catch_interrupts()
/// first for Ctrl-C to abort the run rather than kill the command.
RunOutcome run_on_lab(const std::string& lab, const RunRequest& request, const workload::Scenario& scenario,
                      bool quiet);

}  // namespace wanlab::cli
