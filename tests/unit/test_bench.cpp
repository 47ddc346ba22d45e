// `wanlab bench`'s pure parts: variant lists and names, ratios against the baseline, the
// markdown table of a bench.json, and the "DP across DCs" placement baseline.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "bench_report.hpp"
#include "test_workload_fixtures.hpp"
#include "wanlab/workload/baselines.hpp"
#include "wanlab/workload/plan.hpp"

using namespace wanlab;
using namespace wanlab::cli::bench;
using namespace wanlab::workload::testing;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

std::vector<std::string> names(const std::vector<Variant>& vs) {
  std::vector<std::string> out;
  for (const auto& v : vs) out.push_back(v.name);
  return out;
}

json summary(double mean, double p99, double gpu, double bubble, std::vector<std::pair<double, double>> wan) {
  json w = json::array();
  for (const auto& [payload, util] : wan)
    w.push_back({{"src", "use"}, {"dst", "euw"}, {"payload_bytes", payload}, {"utilization", util}});
  return {{"iteration_time_s", {{"mean", mean}, {"p50", mean}, {"p99", p99}}},
          {"gpu_utilization", {{"mean", gpu}, {"per_gpu", {gpu}}}},
          {"bubble_fraction", bubble},
          {"wan", w}};
}

std::string refusal(const workload::Scenario& s, const core::Topology& topo) {
  try {
    workload::dp_across_dcs_placement(s, topo);
  } catch (const core::ConfigError& e) {
    REQUIRE(e.diagnostics().size() == 1);
    CHECK(e.diagnostics()[0].path == "/placement");
    return e.diagnostics()[0].reason;
  }
  FAIL("expected a ConfigError");
  return {};
}

}  // namespace

TEST_CASE("bench and simulate refuse an unknown policy before running anything", "[unit][bench]") {
  // `bench --policies fair,atlass` ran fair for minutes before the controller refused 'atlass'.
  CHECK(parse_known_policies("fair,atlas") == std::vector<std::string>{"fair", "atlas"});
  CHECK_THROWS_WITH(parse_known_policies("fair,atlass"), Contains("unknown policy \"atlass\"") && Contains("atlas"));
  CHECK_THROWS_WITH(parse_known_policies("x1,fair,x2"), Contains("unknown policies \"x1\", \"x2\""));
  CHECK_THROWS_WITH(parse_known_policies("Fair"), Contains("policy \"Fair\""));
}

TEST_CASE("bench: policy and connections lists", "[unit][bench]") {
  CHECK(parse_policies("fair,atlas") == std::vector<std::string>{"fair", "atlas"});
  CHECK(parse_policies(" fair , atlas,fair,,priority ") == std::vector<std::string>{"fair", "atlas", "priority"});
  CHECK_THROWS_WITH(parse_policies("Fair"), Contains("policy \"Fair\""));
  CHECK_THROWS_WITH(parse_policies("../x"), Contains("lower-case"));
  CHECK_THROWS_AS(parse_policies(""), std::invalid_argument);

  CHECK(parse_connections("4,1,4") == std::vector<int>{1, 4});
  CHECK(parse_connections("8") == std::vector<int>{8});
  for (const char* bad : {"0", "65", "x", "1.5", "2,-1", ""}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_connections(bad), std::invalid_argument);
  }
  CHECK(default_connections(4) == std::vector<int>{1, 4});
  CHECK(default_connections(1) == std::vector<int>{1});
}

TEST_CASE("bench: variants are every policy x every connections value, plus the placement baseline", "[unit][bench]") {
  const auto vs = expand_variants({"fair", "atlas"}, {1, 4}, true);
  CHECK(names(vs) == std::vector<std::string>{"fair-k1", "fair-k4", "atlas-k1", "atlas-k4", "fair-k4-dp-across-dcs"});
  CHECK(vs[2] == Variant{"atlas-k1", "atlas", 1, kAtlasRule});
  CHECK(vs.back() == Variant{"fair-k4-dp-across-dcs", "fair", 4, kDpAcrossDcs});
  CHECK(baseline_name({1, 4}) == "fair-k1");

  // The baseline comes first, and runs even when the policies leave fair out.
  const auto atlas = expand_variants({"atlas"}, {4, 2}, false, kScenarioPlacement);
  CHECK(names(atlas) == std::vector<std::string>{"fair-k2", "atlas-k2", "atlas-k4"});
  CHECK(atlas.front().placement == kScenarioPlacement);
  CHECK(baseline_name({4, 2}) == "fair-k2");
  CHECK(names(expand_variants({"priority", "fair"}, {1}, true)) ==
        std::vector<std::string>{"fair-k1", "priority-k1", "fair-k1-dp-across-dcs"});
  CHECK(variant_name("atlas", 16) == "atlas-k16");
}

