#pragma once
// `wanlab plan`: which DCs, how many GPUs and how to split a scenario's model over them, as
// a what-if search on the flow-level simulator. Pure: the simulator options and the clock
// come in as arguments, nothing is read or written.
//
// What a candidate is: a chain of DCs in pipeline order, each holding a run of consecutive
// stages (every replica of a stage in the stage's DC, a replica's TP GPUs in one node), a
// split PP x DP x TP, a micro-batch size and count, a schedule, TCP connections per WAN
// peer and a bandwidth policy. Layers are split evenly (workload::split_layers) or
// balanced: stage by stage so that the stages' compute times are as equal as the memory
// model lets them be (balanced_layers). Schedules: 1F1B, GPipe, ZB-H1 and interleaved
// 1F1B with 2 or 4 model chunks per GPU. The global batch (sequences per iteration) is held fixed, so
// candidates compare by iteration time: micro-batches = ceil(batch / (dp x micro-batch
// size)), and tokens per second follow from what each candidate actually runs.
//
// How it searches, cheapest first:
//   1. every candidate of the space (DC chains x pp x tp x micro-batch size x schedule x
//      layer split, for each GPU count of the range, dp as large as the count and the
//      chain's free GPUs allow) is checked by memory_use() and given a closed-form
//      estimate: the pipeline's compute, (micro-batches + bubble) x the slowest stage's
//      forward and backward (bubble: pp - 1; (pp - 1) / v interleaved; (pp - 1) / 3 ZB-H1), against
//      the busiest WAN boundary's bytes over its rate (or its connections' window / RTT),
//      plus the one-way delays along the chain, plus an all-reduce over a shaped LAN;
//   2. the simulator's fast model (SearchOptions::fast: max-min fair flows, no ACKs) runs,
//      in this order, Atlas's greedy rule at each GPU count, the best-estimated candidate
//      of each (DC set, GPU count) (the plot's points), then the best-estimated others;
//      the best few are tried again with every policy x connections;
//   3. the default model (SearchOptions::full) runs the best of those and the greedy rule,
//      and ranks them.
// The budget (seconds of wall time) cuts phase 1 at 50 % of it (keeping the best estimates
// so far; none within memory by then is an error), phase 2 at 70 % and phase 3 when it is
// spent, keeping what was predicted; phase 3 always predicts at least the best candidate.
#include <chrono>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "wanlab/core/topology.hpp"
#include "wanlab/sim/simulator.hpp"
#include "wanlab/workload/scenario.hpp"

namespace wanlab::planner {

/// A DC the search may use and the GPUs it has free there.
struct DcOffer {
  std::size_t dc = 0;  // index into Topology::dcs
  int gpus = 0;
  bool operator==(const DcOffer&) const = default;
};

/// Every DC of the topology with its free GPUs: the DC's `free_gpus` in the topology file
/// `doc` (core::parse_topology has checked it), else nodes x gpus_per_node. A topology
/// thus gives each DC its own count without a lab of that many nodes.
std::vector<DcOffer> topology_offers(const core::Topology& topo, const nlohmann::json& doc);
/// `--dcs`: comma-separated DC names, each optionally NAME:GPUS (its free GPUs, overriding
/// `offers`, the topology's), e.g. "use:2048,usw,euw:512". Throws std::invalid_argument
/// with one line naming the entry: an empty entry, an unknown DC (with the lab's DCs), a
/// DC named twice, a count that is not a whole number from 0 to 10,000,000.
std::vector<DcOffer> parse_dc_list(std::string_view list, const core::Topology& topo,
                                   const std::vector<DcOffer>& offers);

/// `--gpus`: N or LO-HI, the GPUs a plan may use at most. Throws std::invalid_argument.
struct GpuRange {
  long lo = 0, hi = 0;
  bool operator==(const GpuRange&) const = default;
};
GpuRange parse_gpu_range(std::string_view text);
/// The GPU counts a range is searched at: LO, HI and up to six evenly spaced between.
std::vector<long> gpu_counts(const GpuRange& range);

struct Candidate {
  std::vector<std::size_t> chain;  // DCs in pipeline order
  std::vector<int> stages;         // stages per DC of the chain
  workload::Parallelism par;
  int micro_batch_size = 1;
  int micro_batches = 1;
  workload::Schedule schedule = workload::Schedule::one_f_one_b;
  int virtual_stages = 1;   // model chunks per GPU (interleaved-1f1b: 2 or more)
  std::vector<int> layers;  // layers per stage (pp entries)
  bool balanced = false;    // layers from balanced_layers(), else the even split (workload::split_layers)
  int connections = 1;
  std::string policy = "fair";
  bool greedy = false;  // Atlas's greedy rule on these DCs
  long gpu_limit = 0;   // the GPU count of the range it was made for (it uses par.gpus() <= this)
  double memory_bytes = 0;  // memory_use() peak per GPU
  double estimate_s = 0;    // closed-form iteration time
  std::optional<double> fast_s;  // the fast model's iteration time
  std::optional<double> full_s;  // the default model's
  // From the last model that ran it:
  double gpu_utilization = 0;
  double wan_bytes = 0;             // payload per iteration over all WAN links
  double busiest_link_utilization = 0;  // the busiest directed WAN link's wire bytes / its capacity
  double tokens = 0;                // tokens per iteration (dp x micro-batches x size x seq_len)

