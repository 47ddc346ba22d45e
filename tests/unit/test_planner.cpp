// `wanlab plan`'s search (controller/planner): the per-DC free GPUs and their errors, the
// GPU range, the memory check, a small lab whose best plan is known, and the one-line
// refusals (a model that fits nowhere, a budget too short for one candidate).
#include <catch2/catch.hpp>

#include <functional>
#include <numeric>

#include "process.hpp"
#include "temp_dir.hpp"
#include "wanlab/core/diagnostics.hpp"
#include "wanlab/planner/memory.hpp"
#include "wanlab/planner/search.hpp"
#include "wanlab/sim/simulator.hpp"
#include "wanlab/workload/memory.hpp"
#include "wanlab/workload/plan.hpp"

using namespace wanlab;
using namespace wanlab::planner;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

// A, C, B (in this order), one node of 8 H100s each: A and B close and fast, C far and slow.
// The greedy rule fills the DCs in topology order when they tie, so it routes through C.
json triangle_doc() {
  return {{"name", "tri"},
          {"dcs",
           {{{"name", "a"}, {"nodes", 1}, {"gpus_per_node", 8}},
            {{"name", "c"}, {"nodes", 1}, {"gpus_per_node", 8}},
            {{"name", "b"}, {"nodes", 1}, {"gpus_per_node", 8}, {"free_gpus", 8}}}},
          {"wan",
           {{{"between", {"a", "b"}}, {"rtt", "2ms"}, {"rate", "100Gbit"}},
            {{"between", {"a", "c"}}, {"rtt", "200ms"}, {"rate", "10Mbit"}},
            {{"between", {"c", "b"}}, {"rtt", "200ms"}, {"rate", "10Mbit"}}}}};
}

workload::Scenario gpt_scenario(int pp, int dp, int tp) {
  workload::Scenario s;
  s.name = "tri-1b";
  s.source_file = "tri-1b.json";
  s.model = *workload::find_preset("1.3b");
  s.parallelism = {pp, dp, tp};
  s.micro_batches = 8;
  s.iterations = 2;
  s.warmup = 1;
  s.connections = 4;
  return s;
}

SearchOptions options(const core::Topology& topo, long gpus) {
  SearchOptions o;
  o.gpus = {gpus, gpus};
  o.dcs = topology_offers(topo, json::object());
  o.top = 3;
  o.fast.bursts = sim::SimOptions::Bursts::shared;
  o.fast.acks = false;
  o.knob_structures = 1;
  o.connection_choices = {1, 4};
  o.policies = {"fair"};
  return o;
}

std::string plan_error(const workload::Scenario& s, const core::Topology& topo, const SearchOptions& o) {
  try {
    search(s, topo, o);
  } catch (const PlanError& e) {
    return e.what();
  }
  FAIL("expected a PlanError");
  return {};
}

std::string invalid(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  FAIL("expected std::invalid_argument");
  return {};
}

}  // namespace

TEST_CASE("plan: a topology's free_gpus gives each DC its own count", "[unit][planner]") {
  const auto doc = triangle_doc();
  const auto topo = core::parse_topology(doc, "tri.json", {});
  auto with_free = doc;
  with_free["dcs"][0]["free_gpus"] = 2048;
  const auto offers = topology_offers(topo, with_free);
  REQUIRE(offers.size() == 3);
  CHECK(offers[0] == DcOffer{0, 2048});  // free_gpus
  CHECK(offers[1] == DcOffer{1, 8});     // nodes x gpus_per_node
  CHECK(offers[2] == DcOffer{2, 8});

  // The lab's parser takes the field and checks it, naming the field.
  auto bad = doc;
  bad["dcs"][1]["free_gpus"] = -4;
  try {
    core::parse_topology(bad, "tri.json", {});
    FAIL("expected a ConfigError");
  } catch (const core::ConfigError& e) {
    CHECK_THAT(std::string(e.what()), Contains("/dcs/1/free_gpus") && Contains("-4 is outside 0..10000000"));
  }
}

