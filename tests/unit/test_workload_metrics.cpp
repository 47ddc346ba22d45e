// Run metrics from worker reports (iteration times, GPU utilization, bubble fraction) on a
// hand-made report, and the Chrome trace of an executed plan.
#include <catch2/catch.hpp>

#include <map>
#include <tuple>

#include "test_workload_fixtures.hpp"
#include "wanlab/workload/execute.hpp"
#include "wanlab/workload/metrics.hpp"
#include "wanlab/workload/plan.hpp"

using namespace wanlab;
using namespace wanlab::workload;
using namespace wanlab::workload::testing;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using nlohmann::json;
using program::Span;
using program::SpanKind;

namespace {

core::Topology one_dc() {
  return lab(json::array({{{"name", "a"}, {"nodes", 1}, {"gpus_per_node", 8}}}));
}

Span span(SpanKind kind, int iteration, std::int64_t start, std::int64_t end) {
  return Span{kind, iteration, -1, start, end, 0, -1};
}

}  // namespace

TEST_CASE("quantiles interpolate between ranks", "[unit][workload][metrics]") {
  CHECK(quantile({}, 0.5) == 0);
  CHECK(quantile({3}, 0.99) == 3);
  CHECK(quantile({4, 1, 3, 2}, 0.5) == Approx(2.5));
  CHECK(quantile({1, 2}, 0.99) == Approx(1.99));
  CHECK(quantile({1, 2, 3}, 1) == 3);
}

TEST_CASE("summarize a hand-made report", "[unit][workload][metrics]") {
  const auto plan = build_plan(scenario(2, 1, 1, 1), one_dc());  // 3 iterations, 1 warm-up
  // Times in ns.
  //   worker 0 ends its iterations at 100, 250, 400; worker 1 at 120, 240, 390.
  //   Iteration ends: 120, 250, 400 -> times 120, 130, 150; measured (after 1 warm-up):
  //   130 and 150: mean 140, p50 140, p99 130 + 0.99 x 20 = 149.8.
  //   Window: [120, 400], 280 long.
  //   Worker 0 in the window: forwards [100,140] clipped to 20 and 40, backwards 50 + 50:
  //   160 of training (its iteration-0 backward [60,100] lies before the window), plus a
  //   prefill of 40: busy 200.
  //   Worker 1: forwards 40 + 40, backwards 20 + 20 = 120 of training ([80,120] is outside),
  //   plus a prefill [110,150] of which 30 lies inside: busy 150. Its recv waits are no compute.
  //   Utilization 200/280 and 150/280, mean 175/280. Bubble 1 - (160 + 120)/2/280 = 1 - 140/280.
  //   Training compute per measured iteration: worker 0 80, worker 1 60, mean 70.
  program::WorkerReport w0{0, {{0, 100}, {100, 250}, {250, 400}}, {}};
  w0.spans = {span(SpanKind::forward, 0, 0, 40),     span(SpanKind::backward, 0, 60, 100),
              span(SpanKind::forward, 1, 100, 140),  span(SpanKind::prefill, 1, 150, 190),
              span(SpanKind::backward, 1, 200, 250), span(SpanKind::forward, 2, 250, 290),
              span(SpanKind::send, 2, 290, 390),     span(SpanKind::backward, 2, 350, 400)};
  program::WorkerReport w1{1, {{0, 120}, {120, 240}, {240, 390}}, {}};
  w1.spans = {span(SpanKind::recv_wait, 0, 0, 40),    span(SpanKind::forward, 0, 40, 80),
              span(SpanKind::backward, 0, 80, 120),   span(SpanKind::prefill, 0, 110, 150),
              span(SpanKind::recv_wait, 1, 120, 140), span(SpanKind::forward, 1, 140, 180),
              span(SpanKind::backward, 1, 180, 200),  span(SpanKind::forward, 2, 290, 330),
              span(SpanKind::backward, 2, 330, 350)};
  const auto s = summarize(plan, {w1, w0});  // any order

  const auto& it = s["iteration_time_s"];
  CHECK(it["warmup"] == 1);
  REQUIRE(it["per_iteration"].size() == 3);
  CHECK(it["per_iteration"][0].get<double>() == Approx(120e-9));
  CHECK(it["per_iteration"][1].get<double>() == Approx(130e-9));
  CHECK(it["per_iteration"][2].get<double>() == Approx(150e-9));
  CHECK(it["mean"].get<double>() == Approx(140e-9));
  CHECK(it["p50"].get<double>() == Approx(140e-9));
  CHECK(it["p99"].get<double>() == Approx(149.8e-9));
  CHECK(s["window_s"]["start"].get<double>() == Approx(120e-9));
  CHECK(s["window_s"]["end"].get<double>() == Approx(400e-9));

  const auto& gpus = s["gpu_utilization"]["per_gpu"];
  REQUIRE(gpus.size() == 2);
  CHECK(gpus[0]["worker"] == 0);
  CHECK(gpus[0]["dc"] == "a");
  CHECK(gpus[0]["node"] == "a-0");
  CHECK(gpus[1]["gpu"] == 1);  // both stages share node a-0
  CHECK(gpus[0]["utilization"].get<double>() == Approx(200.0 / 280));
  CHECK(gpus[1]["utilization"].get<double>() == Approx(150.0 / 280));
  CHECK(s["gpu_utilization"]["mean"].get<double>() == Approx(175.0 / 280));
  CHECK(s["bubble_fraction"].get<double>() == Approx(1 - 140.0 / 280));
  CHECK(s["compute_time_s"]["per_iteration"].get<double>() == Approx(70e-9));
  CHECK(s["compute_time_s"]["per_stage_per_iteration"][0].get<double>() == Approx(80e-9));
  CHECK(s["compute_time_s"]["per_stage_per_iteration"][1].get<double>() == Approx(60e-9));

  CHECK_THROWS_WITH(summarize(plan, {w0}), Contains("no report of worker 1"));
  w1.iterations.pop_back();
  CHECK_THROWS_WITH(summarize(plan, {w0, w1}), Contains("worker 1 reports 2 of the scenario's 3 iterations"));
}