  int gpus() const { return par.gpus(); }
  /// Sequences per iteration: at least the search's batch (micro-batches are rounded up),
  /// so candidates rank by seconds per sequence, predicted_s() / sequences().
  double sequences() const { return static_cast<double>(par.dp) * micro_batches * micro_batch_size; }
  /// The best prediction there is: the default model's, else the fast one's, else the estimate.
  double predicted_s() const { return full_s.value_or(fast_s.value_or(estimate_s)); }
  double tokens_per_s() const { return tokens / predicted_s(); }
  /// "use+usw": the DC set in chain order.
  std::string dc_set(const core::Topology& topo) const;
  /// "even" or "balanced".
  std::string split_name() const { return balanced ? "balanced" : "even"; }
  /// The layers per stage, runs of equal counts shortened: "17+16x3+15".
  std::string layers_text() const;
  /// e.g. "use+usw (stages use 3, usw 2), pp 5 dp 32 tp 8, layers 17+16x3+15 balanced,
  /// 16 x 1 micro-batches, interleaved-1f1b v2, fair x4".
  std::string describe(const core::Topology& topo) const;
  /// The schedule as printed: "1f1b", "zb-h1", "interleaved-1f1b v2".
  std::string schedule_name() const;
};

struct Progress {
  std::string phase;  // "estimate", "fast", "default"
  std::size_t done = 0, total = 0;
  double elapsed_s = 0, budget_s = 0;
  const Candidate* best = nullptr;  // best so far in this phase, if any
};

struct SearchOptions {
  GpuRange gpus;
  std::vector<DcOffer> dcs;            // the DCs to use (topology_offers() for all)
  std::optional<long> batch;           // sequences per iteration; none: the scenario's, grown to gpus.hi
  std::size_t top = 5;                 // candidates the default model ranks, at least (plus the greedy rule)
  double budget_s = 60;
  std::size_t fast_extra = 48;         // best-estimated candidates run in the fast model beyond the plot's points
  std::size_t knob_structures = 4;     // the best plans tried again with every policy x connections
  std::vector<int> connection_choices = {1, 4, 8};
  std::vector<std::string> policies;   // none: arbiter::policy_names()
  sim::SimOptions fast;                // the pruning model
  sim::SimOptions full;                // the default model
  std::function<double()> clock;       // seconds; none: steady_clock
  std::function<void(const Progress&)> progress;
};

/// Thrown for input the search cannot start from (one line, for exit status 2).
class PlanError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct SearchResult {
  std::vector<Candidate> ranked;    // predicted by the default model, fastest per sequence first
  std::vector<Candidate> fast;      // every candidate the fast model ran
  std::vector<Candidate> greedy;    // Atlas's greedy rule per GPU count (that it can place)
  std::size_t space = 0;            // candidates enumerated
  std::size_t fit = 0;              // of those, within memory
  std::map<std::string, std::size_t> fit_by_schedule;  // within memory, by Candidate::schedule_name()
  std::map<std::string, std::size_t> fit_by_split;     // within memory, "even" or "balanced"
  long batch = 0;                   // sequences per iteration
  bool budget_ran_out = false;
  double elapsed_s = 0;
};

/// Runs the search. Throws PlanError for a model that fits nowhere (with what the smallest
/// split needs), no DC to use, a GPU range no candidate fits, or a budget that ran out
/// before one candidate was predicted.
SearchResult search(const workload::Scenario& scenario, const core::Topology& topo, const SearchOptions& options);

/// Layers per stage that balance the stages' compute times: one layer at a time to the stage
/// whose forward and backward per micro-batch would end soonest (its FLOPs over
/// `stage_flops`, the effective FLOP/s of the stage's GPUs), among the stages whose memory
/// (linear in its layers, from memory_use's stage figures at the even split) stays within
/// kGpuMemoryBytes; when none does, to the one that stays lowest. Every stage gets a
/// layer; the LM head's and embedding's work counts. `base` gives the model, memory
/// settings, split (pp, tp), schedule, virtual stages, micro-batches and their size.
/// Requires model.layers >= pp (x virtual stages).
std::vector<int> balanced_layers(const workload::Scenario& base, const std::vector<double>& stage_flops);

/// The topology a candidate runs on: the original, each DC with at least the nodes the
/// candidate uses there (ceil(GPUs / gpus_per_node)).
core::Topology candidate_topology(const core::Topology& topo, const Candidate& c);
/// The candidate as a scenario with an explicit placement (`topology_path` set to
/// `topology_file`), accepted by run, bench and simulate.
workload::Scenario candidate_scenario(const workload::Scenario& base, const core::Topology& topo, const Candidate& c,
                                      const std::string& name, const std::filesystem::path& topology_file);

}  // namespace wanlab::planner