TEST_CASE("bench: ratios against the baseline", "[unit][bench]") {
  const auto base = summary(4.0, 4.5, 0.1, 0.9, {{1e6, 0.25}});
  // The link that carried no payload (ACKs only) is left out of the WAN mean.
  const auto fast = summary(2.0, 2.2, 0.2, 0.8, {{1e6, 0.4}, {2e6, 0.6}, {0, 0.01}});
  CHECK(wan_utilization(fast) == Approx(0.5));
  CHECK(wan_utilization(json::object()) == 0);
  const auto r = ratios(fast, base);
  CHECK(r.at("iteration_time_speedup").get<double>() == Approx(2.0));
  CHECK(r.at("gpu_utilization").get<double>() == Approx(2.0));
  CHECK(r.at("bubble_fraction").get<double>() == Approx(0.8 / 0.9));
  CHECK(r.at("wan_utilization").get<double>() == Approx(2.0));
  const auto self = ratios(base, base);
  for (const auto& [k, v] : self.items()) CHECK(v.get<double>() == Approx(1.0));
  // Nothing to divide by: null, never inf or nan.
  const auto zero = summary(0, 0, 0, 0, {});
  const auto over_zero = ratios(fast, zero);
  CHECK(over_zero.at("iteration_time_speedup").get<double>() == 0);
  for (const char* k : {"gpu_utilization", "bubble_fraction", "wan_utilization"}) {
    INFO(k);
    CHECK(over_zero.at(k).is_null());
  }
  CHECK(ratios(zero, base).at("iteration_time_speedup").is_null());
  CHECK(ratios(json::object(), base).at("iteration_time_speedup").is_null());
}

TEST_CASE("bench: the markdown table of a bench.json", "[unit][bench]") {
  const auto base = summary(4.0, 4.5, 0.1, 0.9, {{1e6, 0.25}});
  const auto fast = summary(2.0, 2.2, 0.2, 0.8, {{1e6, 0.4}, {2e6, 0.6}});
  const json bench = {{"scenario", "two-dc-1b"},
                      {"lab", "two-dc"},
                      {"topology", "/x/topologies/two-dc.json"},
                      {"backend", "userspace"},
                      {"scale", 0.05},
                      {"baseline", "fair-k1"},
                      {"variants",
                       {{{"name", "fair-k1"},
                         {"policy", "fair"},
                         {"connections", 1},
                         {"placement", "atlas-rule"},
                         {"folder", "fair-k1"},
                         {"summary", base},
                         {"ratios", ratios(base, base)}},
                        {{"name", "fair-k4"},
                         {"policy", "fair"},
                         {"connections", 4},
                         {"placement", "atlas-rule"},
                         {"folder", "fair-k4"},
                         {"summary", fast},
                         {"ratios", ratios(fast, base)}}}},
                      {"skipped", {{{"name", "atlas-k1"}, {"reason", "policy: 'atlas' is not one of fair"}}}}};
  const auto md = markdown(bench);
  INFO(md);
  CHECK_THAT(md, Contains("# wanlab bench: two-dc-1b\n"));
  CHECK_THAT(md, Contains("| variant | policy | connections | placement | iteration time mean (s) | p99 (s) | speedup "
                          "vs baseline | GPU utilization (%) | bubble (%) | WAN utilization (%) |\n"));
  CHECK_THAT(md,
             Contains("| fair-k1 (baseline) | fair | 1 | atlas-rule | 4.000 | 4.500 | 1.00x | 10.0 | 90.0 | 25.0 |\n"));
  CHECK_THAT(md, Contains("| fair-k4 | fair | 4 | atlas-rule | 2.000 | 2.200 | 2.00x | 20.0 | 80.0 | 50.0 |\n"));
  CHECK_THAT(md, Contains("- `atlas-k1`: policy: 'atlas' is not one of fair\n"));
  CHECK_THAT(md, Contains("Baseline: `fair-k1`: policy fair"));
  CHECK_THAT(md, Contains("Scale 0.05: bytes and WAN link rates are multiplied by 0.05"));
  CHECK_THAT(md, Contains("TCP dynamics"));
  CHECK_THAT(md, Contains("do not scale exactly"));
  CHECK_THAT(md, Contains("Backend: userspace."));
  // Exactly one table row per variant.
  CHECK(std::count(md.begin(), md.end(), '\n') > 6);
  std::size_t rows = 0;
  for (std::size_t pos = 0; (pos = md.find("\n| fair-k", pos)) != std::string::npos; ++pos) ++rows;
  CHECK(rows == 2);

  // A baseline that did not run: no ratios, and the line says so.
  auto no_base = bench;
  no_base["variants"].erase(0);
  no_base["variants"][0]["ratios"] = ratios(fast, json::object());
  const auto md2 = markdown(no_base);
  CHECK_THAT(md2, Contains("| fair-k4 | fair | 4 | atlas-rule | 2.000 | 2.200 | n/a | 20.0 | 80.0 | 50.0 |"));
  CHECK_THAT(md2, Contains("did not run"));
}