TEST_CASE("plan: --dcs NAME[:GPUS] and its errors", "[unit][planner]") {
  const auto topo = core::parse_topology(triangle_doc(), "tri.json", {});
  const std::vector<DcOffer> offers = {{0, 64}, {1, 8}, {2, 8}};
  CHECK(parse_dc_list("b,a", topo, offers) == std::vector<DcOffer>{{2, 8}, {0, 64}});
  CHECK(parse_dc_list("a:2048, c", topo, offers) == std::vector<DcOffer>{{0, 2048}, {1, 8}});
  CHECK(parse_dc_list("c:0", topo, offers) == std::vector<DcOffer>{{1, 0}});

  CHECK(invalid([&] { parse_dc_list("a,d", topo, offers); }) ==
        "--dcs: unknown DC \"d\" (did you mean \"a\"?); lab tri has a, c, b");
  CHECK_THAT(invalid([&] { parse_dc_list("a,,b", topo, offers); }), Contains("an empty entry"));
  CHECK_THAT(invalid([&] { parse_dc_list("", topo, offers); }), Contains("an empty entry"));
  CHECK(invalid([&] { parse_dc_list("a,b,a:8", topo, offers); }) == "--dcs: DC \"a\" named twice");
  for (const char* bad : {"a:x", "a:-1", "a:1.5", "a:", "a:20000000"})
    CHECK_THAT(invalid([&] { parse_dc_list(bad, topo, offers); }),
               Contains("must be a whole number from 0 to 10,000,000"));
}

TEST_CASE("plan: --gpus N or LO-HI", "[unit][planner]") {
  CHECK(parse_gpu_range("2560") == GpuRange{2560, 2560});
  CHECK(parse_gpu_range("1536-4096") == GpuRange{1536, 4096});
  CHECK(gpu_counts({1536, 4096}) == std::vector<long>{1536, 1901, 2267, 2633, 2998, 3364, 3730, 4096});
  CHECK(gpu_counts({32, 32}) == std::vector<long>{32});
  CHECK_THAT(invalid([] { parse_gpu_range("many"); }), Contains("give a number of GPUs (2560) or a range"));
  CHECK_THAT(invalid([] { parse_gpu_range("4096-1536"); }), Contains("low end is above its high end"));
  CHECK_THAT(invalid([] { parse_gpu_range("0"); }), Contains("from 1 to 65,536"));
}

TEST_CASE("plan: memory by the workload layer's model, against 80 GiB", "[unit][planner]") {
  workload::Scenario base;
  base.model = *workload::find_preset("70b");
  // One pipeline stage of 70B over 8 GPUs: 16 x 70.6e9 / 8 = 141 GB of state alone.
  const auto one = memory_use(base, {1, 1, 8}, workload::Schedule::one_f_one_b, 8, 1);
  CHECK_FALSE(one.fits());
  CHECK(one.state_bytes > 140e9);
  // Five stages of 16 layers: what the shared model says for the same split.
  const auto f = memory_use(base, {5, 1, 8}, workload::Schedule::one_f_one_b, 8, 1);
  CHECK(f.fits());
  CHECK(f.stage == 0);
  workload::Scenario s = base;
  s.parallelism = {5, 1, 8};
  s.schedule = workload::Schedule::one_f_one_b;
  s.micro_batches = 8;
  s.micro_batch_size = 1;
  const auto stages = workload::stage_memory(s);
  CHECK(f.peak_bytes == Approx(static_cast<double>(stages.at(0).needed())));
  CHECK(stages.at(0).peak_in_flight == 5);  // 1F1B: pp - stage micro-batches in flight
  // GPipe holds all of them: more activations, and 16 do not fit.
  const auto g = memory_use(base, {5, 1, 8}, workload::Schedule::gpipe, 8, 1);
  CHECK(g.activation_bytes > f.activation_bytes * 1.5);
  CHECK_FALSE(memory_use(base, {5, 1, 8}, workload::Schedule::gpipe, 16, 1).fits());
}

