#pragma once
// One loop over a bench's variants for every executor: the lab (`bench --mode lab`), the
// simulator (`simulate`, `bench --mode simulate`) and the ns-3 reference (`bench --mode
// ns3`). The runner owns what they share: --repeat's rounds (each variant once per round,
// in bench::round_order), the training-only twins of a scenario with a prefill load and
// their slowdowns, the folders (NAME, then NAME-runR), skipped variants, ratios against the
// baseline and bench.json / bench.md. An executor runs one variant into one folder and says
// what its bench.json adds.
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_report.hpp"
#include "run_support.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/workload/scenario.hpp"

namespace wanlab::cli {

/// What one run of one variant gave.
struct VariantOutcome {
  int rc = 0;                 // 0 done, 130 interrupted, otherwise failed
  nlohmann::json summary;     // done: the run's summary.json, as written into its folder
  std::string error;          // failed: why, one line
  bool reported = false;      // failed: the executor has printed why already
  bool give_up = false;       // failed: not again in later rounds
  nlohmann::json entry = nlohmann::json::object();  // done: more fields for the variant's bench.json entry
  nlohmann::json row = nlohmann::json::object();    // done: more fields for its row under "runs" (--repeat)
};

/// A finished run with its summary.
inline VariantOutcome finished_run(nlohmann::json summary) {
  VariantOutcome o;
  o.summary = std::move(summary);
  return o;
}
/// A failed run (`rc` 130: interrupted).
inline VariantOutcome failed_run(std::string error, int rc = 1) {
  VariantOutcome o;
  o.rc = rc;
  o.error = std::move(error);
  return o;
}

/// Runs single variants for the runner.
class BenchExecutor {
 public:
  virtual ~BenchExecutor() = default;
  /// How a failed run reads after its tag: "not run", "not simulated".
  virtual std::string failed() const = 0;
  /// Whether the variants of a scenario with a prefill load get training-only twins.
  virtual bool twins() const { return true; }
  /// Runs `v` on `scenario` (its placement's, or the training-only one; the variant's policy
  /// and connections still to be applied) into `folder`, which is removed beforehand.
  /// `tag` starts the lines it prints.
  virtual VariantOutcome run(const bench::Variant& v, const workload::Scenario& scenario,
                             const std::filesystem::path& folder, const std::string& tag) = 0;
  /// After a failure: whether nothing more can run (the lab's controller was lost).
  virtual bool lost() { return false; }
  /// Adds this executor's fields to bench.json (backend and the like).
  virtual void describe(nlohmann::json& bench) const = 0;
  /// After bench.json and bench.md are written (`rc`: the runner's so far): plots, the lab's
  /// release and the like.
  virtual void finish(const std::filesystem::path& out, const nlohmann::json& bench, int rc) {
    (void)out, (void)bench, (void)rc;
  }
};

/// What the runner runs: the variants of one scenario, `rounds` times each.
struct BenchSetup {
  const workload::Scenario* scenario = nullptr;
  std::string scenario_file;  // absolute
  const core::Topology* topology = nullptr;
  std::vector<bench::Variant> variants;  // without the twins (the runner adds them)
  const PlacementScenarios* dp_across = nullptr;  // the scenarios of placements that need one
  nlohmann::json skipped = nlohmann::json::array();
  std::vector<std::string> policies;
  std::vector<int> connections;
  int rounds = 1;
  std::filesystem::path out;  // created
  std::string command = "bench";  // names write errors: "wanlab: bench: ..."
};

/// Runs every variant (and twin) of `setup` `rounds` times through `executor`: run 1 into
/// OUT/NAME, run r into OUT/NAME-runR. Writes OUT/bench.json and OUT/bench.md and returns
/// bench.json's object; `rc`: 0, 1 when a variant failed or a file could not be written,
/// 130 when interrupted.
nlohmann::json run_bench(BenchExecutor& executor, const BenchSetup& setup, int& rc);

}  // namespace wanlab::cli