TEST_CASE("bench: variants whose emulation was degraded are marked, their runs listed", "[unit][bench][engine]") {
  auto base = summary(4.0, 4.5, 0.1, 0.9, {{1e6, 0.25}});
  auto late = summary(5.0, 5.5, 0.1, 0.9, {{1e6, 0.25}});
  base["engine"] = {{"scheduling", "SCHED_FIFO 50"}, {"released_late_over_1ms_fraction", 0.0002},
                    {"release_late_p99_us", 50.0}, {"degraded", false}, {"degraded_reasons", json::array()}};
  late["engine"] = {{"scheduling", "nice -20"}, {"released_late_over_1ms_fraction", 0.088},
                    {"degraded", true}, {"degraded_reasons", {"8.80 % of packets released more than 1 ms late"}}};
  // The engine part of a run entry: what bench.json keeps of it.
  const auto e = run_engine(late);
  CHECK(e.at("scheduling") == "nice -20");
  CHECK(e.at("degraded") == true);
  CHECK(run_engine(summary(1, 1, 0, 0, {})).is_null());  // the kernel backend: no engine block
  auto ok_run = base;
  ok_run["engine"]["degraded"] = false;
  const json variants = {
      {{"name", "fair-k1"}, {"folder", "fair-k1"}, {"policy", "fair"}, {"connections", 1}, {"placement", "atlas-rule"},
       {"summary", base},
       // Its second round's run fell behind.
       {"runs", {{{"round", 1}, {"folder", "fair-k1"}, {"engine", run_engine(base)}},
                 {{"round", 2}, {"folder", "fair-k1-run2"}, {"engine", run_engine(late)}}}}},
      {{"name", "atlas-k1"}, {"folder", "atlas-k1"}, {"policy", "atlas"}, {"connections", 1}, {"placement", "atlas-rule"},
       {"summary", late},
       {"runs", {{{"round", 1}, {"folder", "atlas-k1"}, {"engine", run_engine(late)}},
                 {{"round", 2}, {"folder", "atlas-k1-run2"}, {"engine", run_engine(base)}}}}},
      {{"name", "fair-k4"}, {"folder", "fair-k4"}, {"policy", "fair"}, {"connections", 4}, {"placement", "atlas-rule"},
       {"summary", base}}};
  const auto d = degraded_runs(variants);
  REQUIRE(d.size() == 2);  // atlas-k1's first run once, though both its summary and runs[0] hold it
  CHECK(d[0].at("variant") == "fair-k1");
  CHECK(d[0].at("folder") == "fair-k1-run2");
  CHECK(d[1].at("folder") == "atlas-k1");
  const auto md = markdown({{"scenario", "s"}, {"baseline", "fair-k1"}, {"variants", variants}});
  INFO(md);
  CHECK_THAT(md, Contains("| fair-k1 (baseline) (degraded) | fair |"));
  CHECK_THAT(md, Contains("| atlas-k1 (degraded) | atlas |"));
  CHECK_THAT(md, Contains("| fair-k4 | fair |"));
  CHECK_THAT(md, Contains("**Emulation degraded** in 2 runs"));
  CHECK_THAT(md, Contains("more than 1 % of packets released over 1 ms late"));
  CHECK_THAT(md, Contains("- `fair-k1-run2`: 8.80 % of packets released more than 1 ms late\n"));
  CHECK_THAT(md, Contains("- `atlas-k1`: 8.80 %"));
  // None degraded: no marks, no list.
  const auto clean = markdown({{"scenario", "s"}, {"baseline", "fair-k4"}, {"variants", {variants[2]}}});
  CHECK(clean.find("degraded") == std::string::npos);
}

TEST_CASE("DP across DCs: each replica's pipeline in one DC, the replicas spread over the DCs",
          "[unit][bench][workload][placement]") {
  const auto topo = shipped_topology("two-dc.json");  // 2 DCs x 2 nodes x 8 GPUs
  auto s = scenario(2, 4, 4, 8);
  const auto out = workload::dp_across_dcs_placement(s, topo);
  using P = std::vector<std::vector<std::string>>;
  // Runs of consecutive replicas per DC: the all-reduce ring crosses the WAN once each way.
  CHECK(out.placement == P{{"use", "use", "euw", "euw"}, {"use", "use", "euw", "euw"}});
  CHECK(s.placement.empty());  // the input is left alone
  CHECK_THAT(out.description, Contains("DP across DCs"));
  const auto plan = workload::build_plan(out, topo);
  for (int stage = 0; stage < 2; ++stage) {
    std::set<std::size_t> dcs;
    for (const auto& w : plan.workers)
      if (w.stage == stage) dcs.insert(w.dc);
    CHECK(dcs.size() == 2);
  }
  // Pipelines stay inside a DC: only the all-reduce crosses the WAN, one ring step of
  // 1/dp of the gradients each way per step (2 (dp - 1) steps), per TP rank and stage.
  const auto atlas = workload::build_plan(s, topo);
  CHECK(plan.wan_bytes_per_iteration.size() == 2);
  CHECK(plan.wan_bytes_total() != atlas.wan_bytes_total());
  for (const auto& w : plan.workers)
    CHECK(w.dc == plan.workers[static_cast<std::size_t>(workload::worker_id({2, 4, 4}, 0, w.dp_rank, w.tp_rank))].dc);

  // Three DCs of different sizes: the largest first, replicas dealt in turn.
  const auto uneven = lab(json::array({{{"name", "a"}, {"nodes", 1}, {"gpus_per_node", 4}},
                                       {{"name", "b"}, {"nodes", 2}, {"gpus_per_node", 4}},
                                       {{"name", "c"}, {"nodes", 3}, {"gpus_per_node", 4}}}));
  CHECK(workload::dp_across_dcs_placement(scenario(2, 4, 2, 4), uneven).placement ==
        P{{"c", "c", "b", "a"}, {"c", "c", "b", "a"}});
}

