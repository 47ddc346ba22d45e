// The named baselines (workload::baseline_scenario): the hierarchical all-reduce's rings,
// steps and bytes, Varuna's schedule, bench's variants of them; BubbleTea's feedback in the
// simulator; the provisioned-WAN topologies.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include "bench_report.hpp"
#include "test_workload_fixtures.hpp"
#include "wanlab/sim/prefill.hpp"
#include "wanlab/sim/simulator.hpp"
#include "wanlab/workload/baselines.hpp"
#include "wanlab/workload/plan.hpp"

using namespace wanlab;
using namespace wanlab::workload;
using namespace wanlab::workload::testing;
using Catch::Matchers::Contains;
using program::OpKind;

namespace {

Scenario shipped(const std::string& name) { return load_scenario(kSource + "/bench/scenarios/" + name); }

std::vector<program::Op> allreduces(const Plan& plan, int worker) {
  std::vector<program::Op> out;
  for (const auto& op : plan.programs.at(static_cast<std::size_t>(worker)).ops)
    if (op.kind == OpKind::allreduce) out.push_back(op);
  return out;
}

double mean_iteration_s(const std::vector<program::WorkerReport>& reports, int warmup) {
  double sum = 0;
  int n = 0;
  for (const auto& r : reports)
    for (std::size_t i = static_cast<std::size_t>(warmup); i < r.iterations.size(); ++i) {
      sum += static_cast<double>(r.iterations[i].end_ns - r.iterations[i].start_ns) / 1e9;
      ++n;
    }
  return n ? sum / n : 0;
}

}  // namespace

TEST_CASE("stock's hierarchical all-reduce: a ring inside each DC, then one per shard across DCs",
          "[unit][baselines][workload]") {
  // two-dc-1b: pp 2 x dp 4 x tp 4; DP across DCs puts replicas 0, 1 in use and 2, 3 in euw.
  const auto topo = shipped_topology("two-dc.json");
  const auto s = shipped("two-dc-1b.json");
  const auto stock = build_plan(baseline_scenario(kStock, s, topo), topo);
  const auto flat = build_plan(baseline_scenario(kStockFlat, s, topo), topo);
  const auto& par = s.parallelism;
  const auto grad = stock.stages[0].gradient_bytes_per_gpu;
  const auto id = [&](int dp, int tp) { return worker_id(par, 0, dp, tp); };

  // Flat: one ring of 4 over both DCs, 2(n-1) = 6 steps of grad/4.
  const auto f = allreduces(flat, id(0, 1));
  REQUIRE(f.size() == 1);
  CHECK(f[0].ring == std::vector<int>{id(0, 1), id(1, 1), id(2, 1), id(3, 1)});
  CHECK(f[0].bytes == scaled_bytes(grad, s.scale));

  // Hierarchical: inside use, the whole buffer between replicas 0 and 1 (reduce-scatter and
  // all-gather: 2(m-1) = 2 steps of grad/2, unscaled LAN bytes by lan_scale); across DCs,
  // replica 0 with replica 2 (shard 0) and 1 with 3 (shard 1) on grad/m = grad/2: 2(D-1) = 2 steps.
  for (int dp = 0; dp < 4; ++dp) {
    const auto h = allreduces(stock, id(dp, 1));
    REQUIRE(h.size() == 2);
    const int local = dp < 2 ? 0 : 2;
    CHECK(h[0].ring == std::vector<int>{id(local, 1), id(local + 1, 1)});
    CHECK(h[0].bytes == scaled_bytes(grad, run_lan_scale(s)));
    CHECK(h[1].ring == std::vector<int>{id(dp % 2, 1), id(dp % 2 + 2, 1)});
    CHECK(h[1].bytes == scaled_bytes((grad + 1) / 2, s.scale));
  }

  // WAN bytes per iteration, each direction: flat, 1 WAN hop x 6 steps x grad/4 = 1.5 grad;
  // hierarchical, 2 shard rings x 1 WAN hop x 2 steps x grad/4 = grad (2 (D-1)/D of it).
  const auto wan_of = [](const Plan& p) {
    std::map<std::pair<std::size_t, std::size_t>, std::uint64_t> m;
    for (const auto& l : p.wan_bytes_per_iteration) m[{l.src, l.dst}] = l.bytes;
    return m;
  };
  const auto fw = wan_of(flat), hw = wan_of(stock);
  REQUIRE(fw.size() == 2);
  REQUIRE(hw.size() == 2);
  // Per stage (their gradients differ: embedding, LM head), 4 TP ranks each.
  double flat_bytes = 0, stock_bytes = 0;
  for (const auto& st : stock.stages) {
    const auto g = st.gradient_bytes_per_gpu;
    flat_bytes += 4 * 6 * static_cast<double>(program::ring_chunk_bytes(scaled_bytes(g, s.scale), 4));
    stock_bytes += 4 * 2 * 2 * static_cast<double>(program::ring_chunk_bytes(scaled_bytes((g + 1) / 2, s.scale), 2));
  }
  for (const auto& [pair, bytes] : fw) {
    CHECK(static_cast<double>(bytes) == flat_bytes);
    CHECK(static_cast<double>(hw.at(pair)) == stock_bytes);
  }
  CHECK(static_cast<double>(hw.begin()->second) / static_cast<double>(fw.begin()->second) ==
        Approx(2.0 / 3.0).epsilon(0.01));

  // Both are what a stock framework runs: one connection per peer, fair, no prefill.
  for (const auto* name : {kStock, kStockFlat}) {
    const auto b = baseline_scenario(name, s, topo);
    CHECK(b.connections == 1);
    CHECK(b.policy == "fair");
    CHECK_FALSE(b.prefill);
  }

  // The simulator runs the hierarchical one faster: a third fewer bytes over the WAN, in 2
  // WAN steps instead of 6.
  const auto t_flat = sim::simulate(flat).end_ns();
  const auto t_stock = sim::simulate(stock).end_ns();
  CHECK(t_stock < t_flat);
}

