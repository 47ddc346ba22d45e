#pragma once
// The pure part of `wanlab bench`: which variants a bench runs and what they are called,
// the ratios against the baseline, and the markdown table of bench.json. No I/O.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace wanlab::cli::bench {

/// Placements a variant runs with: the Atlas rule (a scenario without `placement`), the
/// scenario's own `placement`, or the "DP across DCs" baseline
/// (workload::dp_across_dcs_placement).
inline constexpr const char* kAtlasRule = "atlas-rule";
inline constexpr const char* kScenarioPlacement = "scenario";
inline constexpr const char* kDpAcrossDcs = "dp-across-dcs";
/// The named baselines (workload::baseline_scenario, docs/baselines.md) are placements too:
/// each variant of one is named after it ("stock", "stock-flat", "varuna"), policy fair, 1
/// connection.
bool is_named_baseline(const std::string& placement);
/// "stock,varuna" -> {"stock", "varuna"} ("all": every one), trimmed, duplicates dropped.
/// Throws std::invalid_argument naming an unknown baseline and the known ones.
std::vector<std::string> parse_baselines(const std::string& text);

struct Variant {
  std::string name;  // also its folder: "fair-k1", "atlas-k4", "fair-k4-dp-across-dcs"
  std::string policy;
  int connections = 1;
  std::string placement = kAtlasRule;
  /// A scenario with a prefill load run without it: what training alone does.
  bool training_only = false;
  bool operator==(const Variant&) const = default;
};

inline constexpr const char* kTrainingOnlySuffix = "-training-only";

/// Scenarios with a prefill load: before each variant (the "DP across DCs" and named baselines aside)
/// its twin without the load, named NAME-training-only, so each has its training slowdown.
std::vector<Variant> add_training_only_twins(const std::vector<Variant>& variants);

/// The order in which round `round` (1-based) of `rounds` runs `n` variants: as listed in odd
/// rounds, reversed in even ones (A B, B A, A B, ...), so that a steady drift of the machine's
/// speed over a bench falls on both sides of every pair alike and cancels out of the paired
/// means over an even number of rounds. One round: as listed.
std::vector<std::size_t> round_order(std::size_t n, int round, int rounds);

/// Iteration time with the prefill load over without it, - 1 (summary.json's
/// training_slowdown); null when either is missing or zero.
nlohmann::json training_slowdown(const nlohmann::json& with_load, const nlohmann::json& without);

/// "fair,atlas" -> {"fair", "atlas"}: trimmed, empty items dropped, duplicates dropped
/// (first kept). Throws std::invalid_argument for a name that could not name a folder
/// ([a-z0-9][a-z0-9_-]*, at most 32 characters) or an empty list.
std::vector<std::string> parse_policies(const std::string& text);
/// parse_policies, then every name checked against the arbiter's policies (bench and
/// simulate refuse an unknown one before anything runs). Throws std::invalid_argument
/// naming every unknown policy and the known ones.
std::vector<std::string> parse_known_policies(const std::string& text);

/// "1,4" -> {1, 4}: sorted, duplicates dropped. Throws std::invalid_argument for anything
/// but integers in 1..64, or an empty list.
std::vector<int> parse_connections(const std::string& text);

/// The default connections list: 1 and the scenario's, sorted, duplicates dropped.
std::vector<int> default_connections(int scenario_connections);

/// "POLICY-kCONNECTIONS", with "-dp-across-dcs" for that placement; a named baseline's name.
std::string variant_name(const std::string& policy, int connections, const std::string& placement = kAtlasRule);

/// Every policy x every connections value (placement `scenario_placement`: kAtlasRule or
/// kScenarioPlacement), policies in the order given and connections ascending, then (if
/// `placement_baseline`) "DP across DCs" with policy fair and the largest connections
/// value. The baseline (fair, smallest connections value) comes first, and is added when
/// the policies leave fair out.
/// Then one variant per named baseline in `baselines`, in that order.
std::vector<Variant> expand_variants(const std::vector<std::string>& policies, const std::vector<int>& connections,
                                     bool placement_baseline, const std::string& scenario_placement = kAtlasRule,
                                     const std::vector<std::string>& baselines = {});

/// The baseline's name for these connections: fair with the smallest value.
std::string baseline_name(const std::vector<int>& connections);

/// The number at a JSON pointer ("/iteration_time_s/mean") of a summary; nullopt when it
/// is missing or not a number.
std::optional<double> number(const nlohmann::json& j, const char* pointer);

/// `v` times `factor` in fmt's `format` ("{:.3f}"); "n/a" when `v` is not a number.
std::string fixed(const nlohmann::json& v, const char* format, double factor = 1);

/// Mean WAN utilization over the directed links that carried payload (summary.json's
/// "wan" entries with payload_bytes > 0); 0 when none did.
double wan_utilization(const nlohmann::json& summary);