TEST_CASE("DP across DCs: refused with the reason when the lab cannot host it", "[unit][bench][workload][placement]") {
  // three-dc-7b's split: a whole pipeline is 3 x 8 GPUs, one per 32-GPU DC, not 4.
  CHECK_THAT(refusal(scenario(3, 4, 8, 8), shipped_topology("three-dc.json")),
             Contains("4 replicas of a whole pipeline (3 stages x tp 8 = 24 GPUs") &&
                 Contains("room for 3 (use: 1, usw: 1, euw: 1)"));
  CHECK_THAT(refusal(scenario(2, 1, 4, 8), shipped_topology("two-dc.json")), Contains("single replica"));
  CHECK_THAT(refusal(scenario(2, 2, 2, 4), lab(json::array({{{"name", "a"}, {"nodes", 4}, {"gpus_per_node", 8}}}))),
             Contains("single DC"));
  CHECK_THAT(refusal(scenario(2, 2, 2, 4), lab(json::array({{{"name", "a"}, {"nodes", 4}, {"gpus_per_node", 8}},
                                                            {{"name", "b"}, {"nodes", 1}, {"gpus_per_node", 2}}}))),
             Contains("only one DC has room") && Contains("a: 8, b: 0"));
}

TEST_CASE("bench: a prefill scenario runs each variant's training-only twin first", "[unit][bench][prefill]") {
  const auto v = cli::bench::expand_variants({"fair", "atlas"}, {4}, true);
  const auto t = cli::bench::add_training_only_twins(v);
  std::vector<std::string> names;
  for (const auto& x : t) names.push_back(x.name);
  CHECK(names == std::vector<std::string>{"fair-k4-training-only", "fair-k4", "atlas-k4-training-only", "atlas-k4",
                                          "fair-k4-dp-across-dcs"});
  CHECK(t[0].training_only);
  CHECK_FALSE(t[1].training_only);
  CHECK(t[0].policy == "fair");
  // Applying it twice adds nothing.
  CHECK(cli::bench::add_training_only_twins(t).size() == t.size());
}

TEST_CASE("bench: training slowdown and the prefill table", "[unit][bench][prefill]") {
  const nlohmann::json without{{"iteration_time_s", {{"mean", 2.0}}}};
  nlohmann::json with{{"iteration_time_s", {{"mean", 2.02}}},
                      {"gpu_utilization", {{"mean", 0.91}}},
                      {"prefill",
                       {{"requests", 1000},
                        {"completed", 990},
                        {"ttft_s", {{"p50", 0.12}, {"p99", 0.9}}},
                        {"deadline_misses", 3},
                        {"preemptions", 40},
                        {"tokens_per_s", 123456.0}}}};
  CHECK(cli::bench::training_slowdown(with, without).get<double>() == Approx(0.01));
  CHECK(cli::bench::training_slowdown(with, nlohmann::json::object()).is_null());
  with["training_slowdown"] = cli::bench::training_slowdown(with, without);
  const nlohmann::json b{{"scenario", "s"},
                         {"baseline", "fair-k4"},
                         {"variants",
                          {{{"name", "fair-k4-training-only"}, {"summary", without}},
                           {{"name", "fair-k4"}, {"summary", with}}}}};
  const auto md = cli::bench::markdown(b);
  CHECK(md.find("| fair-k4 | 91.0 | +1.00 | 1000 | 990 | 0.120 | 0.900 | 3 | 40 | 123456 |") != std::string::npos);
}