TEST_CASE("the Chrome trace has a track per GPU and no overlapping slices", "[unit][workload][metrics]") {
  const auto topo = shipped_topology("two-dc.json");
  auto s = scenario(2, 2, 8, 4);
  s.scale = 1;
  const auto plan = build_plan(s, topo);
  // Slow transfers so that sends overlap each other and need several lanes.
  const ComputeTime compute = [](int, const program::Op&) -> Duration { return 1ms; };
  const CommTime comm = [](int, int, std::uint64_t) -> Duration { return 5ms; };
  const auto reports = execute(plan.programs, s.iterations, compute, comm);
  const auto trace = chrome_trace(plan, reports);

  std::size_t spans = 0;
  for (const auto& r : reports) spans += r.spans.size();
  std::size_t slices = 0;
  std::map<std::pair<int, int>, std::string> threads;
  std::map<int, std::string> processes;
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> by_track;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") threads[{e["pid"], e["tid"]}] = e["args"]["name"];
    if (e["ph"] == "M" && e["name"] == "process_name") processes[e["pid"]] = e["args"]["name"];
    if (e["ph"] != "X") continue;
    ++slices;
    CHECK(e["ts"].get<double>() >= 0);
    by_track[{e["pid"], e["tid"]}].emplace_back(e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>());
  }
  CHECK(slices == spans);
  CHECK(processes.size() == 4);  // two nodes per DC
  CHECK(processes[1] == "use-0");
  CHECK(processes[3] == "euw-0");
  bool found = false;
  for (const auto& [key, name] : threads) found = found || name == "use-0 gpu3 stage0/dp0/tp3";
  CHECK(found);
  for (auto& [track, list] : by_track) {
    INFO(threads[track]);
    CHECK(threads.count(track) == 1);
    std::sort(list.begin(), list.end());
    for (std::size_t i = 1; i < list.size(); ++i) CHECK(list[i].first >= list[i - 1].second - 1e-9);
  }
}