TEST_CASE("plan: memory of ZB-H1 and interleaved 1F1B peaks within 4 pp micro-batches", "[unit][planner]") {
  // The search shares one memory figure among micro-batch counts above 4 pp; this is
  // what makes that exact.
  workload::Scenario base;
  base.model = *workload::find_preset("7b");
  for (int pp : {2, 3, 4, 8}) {
    INFO("pp " << pp);
    const auto zb4 = memory_use(base, {pp, 1, 4}, workload::Schedule::zb_h1, 4 * pp, 1);
    CHECK(memory_use(base, {pp, 1, 4}, workload::Schedule::zb_h1, 9 * pp + 1, 1).peak_bytes == zb4.peak_bytes);
    for (int v : {2, 4}) {
      const auto i4 = memory_use(base, {pp, 1, 4}, workload::Schedule::interleaved_1f1b, 4 * pp, 1, {}, v);
      CHECK(memory_use(base, {pp, 1, 4}, workload::Schedule::interleaved_1f1b, 12 * pp, 1, {}, v).peak_bytes ==
            i4.peak_bytes);
    }
  }
}

TEST_CASE("plan: the memoized schedule peaks equal the step-by-step walk", "[unit][planner]") {
  using workload::Schedule;
  int compared = 0;
  for (int pp = 1; pp <= 8; ++pp)
    for (int m = 1; m <= 4 * pp + 3; ++m)
      for (Schedule sched : {Schedule::gpipe, Schedule::one_f_one_b, Schedule::zb_h1, Schedule::interleaved_1f1b})
        for (int v : {1, 2, 3, 4}) {
          if ((sched == Schedule::interleaved_1f1b) != (v > 1)) continue;
          if (sched == Schedule::interleaved_1f1b && (pp < 2 || m % pp != 0)) continue;
          // Even, front- and back-heavy chunk splits (the balanced search makes uneven ones).
          std::vector<std::vector<int>> splits = {std::vector<int>(static_cast<std::size_t>(v), 3)};
          std::vector<int> front(static_cast<std::size_t>(v), 2), back(static_cast<std::size_t>(v), 2);
          front.front() = 5;
          back.back() = 7;
          splits.push_back(front);
          splits.push_back(back);
          for (int stage = 0; stage < pp; ++stage)
            for (const auto& chunks : splits)
              for (bool head : {false, true}) {
                INFO(workload::to_string(sched) << " v " << v << " pp " << pp << " stage " << stage << " m " << m
                                                << " head " << head << " chunk0 " << chunks.front());
                const auto walked = workload::schedule_peak_stepwise(sched, v, pp, stage, m, chunks, head);
                const auto memo = workload::schedule_peak(sched, v, pp, stage, m, chunks, head);
                CHECK(memo.layer_units == walked.layer_units);
                CHECK(memo.head_units == walked.head_units);
                CHECK(memo.in_flight == walked.in_flight);
                // Asked again: the memo answers the same.
                CHECK(workload::schedule_peak(sched, v, pp, stage, m, chunks, head) == walked);
                ++compared;
              }
        }
  CHECK(compared > 5000);
}

TEST_CASE("plan: balanced layers even out the stages' compute within memory", "[unit][planner]") {
  workload::Scenario s;
  s.model = *workload::find_preset("1.3b");  // 24 layers; the LM head weighs about two layers
  s.parallelism = {3, 1, 8};
  s.micro_batches = 8;
  const auto slowest = [&](const std::vector<int>& layers, const std::vector<double>& speed) {
    double t = 0;
    const auto costs = workload::stage_costs(s.model, s.parallelism, 1, layers);
    for (std::size_t i = 0; i < costs.size(); ++i)
      t = std::max(t, (costs[i].forward_flops + costs[i].backward_flops) / speed[i]);
    return t;
  };
  const std::vector<double> same{1, 1, 1};
  const auto even = workload::split_layers(24, 3);
  const auto bal = balanced_layers(s, same);
  REQUIRE(bal.size() == 3);
  CHECK(bal[0] + bal[1] + bal[2] == 24);
  CHECK(bal[2] < even[2]);  // the head's stage takes fewer layers
  CHECK(slowest(bal, same) < slowest(even, same));
  // GPUs of half the speed on the middle stage: it takes about half the layers.
  const std::vector<double> slow_middle{2, 1, 2};
  const auto het = balanced_layers(s, slow_middle);
  CHECK(het[0] + het[1] + het[2] == 24);
  CHECK(het[1] * 2 <= het[0] + 1);
  CHECK(slowest(het, slow_middle) < slowest(even, slow_middle) * 0.8);
  // Interleaved: every stage keeps a layer per model chunk.
  s.schedule = workload::Schedule::interleaved_1f1b;
  s.virtual_stages = 4;
  s.micro_batches = 6;
  for (int n : balanced_layers(s, {1, 1, 100})) CHECK(n >= 4);

  // Memory binds: 70B over 5 stages under 1F1B, where stage 0 holds 5 micro-batches and the
  // even split needs most there. The balanced split fits wherever the even one does.
  workload::Scenario big;
  big.model = *workload::find_preset("70b");
  big.parallelism = {5, 1, 8};
  big.micro_batches = 8;
  const auto b70 = balanced_layers(big, std::vector<double>(5, 1.0));
  CHECK(std::accumulate(b70.begin(), b70.end(), 0) == 80);
  CHECK(memory_use(big, {5, 1, 8}, workload::Schedule::one_f_one_b, 8, 1, b70).fits());
}