TEST_CASE("bench --repeat: the training slowdown over the rounds, each against the twin of its round",
          "[unit][bench][prefill]") {
  using nlohmann::json;
  const auto run = [](double mean, json slowdown, double utilization) {
    json r{{"iteration_time_s", {{"mean", mean}}}, {"gpu_utilization", {{"mean", utilization}}}};
    if (!slowdown.is_null()) r["training_slowdown"] = slowdown;
    return r;
  };
  json with{{"iteration_time_s", {{"mean", 4.1}}},
            {"gpu_utilization", {{"mean", 0.9}}},
            {"training_slowdown", 0.025},
            {"prefill", {{"requests", 10}, {"completed", 9}}}};
  json variants = json::array(
      {{{"name", "fair-k4-training-only"},
        {"policy", "fair"},
        {"training_only", true},
        {"summary", {{"iteration_time_s", {{"mean", 4.0}}}}},
        {"runs", {run(4.0, nullptr, 0.03), run(4.4, nullptr, 0.03), run(4.2, nullptr, 0.03)}}},
       {{"name", "fair-k4"},
        {"policy", "fair"},
        {"summary", with},
        // Slowdowns +2.5 %, -1.5 %, +2 %: mean +1 %, sample sd 2.18 %.
        {"runs", {run(4.1, 0.025, 0.90), run(4.334, -0.015, 0.92), run(4.284, 0.02, 0.94)}}}});
  add_repeat_ratios(variants, "fair-k4");
  CHECK_FALSE(variants[0].at("repeat").contains("training_slowdown"));
  const auto& r = variants[1].at("repeat");
  CHECK(r.at("training_slowdown").at("mean").get<double>() == Approx(0.01));
  CHECK(r.at("training_slowdown").at("pairs") == 3);
  // sd of (0.025, -0.015, 0.02) = 0.021794; t(0.975, 2) = 4.302653.
  const double half = 4.302653 * 0.0217945 / std::sqrt(3.0);
  CHECK(r.at("training_slowdown").at("ci95")[0].get<double>() == Approx(0.01 - half).epsilon(1e-4));
  CHECK(r.at("training_slowdown").at("ci95")[1].get<double>() == Approx(0.01 + half).epsilon(1e-4));
  CHECK(r.at("gpu_utilization").at("mean").get<double>() == Approx(0.92));
  const auto md = markdown({{"scenario", "s"}, {"baseline", "fair-k4"}, {"repeat", 3}, {"variants", variants}});
  INFO(md);
  CHECK_THAT(md, Contains("| fair-k4 | 92.0 | +1.00 (-4.41 to +6.41) | 10 | 9 |"));
  CHECK_THAT(md, Contains("the mean of the per-round slowdowns"));
}

TEST_CASE("bench --repeat: rounds alternate the order, so a steady drift cancels out of the slowdown", "[unit][bench]") {
  CHECK(round_order(3, 1, 1) == std::vector<std::size_t>{0, 1, 2});
  CHECK(round_order(3, 2, 1) == std::vector<std::size_t>{0, 1, 2});  // (one round: as listed)
  CHECK(round_order(3, 1, 4) == std::vector<std::size_t>{0, 1, 2});
  CHECK(round_order(3, 2, 4) == std::vector<std::size_t>{2, 1, 0});
  CHECK(round_order(3, 3, 4) == std::vector<std::size_t>{0, 1, 2});
  CHECK(round_order(0, 2, 4).empty());
  // A twin (listed first) and its loaded variant that take the same time, on a machine that
  // gets 2 % slower with every run: the mean of the per-round slowdowns over an even number of
  // rounds is 0 to within the drift's curvature, where always running the twin first would
  // report the drift, +2 %.
  const auto mean_slowdown = [](int rounds, bool alternate) {
    double t = 4.0, sum = 0;
    for (int round = 1; round <= rounds; ++round) {
      double at[2] = {};
      for (const auto i : round_order(2, alternate ? round : 1, rounds)) {
        at[i] = t;
        t *= 1.02;
      }
      sum += at[1] / at[0] - 1;
    }
    return sum / rounds;
  };
  for (const int rounds : {2, 4, 6}) {
    INFO("rounds " << rounds);
    CHECK(mean_slowdown(rounds, false) == Approx(0.02));
    CHECK(std::abs(mean_slowdown(rounds, true)) < 2e-4);  // (+2 % - 1.96 %) / 2
  }
}

TEST_CASE("bench --repeat: statistics of a variant's runs", "[unit][bench]") {
  CHECK(run_stats({}).is_null());
  const auto one = run_stats({4.0});
  CHECK(one.at("mean").get<double>() == 4.0);
  CHECK(one.at("stdev").is_null());
  CHECK(one.at("ci95").is_null());
  // 2, 4, 6: mean 4, sample sd 2, t(0.975, 2 df) = 4.3027: half-width 4.3027 * 2 / sqrt(3).
  const auto three = run_stats({6.0, 2.0, 4.0});
  CHECK(three.at("runs") == 3);
  CHECK(three.at("mean").get<double>() == Approx(4.0));
  CHECK(three.at("stdev").get<double>() == Approx(2.0));
  CHECK(three.at("ci95").get<double>() == Approx(4.302653 * 2 / std::sqrt(3.0)).epsilon(1e-5));
  CHECK(three.at("min").get<double>() == 2.0);
  CHECK(three.at("max").get<double>() == 6.0);
}

