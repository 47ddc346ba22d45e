#include "wanlab/planner/search.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
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

constexpr long kMaxFreeGpus = 10'000'000;
constexpr int kMaxStages = 32;
constexpr int kMaxMicroBatches = 1 << 16;
constexpr int kMicroBatchSizes[] = {1, 2, 4};
constexpr Schedule kSchedules[] = {Schedule::one_f_one_b, Schedule::gpipe};

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

std::optional<long> whole_number(std::string_view s) {
  long v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return v;
}

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

// What the closed-form estimate needs of one (pp, tp, micro-batch size): the slowest
// stage's compute per micro-batch and optimizer step, in FLOPs, and the gradient buffer.
struct StageFlops {
  double fb = 0, opt = 0, grad_bytes = 0;
};

class Estimator {
 public:
  Estimator(const workload::Scenario& s, const core::Topology& topo) : s_(s), topo_(topo) {}

  const StageFlops& flops(int pp, int tp, int mbs) {
    auto [it, fresh] = flops_.try_emplace({pp, tp, mbs});
    if (fresh) {
      for (const auto& c : workload::stage_costs(s_.model, Parallelism{pp, 1, tp}, mbs)) {
        it->second.fb = std::max(it->second.fb, c.forward_flops + c.backward_flops);
        it->second.opt = std::max(it->second.opt, c.optimizer_flops);
        it->second.grad_bytes = std::max(it->second.grad_bytes, static_cast<double>(c.gradient_bytes_per_gpu));
      }
    }
    return it->second;
  }

  const MemoryUse& memory(int pp, int tp, int mbs, Schedule sched, int m) {
    // 1F1B keeps at most pp micro-batches in flight, so larger counts need no entry of their own.
    const int in_flight = sched == Schedule::gpipe ? m : std::min(m, pp);
    auto [it, fresh] = memory_.try_emplace({pp, tp, mbs, static_cast<int>(sched), in_flight});
    if (fresh) it->second = memory_use(s_, Parallelism{pp, 1, tp}, sched, in_flight, mbs);
    return it->second;
  }

  double estimate(const Candidate& c) {
    const auto& f = flops(c.par.pp, c.par.tp, c.micro_batch_size);
    double slowest = std::numeric_limits<double>::infinity();
    for (auto dc : c.chain)
      slowest = std::min(slowest, workload::effective_flops(topo_.dcs[dc].gpu, s_.model.dtype, s_.mfu));
    const double pipeline = (c.micro_batches + c.par.pp - 1) * f.fb / slowest + f.opt / slowest;
    const double act = static_cast<double>(workload::activation_bytes(s_.model, c.micro_batch_size)) * s_.scale *
                       workload::kWireOverhead;
    const double per_dir = act * c.par.dp * c.micro_batches * 8;  // bits each way per boundary
    const double window_bits = workload::run_tcp_window(s_) * 8;
    double wan = 0, latency = 0;
    for (std::size_t i = 0; i + 1 < c.chain.size(); ++i) {
      const auto a = c.chain[i], b = c.chain[i + 1];
      const double rtt = link_rtt_s(topo_, a, b);
      latency += rtt;
      for (auto [x, y] : {std::pair{a, b}, std::pair{b, a}}) {
        const double rate = static_cast<double>(topo_.find_link(x, y)->params.rate.bps) * s_.scale;
        const double window_cap =
            rtt > 0 ? static_cast<double>(c.par.dp) * c.par.tp * c.connections * window_bits / rtt : rate;
        wan = std::max(wan, per_dir / std::max(1.0, std::min(rate, window_cap)));
      }
    }
    double allreduce = 0;
    if (c.par.dp > 1 && topo_.lan.rate.bps > 0) {
      const double n = c.par.dp;
      allreduce = 2 * (n - 1) / n * f.grad_bytes * workload::run_lan_scale(s_) * 8 /
                      (static_cast<double>(topo_.lan.rate.bps) * s_.scale) +
                  2 * (n - 1) * std::chrono::duration<double>(topo_.lan.delay).count();
    }
    return std::max(pipeline, wan) + latency + allreduce;
  }

 private:
  const workload::Scenario& s_;
  const core::Topology& topo_;
  std::map<std::tuple<int, int, int>, StageFlops> flops_;
  std::map<std::tuple<int, int, int, int, int>, MemoryUse> memory_;
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
  return fmt::format("{}{}x{}x{} {}x{} {} {} {}", k, c.par.pp, c.par.dp, c.par.tp, c.micro_batches, c.micro_batch_size,
                     workload::to_string(c.schedule), c.connections, c.policy);
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
  return fmt::format("{} (stages {}), pp {} dp {} tp {}, {} x {} micro-batches, {}, {} x{}", dc_set(topo), stages_s,
                     par.pp, par.dp, par.tp, micro_batches, micro_batch_size, workload::to_string(schedule), policy,
                     connections);
}

