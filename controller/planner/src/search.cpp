#include "wanlab/planner/search.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <functional>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include "wanlab/arbiter/arbiter.hpp"
#include "wanlab/core/address_plan.hpp"
#include "wanlab/core/diagnostics.hpp"
#include "wanlab/core/json_fields.hpp"
#include "wanlab/planner/memory.hpp"
#include "wanlab/workload/cost.hpp"
#include "wanlab/workload/gpu.hpp"
#include "wanlab/workload/metrics.hpp"
#include "wanlab/workload/placement.hpp"
#include "wanlab/workload/plan.hpp"

namespace wanlab::planner {
namespace {

using workload::Parallelism;
using workload::Schedule;

constexpr int kMaxStages = 32;
constexpr int kMaxMicroBatches = 1 << 16;
constexpr int kMicroBatchSizes[] = {1, 2, 4};
// The schedules searched, with their model chunks per GPU.
struct ScheduleChoice {
  Schedule schedule;
  int virtual_stages;
};
constexpr ScheduleChoice kSchedules[] = {{Schedule::one_f_one_b, 1},
                                         {Schedule::gpipe, 1},
                                         {Schedule::zb_h1, 1},
                                         {Schedule::interleaved_1f1b, 2},
                                         {Schedule::interleaved_1f1b, 4}};

// The nodes a DC offering `gpus` free GPUs gives a plan: whole nodes, at most what the lab's
// address plan holds, so every plan's topology file loads.
int offered_nodes(const core::Dc& dc, int gpus) {
  return dc.gpus_per_node == 0 ? 0 : std::min(gpus / dc.gpus_per_node, core::kMaxNodesPerDc);
}

// Replicas of `tp` GPUs (each inside one node) such a DC holds.
int replica_slots(const core::Dc& dc, int gpus, int tp) {
  if (dc.gpus_per_node < tp) return 0;
  return offered_nodes(dc, gpus) * (dc.gpus_per_node / tp);
}

// Stages per DC of `chain` for `pp` stages of `dp` replicas: every DC at least one, none
// over its room; the DCs with most room take the extra stages. Empty when they do not fit.
std::vector<int> split_stages(const std::vector<int>& slots, int pp, int dp) {
  std::vector<int> room;
  int total = 0;
  for (int s : slots) {
    room.push_back(s / dp);
    if (room.back() < 1) return {};
    total += room.back();
  }
  if (total < pp || static_cast<int>(slots.size()) > pp) return {};
  std::vector<int> stages(slots.size(), 1);
  int left = pp - static_cast<int>(slots.size());
  std::vector<std::size_t> order(slots.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return room[a] > room[b]; });
  for (auto i : order) {
    const int add = std::min(left, room[i] - 1);
    stages[i] += add;
    left -= add;
  }
  return stages;
}

// The largest dp at which `pp` stages fit the chain (0: none).
int max_dp(const std::vector<int>& slots, int pp) {
  int lo = 0, hi = *std::min_element(slots.begin(), slots.end());
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (!split_stages(slots, pp, mid).empty())
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

double link_rtt_s(const core::Topology& topo, std::size_t a, std::size_t b) {
  return std::chrono::duration<double>(topo.find_link(a, b)->params.delay + topo.find_link(b, a)->params.delay)
      .count();
}

// What the closed-form estimate needs of each stage of one (pp, tp, micro-batch size,
// split): its forward and backward per micro-batch and its optimizer step, in FLOPs, and
// its gradient buffer.
struct StageWork {
  double fb = 0, opt = 0, grad_bytes = 0;
};

// The micro-batches whose schedule decides a stage's memory peak: a 1F1B stage holds at
// most pp of them, ZB-H1 and interleaved 1F1B reach their peak within 4 pp (a multiple
// of pp, as interleaving needs), GPipe holds them all. Larger counts share the entry.
int memory_micro_batches(Schedule sched, int pp, int m) {
  switch (sched) {
    case Schedule::gpipe:
      return m;
    case Schedule::one_f_one_b:
      return std::min(m, pp);
    case Schedule::zb_h1:
    case Schedule::interleaved_1f1b:
      return std::min(m, 4 * pp);
  }
  return m;
}

// The pipeline's bubble in units of the slowest stage's forward and backward: pp - 1 for
// GPipe and 1F1B, (pp - 1) / v interleaved, about a third of that for ZB-H1 (its weight
// passes fill two of the three thirds of a backward's idle time).
double bubble(Schedule sched, int pp, int v) {
  switch (sched) {
    case Schedule::interleaved_1f1b:
      return static_cast<double>(pp - 1) / v;
    case Schedule::zb_h1:
      return static_cast<double>(pp - 1) / 3;
    default:
      return pp - 1;
  }
}

class Estimator {
 public:
  Estimator(const workload::Scenario& s, const core::Topology& topo) : s_(s), topo_(topo) {}

  // Each stage's work for `layers` (empty: the even split), cached by the split.
  const std::vector<StageWork>& work(int pp, int tp, int mbs, const std::vector<int>& layers) {
    auto [it, fresh] = work_.try_emplace({{pp, tp, mbs}, layers});
    if (fresh)
      for (const auto& c : workload::stage_costs(s_.model, Parallelism{pp, 1, tp}, mbs, layers))
        it->second.push_back({c.forward_flops + c.backward_flops, c.optimizer_flops,
                              static_cast<double>(c.gradient_bytes_per_gpu)});
    return it->second;
  }

  // A small number for the effective FLOP/s of each stage of a layout (one entry when
  // they are all the same), so the caches below key on it without copying it.
  int speeds_id(const std::vector<double>& speeds) {
    auto [it, fresh] = speeds_.try_emplace(speeds, static_cast<int>(speeds_.size()));
    if (fresh) speed_list_.push_back(speeds);
    return it->second;
  }

  struct Split {
    std::vector<int> layers;
    const std::vector<StageWork>* work = nullptr;
  };

  // balanced_layers() for a stage layout of speeds `sid`, cached.
  const Split& balanced(int pp, int tp, int mbs, Schedule sched, int v, int m, int sid) {
    const int mm = memory_micro_batches(sched, pp, m);
    auto [it, fresh] = balanced_.try_emplace({pp, tp, mbs, static_cast<int>(sched), v, mm, sid});
    if (fresh) {
      workload::Scenario s = s_;
      s.parallelism = {pp, 1, tp};
      s.micro_batch_size = mbs;
      s.schedule = sched;
      s.virtual_stages = v;
      s.micro_batches = mm;
      s.layers_per_stage.clear();
      // One speed stands for every stage (one GPU kind).
      const auto& speeds = speed_list_.at(static_cast<std::size_t>(sid));
      it->second.layers = balanced_layers(
          s, speeds.size() == 1 ? std::vector<double>(static_cast<std::size_t>(pp), speeds[0]) : speeds);
      it->second.work = &work(pp, tp, mbs, it->second.layers);
    }
    return it->second;
  }

  // memory_use() of the even split (split -1) or of balanced(..., sid = split).
  const MemoryUse& memory(int pp, int tp, int mbs, Schedule sched, int v, int m, int split) {
    const int mm = memory_micro_batches(sched, pp, m);
    auto [it, fresh] = memory_.try_emplace({pp, tp, mbs, static_cast<int>(sched), v, mm, split});
    if (fresh)
      it->second = memory_use(s_, Parallelism{pp, 1, tp}, sched, mm, mbs,
                              split < 0 ? std::vector<int>{} : balanced(pp, tp, mbs, sched, v, m, split).layers, v);
    return it->second;
  }

  double speed(std::size_t dc) {
    auto [it, fresh] = speed_.try_emplace(dc);
    if (fresh) it->second = workload::effective_flops(topo_.dcs[dc].gpu, s_.model.dtype, s_.mfu);
    return it->second;
  }

  double estimate(const Candidate& c) { return estimate(c, work(c.par.pp, c.par.tp, c.micro_batch_size, c.layers)); }

  double estimate(const Candidate& c, const std::vector<StageWork>& w) {
    double slowest = 0, opt = 0, grad = 0;
    std::size_t st = 0;
    for (std::size_t i = 0; i < c.chain.size(); ++i) {
      const double f = speed(c.chain[i]);
      for (int k = 0; k < c.stages[i] && st < w.size(); ++k, ++st) {
        slowest = std::max(slowest, w[st].fb / f);
        opt = std::max(opt, w[st].opt / f);
        grad = std::max(grad, w[st].grad_bytes);
      }
    }
    const int v = std::max(1, c.virtual_stages);
    const double pipeline = (c.micro_batches + bubble(c.schedule, c.par.pp, v)) * slowest + opt;
    const double act = static_cast<double>(workload::activation_bytes(s_.model, c.micro_batch_size)) * s_.scale *
                       workload::kWireOverhead;
    const double per_pass = act * c.par.dp * c.micro_batches * 8;  // bits each way per boundary per model chunk
    const double window_bits = workload::run_tcp_window(s_) * 8;
    // Model chunks crossing each directed DC pair: every chunk crosses each DC boundary of
    // the chain (interleaved: v of them) and, interleaved, wraps from the last DC to the
    // first v - 1 times. A chain has at most 8 DCs, so at most 16 directed pairs.
    struct Crossing {
      std::size_t a, b;
      double passes;
    };
    std::array<Crossing, 18> pairs{};
    std::size_t n = 0;
    double latency = 0;
    const auto cross = [&](std::size_t a, std::size_t b, double passes) {
      latency += passes * link_rtt_s(topo_, a, b);
      for (auto [x, y] : {std::pair{a, b}, std::pair{b, a}}) {
        std::size_t i = 0;
        while (i < n && !(pairs[i].a == x && pairs[i].b == y)) ++i;
        if (i == n) pairs[n++] = {x, y, 0};
        pairs[i].passes += passes;
      }
    };
    for (std::size_t i = 0; i + 1 < c.chain.size(); ++i) cross(c.chain[i], c.chain[i + 1], v);
    if (v > 1 && c.chain.size() > 1) cross(c.chain.back(), c.chain.front(), v - 1);
    double wan = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto* link = topo_.find_link(pairs[i].a, pairs[i].b);
      const double rate = static_cast<double>(link->params.rate.bps) * s_.scale;
      const double rtt = link_rtt_s(topo_, pairs[i].a, pairs[i].b);
      const double window_cap =
          rtt > 0 ? static_cast<double>(c.par.dp) * c.par.tp * c.connections * window_bits / rtt : rate;
      wan = std::max(wan, pairs[i].passes * per_pass / std::max(1.0, std::min(rate, window_cap)));
    }
    double allreduce = 0;
    if (c.par.dp > 1 && topo_.lan.rate.bps > 0) {
      const double dp = c.par.dp;
      allreduce = 2 * (dp - 1) / dp * grad * workload::run_lan_scale(s_) * 8 /
                      (static_cast<double>(topo_.lan.rate.bps) * s_.scale) +
                  2 * (dp - 1) * std::chrono::duration<double>(topo_.lan.delay).count();
    }
    return std::max(pipeline, wan) + latency + allreduce;
  }

 private:
  using Key = std::tuple<int, int, int, int, int, int, int>;
  const workload::Scenario& s_;
  const core::Topology& topo_;
  std::map<std::pair<std::array<int, 3>, std::vector<int>>, std::vector<StageWork>> work_;
  std::map<std::vector<double>, int> speeds_;
  std::vector<std::vector<double>> speed_list_;
  std::map<Key, Split> balanced_;
  std::map<Key, MemoryUse> memory_;
  std::map<std::size_t, double> speed_;
};

int micro_batches_for(long batch, int dp, int mbs) {
  const long per = static_cast<long>(dp) * mbs;
  return static_cast<int>(std::min<long>((batch + per - 1) / per, kMaxMicroBatches + 1L));
}

// Every ordering of every non-empty subset of the offered DCs whose neighbours are linked
// both ways.
std::vector<std::vector<std::size_t>> dc_chains(const core::Topology& topo, const std::vector<DcOffer>& dcs) {
  std::vector<std::vector<std::size_t>> out;
  const std::size_t n = dcs.size();
  for (unsigned mask = 1; mask < (1u << n); ++mask) {
    std::vector<std::size_t> set;
    for (std::size_t i = 0; i < n; ++i)
      if (mask & (1u << i)) set.push_back(i);
    do {
      bool linked = true;
      for (std::size_t i = 0; i + 1 < set.size() && linked; ++i)
        linked = topo.find_link(dcs[set[i]].dc, dcs[set[i + 1]].dc) && topo.find_link(dcs[set[i + 1]].dc, dcs[set[i]].dc);
      if (linked) out.push_back(set);  // indices into dcs
    } while (std::next_permutation(set.begin(), set.end()));
  }
  return out;
}

std::vector<int> tp_choices(const workload::Scenario& s, const core::Topology& topo, const std::vector<DcOffer>& dcs) {
  int largest = 0;
  for (const auto& o : dcs) largest = std::max(largest, topo.dcs[o.dc].gpus_per_node);
  std::vector<int> out;
  for (int tp = 1; tp <= largest; tp *= 2)
    if (s.model.heads % tp == 0 && s.model.kv_heads % tp == 0) out.push_back(tp);
  return out;
}

std::string candidate_key(const Candidate& c) {
  std::string k;
  for (std::size_t i = 0; i < c.chain.size(); ++i) k += fmt::format("{}:{},", c.chain[i], c.stages[i]);
  return fmt::format("{}{}x{}x{} {} {}x{} {} {} {}", k, c.par.pp, c.par.dp, c.par.tp, c.layers_text(), c.micro_batches,
                     c.micro_batch_size, c.schedule_name(), c.connections, c.policy);
}

// The busiest directed WAN link's wire bytes over what it could carry in the run.
double busiest_link(const core::Topology& topo, const sim::SimResult& r, double scale) {
  const double t = static_cast<double>(r.end_ns()) / 1e9;
  double busiest = 0;
  for (std::size_t i = 0; i < r.wan.size() && i < topo.links.size(); ++i) {
    const double cap = static_cast<double>(topo.links[i].params.rate.bps) * scale / 8 * t;
    if (cap > 0) busiest = std::max(busiest, r.wan[i].wire_bytes / cap);
  }
  return busiest;
}

// Runs the candidate in the simulator; its iteration time (mean after warm-up), or none
// when the simulator refuses it.
std::optional<double> predict(const workload::Scenario& base, const core::Topology& topo, Candidate& c,
                              const sim::SimOptions& options, bool fast) {
  auto scen = candidate_scenario(base, topo, c, "plan", base.topology_path);
  if (fast) {
    scen.iterations = 1;
    scen.warmup = 0;
  }
  const auto ctopo = candidate_topology(topo, c);
  try {
    const auto plan = workload::build_plan(scen, ctopo);
    const auto r = sim::simulate(plan, options);
    const auto summary = workload::summarize(plan, r.by_worker());
    const double t = summary.at("iteration_time_s").at("mean").get<double>();
    c.gpu_utilization = summary.at("gpu_utilization").at("mean").get<double>();
    c.wan_bytes = static_cast<double>(plan.wan_bytes_total());
    c.busiest_link_utilization = busiest_link(ctopo, r, scen.scale);
    c.tokens = static_cast<double>(c.par.dp) * c.micro_batches * c.micro_batch_size * base.model.seq_len;
    return t;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

std::string Candidate::dc_set(const core::Topology& topo) const {
  std::string out;
  for (auto dc : chain) out += (out.empty() ? "" : "+") + topo.dcs.at(dc).name;
  return out;
}

std::string Candidate::describe(const core::Topology& topo) const {
  std::string stages_s;
  for (std::size_t i = 0; i < chain.size(); ++i)
    stages_s += fmt::format("{}{} {}", i ? ", " : "", topo.dcs.at(chain[i]).name, stages[i]);
  return fmt::format("{} (stages {}), pp {} dp {} tp {}, layers {} {}, {} x {} micro-batches, {}, {} x{}", dc_set(topo),
                     stages_s, par.pp, par.dp, par.tp, layers_text(), split_name(), micro_batches, micro_batch_size,
                     schedule_name(), policy, connections);
}

std::string Candidate::layers_text() const {
  std::string out;
  for (std::size_t i = 0; i < layers.size();) {
    std::size_t j = i;
    while (j < layers.size() && layers[j] == layers[i]) ++j;
    out += fmt::format("{}{}", out.empty() ? "" : "+", layers[i]);
    if (j - i > 1) out += fmt::format("x{}", j - i);
    i = j;
  }
  return out;
}

std::string Candidate::schedule_name() const {
  return schedule == Schedule::interleaved_1f1b ? fmt::format("interleaved-1f1b v{}", virtual_stages)
                                                : workload::to_string(schedule);
}

namespace {

// One search (search() below): its inputs, its clock and what it found so far, phase by
// phase. The members are named as the phases' code names them.
class Search {
 public:
  Search(const workload::Scenario& scenario_, const core::Topology& topo_, const SearchOptions& o_)
      : scenario(scenario_),
        topo(topo_),
        o(o_),
        clock(o.clock ? o.clock : [t0 = std::chrono::steady_clock::now()] {
          return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }),
        start(clock()),
        est(scenario, topo) {}

  // After search() checked the options: the batch, the GPU counts and the policies.
  void size_batch() {
    const auto& sp = scenario.parallelism;
    result.batch = o.batch.value_or(static_cast<long>(scenario.micro_batches) * scenario.micro_batch_size *
                                    std::max(1L, o.gpus.hi / (static_cast<long>(sp.pp) * sp.tp)));
    if (result.batch < 1) throw PlanError(fmt::format("--batch {}: give at least 1 sequence", result.batch));
    counts = gpu_counts(o.gpus);
    policies = o.policies.empty() ? arbiter::policy_names() : o.policies;
  }

  // Atlas's greedy rule at each GPU count.
  void greedy() {
    const auto& sp = scenario.parallelism;
    // Atlas's greedy rule at each GPU count: the scenario's split grown to the count, placed
    // by workload::place_workers on the offered DCs (whole nodes).
    core::Topology offered = topo;
    for (auto& dc : offered.dcs) dc.nodes = 0;
    for (const auto& off : o.dcs) offered.dcs[off.dc].nodes = offered_nodes(topo.dcs[off.dc], off.gpus);
    for (long n : counts) {
      Candidate g;
      g.greedy = true;
      g.gpu_limit = n;
      g.par = {sp.pp, static_cast<int>(n / (static_cast<long>(sp.pp) * sp.tp)), sp.tp};
      if (g.par.dp < 1) continue;
      g.micro_batch_size = scenario.micro_batch_size;
      g.micro_batches = micro_batches_for(result.batch, g.par.dp, g.micro_batch_size);
      if (g.micro_batches > kMaxMicroBatches) continue;
      g.schedule = scenario.schedule;
      g.virtual_stages = scenario.virtual_stages;
      g.balanced = static_cast<int>(scenario.layers_per_stage.size()) == g.par.pp;
      g.layers = g.balanced ? scenario.layers_per_stage : workload::split_layers(scenario.model.layers, g.par.pp);
      if (g.schedule == Schedule::interleaved_1f1b && g.micro_batches % g.par.pp != 0)
        g.micro_batches += g.par.pp - g.micro_batches % g.par.pp;
      g.policy = scenario.policy;
      workload::Scenario s = scenario;
      s.parallelism = g.par;
      s.placement.clear();
      std::vector<workload::WorkerPlacement> workers;
      try {
        workers = workload::place_workers(s, offered);
      } catch (const core::ConfigError&) {
        continue;  // the rule cannot place this many GPUs on these DCs
      }
      for (int st = 0; st < g.par.pp; ++st) {
        const auto dc = workers[static_cast<std::size_t>(workload::worker_id(g.par, st, 0, 0))].dc;
        if (g.chain.empty() || g.chain.back() != dc) {
          g.chain.push_back(dc);
          g.stages.push_back(0);
        }
        ++g.stages.back();
      }
      g.memory_bytes = memory_use(scenario, g.par, g.schedule, memory_micro_batches(g.schedule, g.par.pp, g.micro_batches),
                                  g.micro_batch_size, g.balanced ? g.layers : std::vector<int>{}, g.virtual_stages)
                           .peak_bytes;
      bool linked = true;
      for (std::size_t i = 0; i + 1 < g.chain.size(); ++i)
        linked = linked && topo.find_link(g.chain[i], g.chain[i + 1]) && topo.find_link(g.chain[i + 1], g.chain[i]);
      if (!linked) continue;
      g.estimate_s = est.estimate(g);
      result.greedy.push_back(g);
    }

  }

  // Phase 1, the estimates; false once they stopped at half the budget.
  bool estimate_all() {
    // The whole space, estimated; kept: the best per (DC set, GPU count) and the best overall.
    chains = dc_chains(topo, o.dcs);
    even_layers.assign(static_cast<std::size_t>(std::min(scenario.model.layers, kMaxStages)) + 1, {});
    for (std::size_t pp = 1; pp < even_layers.size(); ++pp)
      even_layers[pp] = workload::split_layers(scenario.model.layers, static_cast<int>(pp));
    tps = tp_choices(scenario, topo, o.dcs);
    smallest.peak_bytes = std::numeric_limits<double>::infinity();
    // The estimates stop at half the budget, keeping the best so far.
    const double estimate_until = 0.5 * o.budget_s;
    for (const auto& chain_idx : chains) {
      std::vector<std::size_t> chain;
      std::string set_key;
      {
        auto sorted = chain_idx;
        std::sort(sorted.begin(), sorted.end());
        for (auto i : sorted) set_key += topo.dcs[o.dcs[i].dc].name + "+";
      }
      for (auto i : chain_idx) chain.push_back(o.dcs[i].dc);
      // Interleaved chunks wrap from the chain's last DC to its first.
      const bool wraps = chain.size() < 2 ||
                         (topo.find_link(chain.back(), chain.front()) && topo.find_link(chain.front(), chain.back()));
      const int k = static_cast<int>(chain.size());
      for (int tp : tps) {
        std::vector<int> slots;
        for (auto i : chain_idx) slots.push_back(replica_slots(topo.dcs[o.dcs[i].dc], o.dcs[i].gpus, tp));
        if (*std::min_element(slots.begin(), slots.end()) < 1) continue;
        for (int pp = k; pp <= std::min(scenario.model.layers, kMaxStages); ++pp) {
          const int room = max_dp(slots, pp);
          if (room < 1) continue;
          for (long n : counts) {
            const int dp = static_cast<int>(std::min<long>(room, n / (static_cast<long>(pp) * tp)));
            if (dp < 1) continue;
            Candidate c;
            c.chain = chain;
            c.stages = split_stages(slots, pp, dp);
            c.par = {pp, dp, tp};
            c.connections = scenario.connections;
            c.policy = scenario.policy;
            c.gpu_limit = n;
            std::vector<double> speeds;
            for (std::size_t i = 0; i < chain.size(); ++i)
              speeds.insert(speeds.end(), static_cast<std::size_t>(c.stages[i]), est.speed(chain[i]));
            if (std::adjacent_find(speeds.begin(), speeds.end(), std::not_equal_to<>()) == speeds.end())
              speeds.resize(std::min<std::size_t>(speeds.size(), 1));  // one kind: a shorter key, the same split
            const int sid = est.speeds_id(speeds);
            for (int mbs : kMicroBatchSizes) {
              const int m0 = micro_batches_for(result.batch, dp, mbs);
              const auto& even_work = est.work(pp, tp, mbs, even_layers[static_cast<std::size_t>(pp)]);
              for (const auto& schedule_choice : kSchedules) {
                const auto [sched, v] = schedule_choice;
                int m = m0;
                // One stage: every schedule runs its micro-batches one after another; 1F1B holds least.
                if (pp == 1 && sched != Schedule::one_f_one_b) continue;
                if (sched == Schedule::interleaved_1f1b) {
                  // Chunks wrap from the last stage to the first; micro-batches run in groups of pp.
                  if (pp < 2 || scenario.model.layers / pp < v || (k > 1 && !wraps)) continue;
                  m = (m0 + pp - 1) / pp * pp;
                }
                if (m > kMaxMicroBatches) continue;
                const auto& even = even_layers[static_cast<std::size_t>(pp)];
                const auto& bal = est.balanced(pp, tp, mbs, sched, v, m, sid);
                for (bool balanced : {false, true}) {
                  if (balanced && bal.layers == even) continue;
                  if (elapsed() > estimate_until) return false;
                  ++result.space;
                  const auto& mem = est.memory(pp, tp, mbs, sched, v, m, balanced ? sid : -1);
                  if (mem.peak_bytes < smallest.peak_bytes) smallest = mem;
                  if (!mem.fits()) continue;
                  ++result.fit;
                  c.micro_batch_size = mbs;
                  c.micro_batches = m;
                  c.schedule = sched;
                  c.virtual_stages = v;
                  c.balanced = balanced;
                  ++fit_by_schedule[static_cast<std::size_t>(&schedule_choice - kSchedules)];
                  fit_balanced += balanced ? 1 : 0;
                  c.layers = balanced ? bal.layers : even;
                  c.memory_bytes = mem.peak_bytes;
                  c.estimate_s = est.estimate(c, balanced ? *bal.work : even_work);
                  auto [it, fresh] = per_set.try_emplace({set_key, n}, c);
                  if (!fresh && worse(c, it->second)) it->second = c;
                  if (best.size() < o.fast_extra) {
                    best.push_back(c);
                    std::push_heap(best.begin(), best.end(), worse);
                  } else if (!best.empty() && worse(c, best.front())) {
                    std::pop_heap(best.begin(), best.end(), worse);
                    best.back() = c;
                    std::push_heap(best.begin(), best.end(), worse);
                  }
                }
              }
            }
          }
        }
      }
      report("estimate", ++done_chains, chains.size(), nullptr);
    }
    return true;
  }

  // After phase 1: the counts by schedule and split; an error when nothing fits.
  void check_fit() {
    for (std::size_t i = 0; i < fit_by_schedule.size(); ++i) {
      Candidate named;
      named.schedule = kSchedules[i].schedule;
      named.virtual_stages = kSchedules[i].virtual_stages;
      result.fit_by_schedule[named.schedule_name()] = fit_by_schedule[i];
    }
    result.fit_by_split = {{"even", result.fit - fit_balanced}, {"balanced", fit_balanced}};
    if (result.fit == 0) {
      if (result.space == 0)
        throw PlanError(fmt::format("no split of {} on {} fits {} GPUs: every candidate needs more GPUs than the DCs "
                                    "offer (or than --gpus allows)",
                                    scenario.model.preset.empty() ? "the model" : scenario.model.preset, topo.name,
                                    o.gpus.hi));
      constexpr double gib = static_cast<double>(workload::kGiB);
      throw PlanError(fmt::format(
          "the model fits nowhere: its smallest split needs {:.1f} GiB per GPU (stage {}: {:.1f} GiB of weights, "
          "gradients and optimizer state, {:.1f} GiB of activations), more than {:.0f} GiB; offer more GPUs (--gpus, "
          "--dcs): more pipeline stages split the model finer",
          smallest.peak_bytes / gib, smallest.stage, smallest.state_bytes / gib, smallest.activation_bytes / gib,
          kGpuMemoryBytes / gib));
    }

  }

  // Phase 2.
  void fast_phase() {
    // Phase 2: the fast model: the greedy rule, the best estimates, those again with every
    // policy and number of connections, then the plot's points (best estimates first).
    std::sort_heap(best.begin(), best.end(), worse);
    std::vector<Candidate> points;
    for (auto& [key, c] : per_set) points.push_back(c);
    std::stable_sort(points.begin(), points.end(), worse);
    std::set<std::string> seen;
    const Candidate* best_fast = nullptr;
    const auto note_best = [&] {
      best_fast = nullptr;
      for (const auto& c : result.fast)
        if (!best_fast || *c.fast_s / c.sequences() < *best_fast->fast_s / best_fast->sequences()) best_fast = &c;
    };
    const double fast_until = 0.7 * o.budget_s;
    // Runs `list` in the fast model while the budget lasts; false once it ran out.
    const auto run_fast = [&](const std::vector<Candidate>& list) {
      for (std::size_t i = 0; i < list.size(); ++i) {
        if (!result.fast.empty() && elapsed() > fast_until) {
          result.budget_ran_out = true;
          return false;
        }
        if (!seen.insert(candidate_key(list[i])).second) continue;
        auto c = list[i];
        const double before = elapsed();
        if (auto t = predict(scenario, topo, c, o.fast, true)) {
          c.fast_s = t;
          result.fast.push_back(std::move(c));
          note_best();
        }
        if (result.fast.size() <= 1 && elapsed() > o.budget_s)
          throw PlanError(fmt::format("--budget {} s is too short for one candidate: the estimates took {:.2f} s and "
                                      "the first prediction {:.2f} s; give at least {:.0f} s",
                                      o.budget_s, before, elapsed() - before, std::ceil(elapsed() * 2)));
        report("fast", i + 1, list.size(), best_fast);
      }
      return true;
    };
    bool more = run_fast(result.greedy) && run_fast(best);
    if (more) {
      // Policies and connections matter only where the pipeline crosses the WAN.
      std::vector<Candidate> tops;
      for (const auto& c : result.fast)
        if (!c.greedy && c.chain.size() > 1) tops.push_back(c);
      std::sort(tops.begin(), tops.end(), by_fast);
      if (tops.size() > o.knob_structures) tops.resize(o.knob_structures);
      std::vector<Candidate> knobs;
      for (const auto& t : tops)
        for (const auto& p : policies)
          for (int k : o.connection_choices) {
            Candidate c = t;
            c.policy = p;
            c.connections = k;
            c.fast_s.reset();
            c.estimate_s = est.estimate(c);
            knobs.push_back(std::move(c));
          }
      more = run_fast(knobs);
    }
    if (more) run_fast(points);
    if (result.fast.empty())
      throw PlanError("the simulator refused every candidate it was given (see `wanlab simulate` on the scenario)");

  }

  // Phase 3.
  void default_phase() {
    // Phase 3: the default model on the best of the fast model's and on the greedy rule.
    std::vector<Candidate> order = result.fast;
    std::stable_sort(order.begin(), order.end(), by_fast);
    std::vector<Candidate> finals;
    std::set<std::string> taken;
    for (const auto& c : order) {
      if (finals.size() >= std::max<std::size_t>(o.top, 1)) break;
      if (taken.insert(candidate_key(c)).second) finals.push_back(c);
    }
    for (const auto& c : order)
      if (c.greedy && taken.insert(candidate_key(c)).second) finals.push_back(c);
    std::vector<Candidate> fast_only;
    const Candidate* best_full = nullptr;
    for (std::size_t i = 0; i < finals.size(); ++i) {
      auto c = finals[i];
      if (i > 0 && elapsed() > o.budget_s) {
        result.budget_ran_out = true;
        fast_only.push_back(std::move(c));
        continue;
      }
      if (auto t = predict(scenario, topo, c, o.full, false)) {
        c.full_s = t;
        result.ranked.push_back(std::move(c));
        best_full = nullptr;
        for (const auto& r : result.ranked)
          if (!best_full || by_full(r, *best_full)) best_full = &r;
      }
      report("default", i + 1, finals.size(), best_full);
    }
    std::stable_sort(result.ranked.begin(), result.ranked.end(), by_full);
    // What the budget left to the fast model alone follows, marked by its missing full_s.
    result.ranked.insert(result.ranked.end(), fast_only.begin(), fast_only.end());
  }

  double elapsed() const { return clock() - start; }

  const workload::Scenario& scenario;
  const core::Topology& topo;
  const SearchOptions& o;
  SearchResult result;

 private:
  static bool worse(const Candidate& a, const Candidate& b) {
    return a.estimate_s / a.sequences() < b.estimate_s / b.sequences();
  }
  static bool by_fast(const Candidate& a, const Candidate& b) {
    return *a.fast_s / a.sequences() < *b.fast_s / b.sequences();
  }
  static bool by_full(const Candidate& a, const Candidate& b) {
    return *a.full_s / a.sequences() < *b.full_s / b.sequences();
  }
  void report(const char* phase, std::size_t done, std::size_t total, const Candidate* best_so_far) const {
    if (o.progress) o.progress(Progress{phase, done, total, elapsed(), o.budget_s, best_so_far});
  }

  std::function<double()> clock;
  double start;
  std::vector<long> counts;
  std::vector<std::string> policies;
  Estimator est;
  // Phase 1's state, which phases 2 and 3 read.
  std::vector<std::vector<std::size_t>> chains;
  std::vector<std::vector<int>> even_layers;
  std::vector<int> tps;
  std::map<std::pair<std::string, long>, Candidate> per_set;  // (sorted DC set, count)
  std::vector<Candidate> best;                                // a heap by estimate, at most fast_extra
  std::array<std::size_t, std::size(kSchedules)> fit_by_schedule{};
  std::size_t fit_balanced = 0;
  MemoryUse smallest;
  std::size_t done_chains = 0;
};

}  // namespace

SearchResult search(const workload::Scenario& scenario, const core::Topology& topo, const SearchOptions& o) {
  Search s(scenario, topo, o);  // starts the clock
  if (!(o.budget_s > 0)) throw PlanError(fmt::format("--budget {}: give a positive number of seconds", o.budget_s));
  if (o.dcs.empty()) throw PlanError("no DC to plan on: the topology has none, or --dcs named none");
  if (o.dcs.size() > 8) throw PlanError(fmt::format("{} DCs: plan searches at most 8 at once (--dcs)", o.dcs.size()));

  s.size_batch();
  s.greedy();
  if (!s.estimate_all()) {
    s.result.budget_ran_out = true;
    if (s.result.fit == 0)
      throw PlanError(fmt::format("--budget {} s is too short for one candidate: the estimates ran {:.2f} s and none "
                                  "within memory was found yet; give at least {:.0f} s",
                                  o.budget_s, s.elapsed(), std::ceil(s.elapsed() * 4)));
  }
  s.check_fit();
  s.fast_phase();
  s.default_phase();
  s.result.elapsed_s = s.elapsed();
  return s.result;
}

}  // namespace wanlab::planner