TEST_CASE("bench --repeat: speedups from runs paired by round", "[unit][bench]") {
  // The machine slows down from round to round; the variant is 10 % faster in every round.
  const std::vector<std::optional<double>> fair{4.0, 4.4, 4.8};
  const std::vector<std::optional<double>> atlas{4.0 / 1.1, 4.4 / 1.1, 4.8 / 1.1};
  const auto p = paired_speedup(fair, atlas);
  CHECK(p.at("pairs") == 3);
  CHECK(p.at("speedup").get<double>() == Approx(1.1));
  CHECK(p.at("ratio_mean").get<double>() == Approx(1.1));
  // Pairing takes the drift out: the interval is the point.
  CHECK(p.at("ci95")[0].get<double>() == Approx(1.1));
  CHECK(p.at("ci95")[1].get<double>() == Approx(1.1));
  // Ratios 1.0 and 1.2: mean 1.1, sd 0.1414, t(0.975, 1 df) = 12.706.
  const auto q = paired_speedup({2.0, 2.4}, {2.0, 2.0});
  CHECK(q.at("ratio_mean").get<double>() == Approx(1.1));
  CHECK(q.at("ci95")[0].get<double>() == Approx(1.1 - 12.7062 * 0.141421 / std::sqrt(2.0)).epsilon(1e-4));
  CHECK(q.at("ci95")[1].get<double>() == Approx(1.1 + 12.7062 * 0.141421 / std::sqrt(2.0)).epsilon(1e-4));
  // A round where either side did not run is left out; none in common: null.
  const auto r = paired_speedup({2.0, std::nullopt, 3.0}, {1.0, 1.0, std::nullopt});
  CHECK(r.at("pairs") == 1);
  CHECK(r.at("speedup").get<double>() == Approx(2.0));
  CHECK(r.at("ci95").is_null());
  CHECK(paired_speedup({std::nullopt}, {1.0}).is_null());
  CHECK(paired_speedup({}, {}).is_null());
}

TEST_CASE("bench --repeat: each variant against the baseline and against fair with its connections", "[unit][bench]") {
  const auto run = [](double mean) { return json{{"iteration_time_s", {{"mean", mean}}}}; };
  const auto entry = [&](const std::string& name, const std::string& policy, int k, json runs) {
    return json{{"name", name},
                {"policy", policy},
                {"connections", k},
                {"placement", "atlas-rule"},
                {"folder", name},
                {"summary", summary(runs[0].at("iteration_time_s").at("mean").get<double>(), 1, 0, 0, {})},
                {"runs", std::move(runs)}};
  };
  json variants = json::array({entry("fair-k1", "fair", 1, {run(4.0), run(4.2)}),
                               entry("fair-k4", "fair", 4, {run(3.0), run(3.3)}),
                               entry("atlas-k4", "atlas", 4, {run(3.3), nullptr}),
                               {{"name", "fair-k4-dp-across-dcs"}, {"summary", summary(9, 9, 0, 0, {})}}});
  add_repeat_ratios(variants, "fair-k1");
  const auto& fk1 = variants[0].at("repeat");
  CHECK(fk1.at("iteration_time_s").at("mean").get<double>() == Approx(4.1));
  CHECK(fk1.at("speedup").at("speedup").get<double>() == Approx(1.0));
  CHECK_FALSE(fk1.contains("vs_fair"));
  const auto& fk4 = variants[1].at("repeat");
  CHECK(fk4.at("speedup").at("speedup").get<double>() == Approx(4.1 / 3.15));
  CHECK(fk4.at("speedup").at("pairs") == 2);
  const auto& ak4 = variants[2].at("repeat");
  CHECK(ak4.at("iteration_time_s").at("runs") == 1);  // round 2 did not run
  CHECK(ak4.at("speedup").at("speedup").get<double>() == Approx(4.0 / 3.3));
  CHECK(ak4.at("vs_fair").at("reference") == "fair-k4");
  CHECK(ak4.at("vs_fair").at("speedup").get<double>() == Approx(3.0 / 3.3));
  CHECK(ak4.at("vs_fair").at("pairs") == 1);
  CHECK_FALSE(variants[3].contains("repeat"));  // a single run

  const json b{{"scenario", "s"}, {"baseline", "fair-k1"}, {"repeat", 2}, {"variants", variants}};
  const auto md = markdown(b);
  INFO(md);
  CHECK_THAT(md, Contains("Repeated runs: 2 rounds"));
  CHECK_THAT(md, Contains("| fair-k4 | 2 | 3.150 | 0.212 | +-1.906 | 3.000-3.300 | 1.30x (0.92-1.69) |  |\n"));
  CHECK_THAT(md, Contains("| atlas-k4 | 1 | 3.300 | n/a | n/a | 3.300-3.300 | 1.21x | 0.91x vs fair-k4 |\n"));
  // Without --repeat the table stays as it was.
  CHECK(markdown({{"scenario", "s"}, {"baseline", "fair-k1"}, {"variants", json::array()}}).find("Repeated") ==
        std::string::npos);
}