std::vector<DcOffer> topology_offers(const core::Topology& topo, const nlohmann::json& doc) {
  std::vector<DcOffer> out;
  const auto* dcs = doc.is_object() && doc.contains("dcs") ? &doc.at("dcs") : nullptr;
  for (std::size_t i = 0; i < topo.dcs.size(); ++i) {
    int gpus = topo.dcs[i].nodes * topo.dcs[i].gpus_per_node;
    if (dcs && dcs->is_array() && i < dcs->size() && dcs->at(i).is_object() && dcs->at(i).contains("free_gpus") &&
        dcs->at(i).at("free_gpus").is_number_integer())
      gpus = dcs->at(i).at("free_gpus").get<int>();
    out.push_back({i, gpus});
  }
  return out;
}

std::vector<DcOffer> parse_dc_list(std::string_view list, const core::Topology& topo,
                                   const std::vector<DcOffer>& offers) {
  std::vector<std::string_view> names;
  for (const auto& dc : topo.dcs) names.push_back(dc.name);
  std::vector<DcOffer> out;
  std::size_t pos = 0;
  for (;;) {
    const auto comma = list.find(',', pos);
    const auto entry = trim(list.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos));
    if (entry.empty())
      throw std::invalid_argument(fmt::format("--dcs \"{}\": an empty entry; give DC names separated by commas, each "
                                              "optionally NAME:GPUS (e.g. use:2048,usw)",
                                              list));
    const auto colon = entry.find(':');
    const auto name = trim(entry.substr(0, colon));
    const auto dc = topo.dc_index(name);
    if (!dc)
      throw std::invalid_argument(fmt::format("--dcs: unknown DC \"{}\"{}; lab {} has {}", name,
                                              core::fields::did_you_mean(name, names), topo.name,
                                              core::fields::join(names)));
    for (const auto& o : out)
      if (o.dc == *dc) throw std::invalid_argument(fmt::format("--dcs: DC \"{}\" named twice", name));
    int gpus = topo.dcs[*dc].nodes * topo.dcs[*dc].gpus_per_node;
    for (const auto& o : offers)
      if (o.dc == *dc) gpus = o.gpus;
    if (colon != std::string_view::npos) {
      const auto count = trim(entry.substr(colon + 1));
      const auto v = whole_number(count);
      if (!v || *v < 0 || *v > kMaxFreeGpus)
        throw std::invalid_argument(fmt::format("--dcs: \"{}\": the free GPUs after ':' must be a whole number from "
                                                "0 to 10,000,000, not \"{}\"",
                                                entry, count));
      gpus = static_cast<int>(*v);
    }
    out.push_back({*dc, gpus});
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return out;
}

GpuRange parse_gpu_range(std::string_view text) {
  const auto bad = [&](std::string_view why) {
    return std::invalid_argument(fmt::format("--gpus \"{}\": {}", text, why));
  };
  const auto dash = text.find('-');
  const auto lo = whole_number(trim(text.substr(0, dash)));
  const auto hi = dash == std::string_view::npos ? lo : whole_number(trim(text.substr(dash + 1)));
  if (!lo || !hi) throw bad("give a number of GPUs (2560) or a range (1536-4096)");
  if (*lo < 1 || *hi > 1L << 16) throw bad("give GPU counts from 1 to 65,536");
  if (*lo > *hi) throw bad("the range's low end is above its high end");
  return {*lo, *hi};
}

std::vector<long> gpu_counts(const GpuRange& r) {
  std::set<long> counts{r.lo, r.hi};
  for (int i = 1; i <= 6; ++i) counts.insert(r.lo + (r.hi - r.lo) * i / 7);
  return {counts.begin(), counts.end()};
}

core::Topology candidate_topology(const core::Topology& topo, const Candidate& c) {
  core::Topology out = topo;
  for (std::size_t i = 0; i < c.chain.size(); ++i) {
    auto& dc = out.dcs.at(c.chain[i]);
    const int per_node = dc.gpus_per_node / c.par.tp;
    const int replicas = c.stages[i] * c.par.dp;
    dc.nodes = std::max(dc.nodes, (replicas + per_node - 1) / per_node);
  }
  return out;
}

workload::Scenario candidate_scenario(const workload::Scenario& base, const core::Topology& topo, const Candidate& c,
                                      const std::string& name, const std::filesystem::path& topology_file) {
  workload::Scenario s = base;
  s.name = name;
  s.description = fmt::format("{}{} (wanlab plan from {})", c.greedy ? "Atlas's greedy rule: " : "",
                              c.describe(topo), base.name);
  s.source_file = name;
  s.topology_path = topology_file;
  s.parallelism = c.par;
  s.micro_batch_size = c.micro_batch_size;
  s.micro_batches = c.micro_batches;
  s.schedule = c.schedule;
  s.connections = c.connections;
  s.policy = c.policy;
  s.prefill.reset();  // a training plan: the prefill load's nodes belong to the original lab
  s.placement.clear();
  for (std::size_t i = 0; i < c.chain.size(); ++i)
    for (int k = 0; k < c.stages[i]; ++k)
      s.placement.emplace_back(static_cast<std::size_t>(c.par.dp), topo.dcs.at(c.chain[i]).name);
  return s;
}