TEST_CASE("plan: the search covers ZB-H1, interleaved 1F1B and balanced splits; their plans load and simulate",
          "[unit][planner]") {
  const auto topo = core::parse_topology(triangle_doc(), "tri.json", {});
  auto s = gpt_scenario(3, 2, 4);
  auto o = options(topo, 16);
  o.dcs = parse_dc_list("a,b", topo, topology_offers(topo, json::object()));
  const auto r = search(s, topo, o);
  for (const char* name : {"1f1b", "gpipe", "zb-h1", "interleaved-1f1b v2", "interleaved-1f1b v4"}) {
    INFO(name);
    REQUIRE(r.fit_by_schedule.count(name) == 1);
    CHECK(r.fit_by_schedule.at(name) > 0);
  }
  CHECK(r.fit_by_split.at("balanced") > 0);
  CHECK(r.fit_by_split.at("even") + r.fit_by_split.at("balanced") == r.fit);
  for (const auto& c : r.fast) {
    CHECK(static_cast<int>(c.layers.size()) == c.par.pp);
    CHECK(std::accumulate(c.layers.begin(), c.layers.end(), 0) == s.model.layers);
    if (c.schedule == workload::Schedule::interleaved_1f1b) CHECK(c.micro_batches % c.par.pp == 0);
    CHECK_THAT(c.describe(topo), Contains("layers " + c.layers_text() + " " + c.split_name()) &&
                                     Contains(c.schedule_name()));
  }

  // A balanced, interleaved plan across both DCs (two stages in a, one in b), written as
  // `plan` writes it: the file loads (layers_per_stage, virtual_stages) and simulates.
  Candidate c;
  c.chain = {0, 2};
  c.stages = {2, 1};
  c.par = {3, 1, 4};
  c.micro_batches = 6;
  c.schedule = workload::Schedule::interleaved_1f1b;
  c.virtual_stages = 2;
  c.connections = 4;
  workload::Scenario shape = s;
  shape.parallelism = c.par;
  shape.schedule = c.schedule;
  shape.virtual_stages = 2;
  shape.micro_batches = 6;
  c.layers = balanced_layers(shape, {1, 1, 1});
  c.balanced = true;
  REQUIRE(c.layers != workload::split_layers(s.model.layers, 3));
  for (const auto& [layers, text] : std::vector<std::pair<std::vector<int>, std::string>>{
           {{17, 17, 17, 17, 12}, "17x4+12"}, {{16, 16}, "16x2"}, {{9, 8, 7}, "9+8+7"}, {{80}, "80"}}) {
    Candidate t;
    t.layers = layers;
    CHECK(t.layers_text() == text);
  }
  CHECK_THAT(c.describe(topo), Contains("layers " + c.layers_text() + " balanced") &&
                                   Contains("interleaved-1f1b v2"));
  CHECK(memory_use(s, c.par, c.schedule, 6, 1, c.layers, 2).fits());
  const test::TempDir dir("planner-uneven");
  const auto topo_file = dir.write("plan-1/topology.json", core::to_json(candidate_topology(topo, c)).dump(2));
  const auto scen = candidate_scenario(s, topo, c, "tri-1b-plan-1", topo_file);
  const auto file = dir.write("plan-1/scenario.json", workload::to_json(scen).dump(2));
  const auto back = workload::load_scenario(file);
  CHECK(back.layers_per_stage == c.layers);
  CHECK(back.virtual_stages == 2);
  CHECK(back.schedule == workload::Schedule::interleaved_1f1b);
  const auto plan = workload::build_plan(back, core::load_topology(back.topology_path));
  CHECK(plan.stages.at(2).layers == c.layers.at(2));
  CHECK(sim::simulate(plan).end_ns() > 0);
  if (std::filesystem::exists(test::wanlab())) {
    const auto sim = test::run(test::wanlab() + " simulate " + file.string() +
                               " --policies fair --connections 4 --no-placement-baseline --out " +
                               (dir.path() / "sim").string());
    INFO(sim.out);
    CHECK(sim.code == 0);
  }
}