TEST_CASE("lan_scale: all-reduce rings inside a DC move lan_scale x bytes, rings across the WAN scale x bytes",
          "[unit][bench][workload][placement]") {
  const auto topo = shipped_topology("two-dc.json");
  auto s = scenario(2, 4, 4, 8);
  s.scale = 0.05;
  const auto ring_bytes = [](const workload::Plan& plan) {
    std::set<std::uint64_t> out;
    for (const auto& p : plan.programs)
      for (const auto& op : p.ops)
        if (op.kind == program::OpKind::allreduce) out.insert(op.bytes);
    return out;
  };
  const auto expected = [&](double scale) {
    std::set<std::uint64_t> out;  // one size per stage (the first and last hold the embeddings)
    for (const auto& st : workload::build_plan(s, topo).stages)
      out.insert(workload::scaled_bytes(st.gradient_bytes_per_gpu, scale));
    return out;
  };
  CHECK(ring_bytes(workload::build_plan(s, topo)) == expected(0.05));
  s.lan_scale = 0.001;
  const auto atlas = workload::build_plan(s, topo);
  CHECK(ring_bytes(atlas) == expected(0.001));
  // The WAN carries the same bytes: only the DC-internal rings changed.
  auto no_lan = s;
  no_lan.lan_scale.reset();
  CHECK(atlas.wan_bytes_total() == workload::build_plan(no_lan, topo).wan_bytes_total());
  // DP across DCs: every ring crosses the WAN, so it is WAN traffic at scale.
  const auto across = workload::build_plan(workload::dp_across_dcs_placement(s, topo), topo);
  CHECK(ring_bytes(across) == expected(0.05));
  // A shaped LAN keeps time only with bytes and rate scaled alike: refused with the reason.
  auto shaped = json::parse(R"({"name": "t", "lan": {"rate": "10Gbit"},
      "dcs": [{"name": "a", "nodes": 2, "gpus_per_node": 8}, {"name": "b", "nodes": 2, "gpus_per_node": 8}],
      "wan": [{"between": ["a", "b"], "rtt": "20ms", "rate": "1Gbit"}]})");
  try {
    workload::build_plan(s, core::parse_topology(shaped, "t.json", {}));
    FAIL("expected a ConfigError");
  } catch (const core::ConfigError& e) {
    REQUIRE(e.diagnostics().size() == 1);
    CHECK(e.diagnostics()[0].path == "/lan_scale");
    CHECK_THAT(e.diagnostics()[0].reason, Contains("shapes its LAN (lan.rate 10Gbit"));
  }
  s.lan_scale.reset();
  CHECK_NOTHROW(workload::build_plan(s, core::parse_topology(shaped, "t.json", {})));
}

TEST_CASE("bench: the model sensitivity table, and a verdict that flips under a knob", "[unit][bench][sim]") {
  const auto variant = [](const char* name, const char* policy, json knobs) {
    return json{{"name", name}, {"policy", policy}, {"connections", 4}, {"placement", "scenario"},
                {"folder", name}, {"summary", summary(knobs.at("default").get<double>(), 1, 0.1, 0.9, {})},
                {"sensitivity", std::move(knobs)}};
  };
  // 7B across three DCs at 1,536 GPUs with every WAN rate x 10 (2026-11-27): atlas slower
  // than fair by default, faster with shared bursts.
  json bench = {{"scenario", "three-dc-7b-x10"},
                {"backend", "simulate"},
                {"scale", 1},
                {"baseline", "fair-k4"},
                {"sensitivity", {{"default_wall_s", 2.2}, {"extra_wall_s", 5.5}}},
                {"variants",
                 {variant("fair-k4", "fair", {{"default", 11.123}, {"step/4", 11.090}, {"shared", 10.513}, {"fifo", 11.0}}),  // (no jitter run)
                  variant("atlas-k4", "atlas",
                          {{"default", 18.254}, {"step/4", 16.525}, {"shared", 8.394}, {"fifo", 17.0}, {"jitter x10", 18.0}})}}};
  const auto md = markdown(bench);
  INFO(md);
  CHECK_THAT(md, Contains("## Model sensitivity"));
  CHECK_THAT(md, Contains("| variant | default (s) | step / 4 (s) | bursts shared (s) | bursts fifo (s) | jitter x 10 (s) | "
                          "moves by (%) | verdict vs baseline |\n"));
  // fair: 10.513 / 11.123 - 1 = -5.5 %; atlas: 8.394 / 18.254 - 1 = -54.0 %.
  CHECK_THAT(md, Contains("| fair-k4 | 11.123 | 11.090 | 10.513 | 11.000 | n/a | 5.5 | baseline |\n"));
  CHECK_THAT(md, Contains("| atlas-k4 | 18.254 | 16.525 | 8.394 | 17.000 | 18.000 | 54.0 | **flips** (0.61x by default; "
                          "shared 1.25x) |\n"));
  CHECK_THAT(md, Contains("took 5.50 s of simulation on top of the default runs' 2.20 s"));

  // Every knob agrees: the verdict holds, with the range of speedups.
  bench["variants"][1]["sensitivity"]["shared"] = 17.5;
  const auto md2 = sensitivity_markdown(bench);
  CHECK_THAT(md2, Contains("| atlas-k4 | 18.254 | 16.525 | 17.500 | 17.000 | 18.000 | 9.5 | holds (0.60x to 0.67x) |\n"));
  // The jitter alone moving it most: 15.0 / 18.254 - 1 = -17.8 %.
  bench["variants"][1]["sensitivity"]["jitter x10"] = 15.0;
  CHECK_THAT(sensitivity_markdown(bench), Contains("| 17.000 | 15.000 | 17.8 | holds"));

  // No sensitivity runs (lab runs, --no-sensitivity): no section.
  for (auto& v : bench["variants"]) v.erase("sensitivity");
  CHECK(sensitivity_markdown(bench).empty());
  CHECK_THAT(markdown(bench), !Contains("Model sensitivity"));
}