SearchResult search(const workload::Scenario& scenario, const core::Topology& topo, const SearchOptions& o) {
  const auto clock = o.clock ? o.clock : [t0 = std::chrono::steady_clock::now()] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const double start = clock();
  const auto elapsed = [&] { return clock() - start; };
  const auto report = [&](const char* phase, std::size_t done, std::size_t total, const Candidate* best) {
    if (o.progress) o.progress(Progress{phase, done, total, elapsed(), o.budget_s, best});
  };
  if (!(o.budget_s > 0)) throw PlanError(fmt::format("--budget {}: give a positive number of seconds", o.budget_s));
  if (o.dcs.empty()) throw PlanError("no DC to plan on: the topology has none, or --dcs named none");
  if (o.dcs.size() > 8) throw PlanError(fmt::format("{} DCs: plan searches at most 8 at once (--dcs)", o.dcs.size()));

  SearchResult result;
  const auto& sp = scenario.parallelism;
  result.batch = o.batch.value_or(static_cast<long>(scenario.micro_batches) * scenario.micro_batch_size *
                                  std::max(1L, o.gpus.hi / (static_cast<long>(sp.pp) * sp.tp)));
  if (result.batch < 1) throw PlanError(fmt::format("--batch {}: give at least 1 sequence", result.batch));
  const auto counts = gpu_counts(o.gpus);
  const auto policies = o.policies.empty() ? arbiter::policy_names() : o.policies;
  Estimator est(scenario, topo);

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
    g.connections = scenario.connections;
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
    g.memory_bytes = est.memory(g.par.pp, g.par.tp, g.micro_batch_size, g.schedule, g.micro_batches).peak_bytes;
    bool linked = true;
    for (std::size_t i = 0; i + 1 < g.chain.size(); ++i)
      linked = linked && topo.find_link(g.chain[i], g.chain[i + 1]) && topo.find_link(g.chain[i + 1], g.chain[i]);
    if (!linked) continue;
    g.estimate_s = est.estimate(g);
    result.greedy.push_back(g);
  }

  // Phase 1: the whole space, estimated; kept: the best per (DC set, GPU count) and the
  // best overall.
  const auto chains = dc_chains(topo, o.dcs);
  const auto tps = tp_choices(scenario, topo, o.dcs);
  std::map<std::pair<std::string, long>, Candidate> per_set;  // (sorted DC set, count)
  std::vector<Candidate> best;                                // a heap by estimate, at most fast_extra
  const auto worse = [](const Candidate& a, const Candidate& b) {
    return a.estimate_s / a.sequences() < b.estimate_s / b.sequences();
  };
  MemoryUse smallest;
  smallest.peak_bytes = std::numeric_limits<double>::infinity();
  std::size_t done_chains = 0;
  for (const auto& chain_idx : chains) {
    std::vector<std::size_t> chain;
    std::string set_key;
    {
      auto sorted = chain_idx;
      std::sort(sorted.begin(), sorted.end());
      for (auto i : sorted) set_key += topo.dcs[o.dcs[i].dc].name + "+";
    }
    for (auto i : chain_idx) chain.push_back(o.dcs[i].dc);
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
          for (int mbs : kMicroBatchSizes) {
            const int m = micro_batches_for(result.batch, dp, mbs);
            if (m > kMaxMicroBatches) continue;
            for (auto sched : kSchedules) {
              ++result.space;
              const auto& mem = est.memory(pp, tp, mbs, sched, m);
              if (mem.peak_bytes < smallest.peak_bytes) smallest = mem;
              if (!mem.fits()) continue;
              ++result.fit;
              c.micro_batch_size = mbs;
              c.micro_batches = m;
              c.schedule = sched;
              c.memory_bytes = mem.peak_bytes;
              c.estimate_s = est.estimate(c);
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
    report("estimate", ++done_chains, chains.size(), nullptr);
  }
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

  // Phase 2: the fast model: the greedy rule, the best estimates, those again with every
  // policy and number of connections, then the plot's points (best estimates first).
  std::sort_heap(best.begin(), best.end(), worse);
  std::vector<Candidate> points;
  for (auto& [key, c] : per_set) points.push_back(c);
  std::stable_sort(points.begin(), points.end(), worse);
  const auto by_fast = [](const Candidate& a, const Candidate& b) {
    return *a.fast_s / a.sequences() < *b.fast_s / b.sequences();
  };
  const auto by_full = [](const Candidate& a, const Candidate& b) {
    return *a.full_s / a.sequences() < *b.full_s / b.sequences();
  };
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
  result.elapsed_s = elapsed();
  return result;
}

}  // namespace wanlab::planner