TEST_CASE("the hierarchical all-reduce refuses DCs with different numbers of a stage's replicas",
          "[unit][baselines][workload]") {
  const auto topo = shipped_topology("two-dc.json");
  auto s = shipped("two-dc-1b.json");
  s.parallelism.dp = 3;  // use gets 2 replicas, euw 1
  s.parallelism.tp = 4;
  try {
    (void)baseline_scenario(kStock, s, topo);
    FAIL("a hierarchical all-reduce over 2 + 1 replicas was accepted");
  } catch (const core::ConfigError& e) {
    REQUIRE(e.diagnostics().size() == 1);
    CHECK(e.diagnostics()[0].path == "/allreduce");
    CHECK_THAT(e.diagnostics()[0].reason, Contains("DC use has 2") && Contains("DC euw has 1"));
  }
  CHECK_NOTHROW(baseline_scenario(kStockFlat, s, topo));  // the flat ring takes any count
  CHECK_THROWS_WITH(baseline_scenario("megatron", s, topo), Contains("unknown baseline \"megatron\"") &&
                                                                 Contains("stock, stock-flat, varuna"));
}

TEST_CASE("varuna: GPipe with recomputation, the global batch kept, one connection", "[unit][baselines][workload]") {
  const auto topo = shipped_topology("two-dc.json");
  const auto s = shipped("two-dc-1b.json");
  const auto v = baseline_scenario(kVaruna, s, topo);
  CHECK(v.schedule == Schedule::gpipe);
  CHECK(v.memory.recompute);
  CHECK(v.connections == 1);
  CHECK(v.policy == "fair");
  CHECK(v.placement == s.placement);  // PP across DCs: the scenario's own placement
  CHECK(v.micro_batch_size * v.micro_batches == s.micro_batch_size * s.micro_batches);
  CHECK(varuna_micro_batches(s, topo) == std::make_pair(v.micro_batch_size, v.micro_batches));
  // Recomputation: each backward runs its forward again.
  const auto plan = build_plan(v, topo);
  const auto& cost = plan.stages[0];
  for (const auto& op : plan.programs[0].ops)
    if (op.kind == OpKind::backward) CHECK(op.flops == Approx(cost.backward_flops + cost.forward_flops));
  // Compute at a fixed MFU grows with the micro-batch's size while the WAN's bytes per
  // iteration do not change with it, so the least estimated time is at the most micro-batches.
  auto slow = topo;
  for (auto& l : slow.links) l.params.rate.bps /= 100;
  CHECK(varuna_micro_batches(s, slow) == std::make_pair(1, 8));
  auto big = s;
  big.micro_batch_size = 4;
  big.micro_batches = 2;
  CHECK(varuna_micro_batches(big, topo) == std::make_pair(1, 8));
}

TEST_CASE("bench: the named baselines as variants", "[unit][baselines][bench]") {
  using namespace wanlab::cli::bench;
  CHECK(parse_baselines("stock, varuna,stock") == std::vector<std::string>{"stock", "varuna"});
  CHECK(parse_baselines("all") == std::vector<std::string>{"stock", "stock-flat", "varuna"});
  CHECK_THROWS_WITH(parse_baselines("stock,deepspeed"), Contains("unknown baseline \"deepspeed\""));
  const auto vs = expand_variants({"fair", "atlas"}, {4}, false, kAtlasRule, {"stock", "stock-flat", "varuna"});
  std::vector<std::string> names;
  for (const auto& v : vs) names.push_back(v.name);
  CHECK(names == std::vector<std::string>{"fair-k4", "atlas-k4", "stock", "stock-flat", "varuna"});
  CHECK(vs[2].policy == "fair");
  CHECK(vs[2].connections == 1);
  CHECK(vs[2].placement == "stock");
  // With a prefill load, only the PP variants get training-only twins.
  const auto twins = add_training_only_twins(vs);
  CHECK(std::count_if(twins.begin(), twins.end(), [](const Variant& v) { return v.training_only; }) == 2);
}