TEST_CASE("bench.md: the rails table, and rails entries that are not what they should be", "[unit][bench][rails]") {
  const json bill = {{"packet", {{"power_w", 12500.0}, {"cost_usd", 400000.0}}},
                     {"ocs", {{"power_w", 500.0}, {"cost_usd", 100000.0}}},
                     {"power_ratio", 25.0},
                     {"cost_ratio", 4.0}};
  const json rails = json::array({{{"dc", "a"},
                                   {"fabric", "rails (ocs, 8 x 400Gbit, 10us)"},
                                   {"policy", "phase"},
                                   {"reconfigurations_per_iteration", 82.5},
                                   {"reconfiguring_fraction", 0.0123},
                                   {"held_transfers", 7},
                                   {"bill", bill}}});
  json variants = json::array({{{"name", "fair-k1"}, {"summary", {{"rails", rails}}}},
                               {{"name", "atlas-k1"}, {"summary", json::object()}}});
  auto md = markdown({{"scenario", "s"}, {"baseline", "fair-k1"}, {"variants", variants}});
  CHECK_THAT(md, Contains("| fair-k1 | a | rails (ocs, 8 x 400Gbit, 10us) | phase | 82.5 | 1.23 | 7 transfers | 12.5 / 0.500 | "
                          "25.0x | 400 / 100 | 4.0x |"));
  // A lab run's rail switch holds frames, not transfers.
  json lab_rails = rails;
  lab_rails[0].erase("held_transfers");
  lab_rails[0]["held_frames"] = 4321;
  CHECK_THAT(markdown({{"scenario", "s"}, {"variants", json::array({{{"name", "fair-k1"}, {"summary", {{"rails", lab_rails}}}}})}}),
             Contains("| 82.5 | 1.23 | 4321 frames | 12.5 / 0.500 |"));
  // A lab-sized fabric (8 ports) draws tens of watts: three significant digits, not 0.0.
  lab_rails[0]["bill"] = {{"packet", {{"power_w", 161.6}, {"cost_usd", 12800.0}}},
                          {"ocs", {{"power_w", 6.4}, {"cost_usd", 3200.0}}},
                          {"power_ratio", 25.3},
                          {"cost_ratio", 4.0}};
  CHECK_THAT(markdown({{"scenario", "s"}, {"variants", json::array({{{"name", "fair-k1"}, {"summary", {{"rails", lab_rails}}}}})}}),
             Contains("| 4321 frames | 0.162 / 0.006 | 25.3x | 12.8 / 3.20 | 4.0x |"));
  CHECK_THAT(md, !Contains("| atlas-k1 | a |"));
  // No variant on rails: no table.
  CHECK_THAT(markdown({{"scenario", "s"}, {"variants", json::array({variants[1]})}}), !Contains("Rails ("));
  // A hand-edited bench.json: entries that are not objects are left out, missing figures are 0.
  variants[0]["summary"]["rails"] = json::array({42, {{"dc", "b"}, {"bill", "none"}}});
  md = markdown({{"scenario", "s"}, {"variants", variants}});
  CHECK_THAT(md, Contains("| fair-k1 | b | ? | ? | 0.0 | 0.00 | 0 transfers | 0.000 / 0.000 | 0.0x | 0.000 / 0.000 | 0.0x |"));
}