TEST_CASE("plan: on a small lab the search finds the known best plan, never slower than the greedy rule",
          "[unit][planner]") {
  const auto topo = core::parse_topology(triangle_doc(), "tri.json", {});
  // pp 3 x dp 2 x tp 4: one stage per 8-GPU DC; the greedy rule takes a, c, b (ties in
  // topology order) and crosses the 10 Mbit links twice.
  const auto s = gpt_scenario(3, 2, 4);
  auto o = options(topo, 24);
  const auto r = search(s, topo, o);
  CHECK(r.batch == 16);  // 8 micro-batches x 1 x dp 2
  REQUIRE(r.greedy.size() == 1);
  CHECK(r.greedy[0].chain == std::vector<std::size_t>{0, 1, 2});
  REQUIRE(!r.ranked.empty());
  const auto& best = r.ranked.front();
  REQUIRE(best.full_s);
  // The best keeps off the slow DC.
  CHECK(std::find(best.chain.begin(), best.chain.end(), std::size_t{1}) == best.chain.end());
  CHECK(best.micro_batches * best.micro_batch_size * best.par.dp >= 16);
  for (const auto& c : r.ranked)
    if (c.greedy && c.full_s) CHECK(*best.full_s * 50 < *c.full_s);
  // Ranked by the default model, fastest per sequence first.
  for (std::size_t i = 1; i < r.ranked.size(); ++i)
    if (r.ranked[i].full_s)
      CHECK(*r.ranked[i - 1].full_s / r.ranked[i - 1].sequences() <= *r.ranked[i].full_s / r.ranked[i].sequences());

  // Its scenario parses back and runs: what run, bench and simulate read first.
  const auto ctopo = candidate_topology(topo, best);
  const test::TempDir dir("planner");
  const auto topo_file = dir.write("topology.json", core::to_json(ctopo).dump(2));
  const auto scen = candidate_scenario(s, topo, best, "tri-1b-plan-1", topo_file);
  const auto back = workload::parse_scenario(workload::to_json(scen), "plan-1/scenario.json", dir.path());
  CHECK(core::same_dcs(core::load_topology(back.topology_path), ctopo));
  CHECK(back.placement == scen.placement);
  const auto plan = workload::build_plan(back, ctopo);
  const auto sim = sim::simulate(plan);
  CHECK(sim.end_ns() > 0);
}

TEST_CASE("plan: only the DCs named, with the GPUs given", "[unit][planner]") {
  const auto topo = core::parse_topology(triangle_doc(), "tri.json", {});
  auto o = options(topo, 24);
  o.dcs = parse_dc_list("c", topo, topology_offers(topo, json::object()));
  const auto r = search(gpt_scenario(3, 2, 4), topo, o);
  REQUIRE(!r.ranked.empty());
  for (const auto& c : r.ranked) {
    CHECK(c.chain == std::vector<std::size_t>{1});
    CHECK(c.gpus() <= 8);
  }
}