TEST_CASE("a delayed compute op delays its timeline", "[unit][baselines][sim]") {
  const auto s = shipped("two-dc-1b.json");
  const auto plan = build_plan(s, shipped_topology("two-dc.json"));
  sim::SimOptions opt;
  opt.compute_jitter = 0;
  const auto plain = sim::simulate(plan, opt);
  // Worker 0 (stage 0, replica 0, TP group 0) holds its first forward of iteration 1 by 50 ms.
  opt.compute_delays[{0, 1, program::SpanKind::forward, 0}] = 50'000'000;
  const auto held = sim::simulate(plan, opt);
  const auto& a = plain.groups[0];
  const auto& b = held.groups[0];
  const auto first_forward = [](const program::WorkerReport& r) {
    for (const auto& sp : r.spans)
      if (sp.iteration == 1 && sp.kind == program::SpanKind::forward) return sp.start_ns;
    return std::int64_t{-1};
  };
  CHECK(first_forward(b) - first_forward(a) == 50'000'000);
  CHECK(a.iterations[0] == b.iterations[0]);

  // Compute only (one GPU, no network): the run ends exactly that much later.
  const auto one = build_plan(scenario(1, 1, 1, 4), lab(nlohmann::json::array({{{"name", "a"}, {"nodes", 1}}})));
  sim::SimOptions o;
  o.compute_jitter = 0;
  const auto alone = sim::simulate(one, o).end_ns();
  o.compute_delays[{0, 1, program::SpanKind::backward, 2}] = 7'000'000;
  CHECK(sim::simulate(one, o).end_ns() - alone == 7'000'000);
}

TEST_CASE("BubbleTea in the simulator: prefill's waits fed back slow training; none, no slowdown",
          "[unit][baselines][sim][bubbletea]") {
  auto s = shipped("three-dc-7b-bubbletea.json");
  s.iterations = 3;
  const auto topo = shipped_topology("three-dc.json");
  auto training = s;
  training.prefill.reset();
  const double alone = mean_iteration_s(sim::simulate(build_plan(training, topo)).reports(), s.warmup);

  // The load in the training GPUs' bubbles: prefills collide with training and hold it.
  const auto fed = sim::simulate_with_prefill(build_plan(s, topo));
  const auto& wait = fed.prefill["training_wait_s_per_iteration"];
  CHECK(fed.prefill["preemptions"].get<int>() > 0);
  CHECK(wait["fed_back"] == true);
  CHECK(fed.rounds >= 2);
  CHECK(fed.fed_back_s_per_iteration > 0);
  const double with_load = mean_iteration_s(fed.result.reports(), s.warmup);
  INFO("training alone " << alone << " s, with prefill fed back " << with_load << " s");
  CHECK(with_load > alone);

  // A load so light that no request arrives during the run: nothing collides, nothing is
  // fed back, training is exactly as without the load.
  s.prefill->rate_per_s = 1e-6;
  const auto none = sim::simulate_with_prefill(build_plan(s, topo));
  CHECK(none.prefill["requests"].get<int>() == 0);
  CHECK(none.prefill["training_wait_s_per_iteration"]["fed_back"] == false);
  CHECK(none.rounds == 1);
  CHECK(mean_iteration_s(none.result.reports(), s.warmup) == alone);
}

TEST_CASE("provisioned-WAN topologies: the measured labs' DCs and RTTs at 100 Gbit/s, 400 Gbit/s, 1.6 Tbit/s",
          "[unit][baselines][topology]") {
  const std::map<std::string, std::uint64_t> tiers{
      {"100g", 100'000'000'000ULL}, {"400g", 400'000'000'000ULL}, {"1600g", 1'600'000'000'000ULL}};
  for (const std::string base : {"two-dc", "three-dc", "five-dc-global"}) {
    const auto measured = shipped_topology(base + ".json");
    for (const auto& [tag, bps] : tiers) {
      INFO(base << "-" << tag);
      const auto t = shipped_topology(base + "-" + tag + ".json");
      CHECK(t.name == base + "-" + tag);
      CHECK(core::same_dcs(t, measured));
      std::ifstream file(kSource + "/topologies/" + base + "-" + tag + ".json");
      const auto doc = nlohmann::json::parse(file);
      CHECK_THAT(doc.at("description").get<std::string>(), Contains("Assumes") && Contains("Skyplane"));
      REQUIRE(t.links.size() == measured.links.size());
      for (std::size_t i = 0; i < t.links.size(); ++i) {
        CHECK(t.links[i].src == measured.links[i].src);
        CHECK(t.links[i].dst == measured.links[i].dst);
        CHECK(t.links[i].params.delay == measured.links[i].params.delay);
        CHECK(t.links[i].params.rate.bps == bps);
      }
    }
  }
}