/// {iteration_time_speedup: baseline mean / this mean, gpu_utilization, bubble_fraction,
/// wan_utilization: this / baseline}, from two summary.json objects. A ratio whose
/// denominator is 0 or missing is null (so all are null against an empty baseline).
nlohmann::json ratios(const nlohmann::json& summary, const nlohmann::json& baseline);

/// Repeated runs (`wanlab bench --repeat N`): round r runs every variant once, in order, so
/// a slow drift of the machine's load reaches all variants alike. Mean, sample standard
/// deviation, 95 % confidence half-width (Student t) and range of one variant's per-run mean
/// iteration times; ci95 is null below two runs.
nlohmann::json run_stats(const std::vector<double>& values);

/// The speedup of `variant` over `reference` from runs paired by round (reference_r /
/// variant_r, rounds where either is missing left out): {speedup: mean of the reference's
/// runs over mean of the variant's, ratio_mean, ci95: [low, high] of the mean per-round
/// ratio (Student t; null below two pairs), pairs}. Null when no round has both.
nlohmann::json paired_speedup(const std::vector<std::optional<double>>& reference,
                              const std::vector<std::optional<double>>& variant);

/// bench.json's variants after repeated runs (entries with a "runs" array, one object per
/// round with that run's iteration_time_s, null for a round it did not run): each such entry
/// gets "repeat": {iteration_time_s: run_stats of its runs, speedup: paired_speedup over the
/// baseline, and for a policy other than fair vs_fair: paired_speedup over fair with the
/// same connections and placement, with its name as "reference"; with a prefill load,
/// training_slowdown: {mean of the rounds' slowdowns (each against the twin run just before
/// it), ci95: [low, high] (Student t; null below two), pairs} and gpu_utilization: run_stats
/// of the rounds' means}. "summary" and "ratios" stay those of the first run (its folder is
/// the variant's).
void add_repeat_ratios(nlohmann::json& variants, const std::string& baseline);

/// A run's engine figures for bench.json's `runs` entries (summary.json `engine`: its
/// scheduling, lateness share over 1 ms and p99, ring drops, and the degraded verdict);
/// null where the run had no engine block.
nlohmann::json run_engine(const nlohmann::json& summary);

/// The runs of bench.json's variants whose emulation was degraded (summary.json
/// engine.degraded, in the variant's summary or its `runs` entries): each
/// {"variant", "folder", "reasons"}.
nlohmann::json degraded_runs(const nlohmann::json& variants);

/// bench.md: a line on what was run, the table (one row per variant; "(degraded)" after the
/// name of a variant with a degraded run, and those runs listed below it), the skipped
/// variants with their reasons, and what the baseline, scale and backend are.
std::string markdown(const nlohmann::json& bench);

/// The simulator's knobs a sensitivity run varies (bench.json `sensitivity.knobs`): each
/// variant's `sensitivity` object holds its mean iteration time under each, "default" first.
inline constexpr const char* kSensitivityKnobs[] = {"default", "step/4", "shared", "fifo", "jitter x10"};

/// bench.md's "Model sensitivity" section (empty when no variant has a `sensitivity`
/// object): per variant its mean iteration time under each knob, how far the knobs move it
/// from the default (largest |t / default - 1|), and whether its verdict against the
/// baseline (faster or slower) holds under every knob (each knob's baseline against the
/// variant under the same knob).
std::string sensitivity_markdown(const nlohmann::json& bench);

/// The simulator against the lab (`wanlab bench --mode both`): per variant that both ran,
/// {name, lab_iteration_s, sim_iteration_s, error (sim / lab - 1), lab_gpu_utilization,
/// sim_gpu_utilization}, and max_abs_error over them (null when none), from the two
/// bench.json objects. Variants only one side ran are listed in `unmatched`.
nlohmann::json crosscheck(const nlohmann::json& lab, const nlohmann::json& sim);

/// crosscheck.md: the table of crosscheck(), one row per variant, and the largest error.
std::string crosscheck_markdown(const nlohmann::json& check);

}  // namespace wanlab::cli::bench

namespace wanlab::cli::bench {

/// Executors a `--mode` list names: lab, simulate, ns3 ("both": lab and simulate), in that
/// order, each once. Throws std::invalid_argument naming an unknown one or an empty list.
std::vector<std::string> parse_modes(const std::string& mode);

/// Several executors' bench.json objects (by executor: "lab", "simulate", "ns3") side by
/// side (`wanlab bench --mode simulate,ns3` and the like): per variant that any ran,
/// {name, policy, connections, iteration_s {executor: s}, reference, error {executor:
/// s / reference's - 1}}, the reference being ns3 where it ran the variant, else the lab;
/// per executor its atlas/fair ratios (atlas-kN / fair-kN iteration time, per N both ran)
/// and its largest absolute error.
nlohmann::json crosscheck_executors(const std::map<std::string, nlohmann::json>& benches);

/// crosscheck.md of crosscheck_executors(): the table and each executor's atlas/fair ratios.
std::string crosscheck_executors_markdown(const nlohmann::json& check);

}  // namespace wanlab::cli::bench