TEST_CASE("plan: bad input is refused in one line", "[unit][planner]") {
  const auto topo = core::parse_topology(triangle_doc(), "tri.json", {});
  SECTION("a model that fits nowhere") {
    auto s = gpt_scenario(3, 1, 8);
    s.model = *workload::find_preset("70b");
    // 16 GPUs: pp 2 x tp 8 needs 70.6 GB of state and 22.8 GB of activations per GPU.
    const auto e = plan_error(s, topo, options(topo, 16));
    CHECK_THAT(e, Contains("the model fits nowhere: its smallest split needs") && Contains("more than 80 GiB"));
    CHECK(e.find('\n') == std::string::npos);
  }
  SECTION("a budget too short for one candidate") {
    auto o = options(topo, 24);
    o.budget_s = 1;
    double t = 0;
    o.clock = [&t] { return t += 1; };
    const auto e = plan_error(gpt_scenario(3, 2, 4), topo, o);
    CHECK_THAT(e, Contains("--budget 1 s is too short for one candidate"));
    CHECK(e.find('\n') == std::string::npos);
  }
  SECTION("a budget that runs out in the estimates keeps the best so far") {
    auto o = options(topo, 24);
    const auto whole = search(gpt_scenario(3, 2, 4), topo, o);
    // Every clock reading takes a second: the estimates stop at half the budget.
    o.budget_s = 2 * 40;
    double t = 0;
    o.clock = [&t] { return t += 1; };
    const auto cut = search(gpt_scenario(3, 2, 4), topo, o);
    CHECK(cut.budget_ran_out);
    CHECK(cut.space < whole.space);
    CHECK(cut.space <= 40);
    REQUIRE(!cut.ranked.empty());
    CHECK(cut.ranked.front().full_s.has_value());
  }
  SECTION("no DC") {
    auto o = options(topo, 24);
    o.dcs.clear();
    CHECK_THAT(plan_error(gpt_scenario(3, 2, 4), topo, o), Contains("no DC to plan on"));
  }
}

TEST_CASE("plan: the CLI writes plans that simulate and bench take; bad input is one line, exit 2",
          "[unit][planner][cli]") {
  if (!std::filesystem::exists(test::wanlab())) {
    WARN("no wanlab binary at " << test::wanlab() << " (build the wanlab target): not run");
    return;
  }
  const test::TempDir dir("plan-cli");
  const std::string scenario = std::string(WANLAB_SOURCE_DIR) + "/bench/scenarios/two-dc-1b.json";
  const auto out = (dir.path() / "plan").string();
  const auto r = test::run(test::wanlab() + " plan " + scenario + " --top 2 --out " + out);
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Contains("x the tokens per second of Atlas's greedy rule"));
  for (const char* f : {"plan.json", "plan.md", "plan-1/scenario.json", "plan-1/topology.json", "plan-2/scenario.json",
                        "greedy-32/scenario.json", "plots/iteration-time.dat", "plots/iteration-time.gp"})
    CHECK(std::filesystem::exists(dir.path() / "plan" / f));
  for (const char* folder : {"plan-1", "greedy-32"}) {
    const auto file = out + "/" + folder + "/scenario.json";
    const auto sim = test::run(test::wanlab() + " simulate " + file +
                               " --policies fair --connections 4 --no-placement-baseline --out " + out + "/sim-" + folder);
    INFO(sim.out);
    CHECK(sim.code == 0);
    const auto bench = test::run(test::wanlab() + " bench " + file + " --mode simulate --policies fair --connections 4 " +
                                 "--no-placement-baseline --out " + out + "/bench-" + folder);
    INFO(bench.out);
    CHECK(bench.code == 0);
  }

  for (const std::string args : {"--dcs use,usx", "--gpus 4096-1536", "--dcs use:abc", "--budget 0"}) {
    const auto bad = test::run(test::wanlab() + " plan " + scenario + " " + args + " --out " + out + "-bad");
    INFO(args << ": " << bad.out);
    CHECK(bad.code == 2);
    CHECK_THAT(bad.out, Contains("wanlab: plan: "));
    const auto error = bad.out.substr(bad.out.find("wanlab: plan: "));
    CHECK(std::count(error.begin(), error.end(), '\n') == 1);
  }
  const auto missing = test::run(test::wanlab() + " plan " + out + "/none.json");
  CHECK(missing.code == 2);
  CHECK_THAT(missing.out, Contains("wanlab: plan: " + out + "/none.json: "));
}
