// sim_speed: how long the flow-level simulator takes for one training iteration, against
// GPUs x micro-batches (Google Benchmark).
//
// The scenario is bench/scenarios/three-dc-70b.json (70B, PP 4 across use/usw/euw, TP 8,
// full-size bytes and rates) grown to N GPUs as `wanlab simulate --gpus N` grows it, with
// M micro-batches and one iteration (no warm-up). Each benchmark times simulate() alone
// (the plan is built once beforehand); the table at the end gives the mean time per
// simulated iteration, the time per GPU x micro-batch and its ratio to the smallest run's
// (1.0: linear; above: worse than linear).
//
//   build/bench/sim_speed                          # the default sweep, fair and atlas
//   build/bench/sim_speed --benchmark_filter=atlas # Google Benchmark's own flags work
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <tuple>

#include "wanlab/sim/rescale.hpp"
#include "wanlab/sim/simulator.hpp"
#include "wanlab/workload/plan.hpp"

namespace {

using namespace wanlab;

std::filesystem::path scenario_file() {
  return std::filesystem::path(__FILE__).parent_path() / "scenarios" / "paper" / "three-dc-70b.json";
}

struct Row {
  double seconds = 0;  // mean simulate() time of one iteration
  double plan_s = 0;
  std::uint64_t events = 0, flows = 0, transfers = 0;
  double iteration_s = 0;  // simulated
};
std::map<std::tuple<std::string, long, long>, Row> g_rows;  // (policy, gpus, micro-batches)

workload::Plan make_plan(long gpus, long micro_batches, const std::string& policy, double& plan_s) {
  auto s = workload::load_scenario(scenario_file());
  auto topo = core::load_topology(s.topology_path);
  auto r = sim::rescale_gpus(s, topo, gpus);
  r.scenario.micro_batches = static_cast<int>(micro_batches);
  r.scenario.iterations = 1;
  r.scenario.warmup = 0;
  r.scenario.policy = policy;
  const auto t0 = std::chrono::steady_clock::now();
  auto plan = workload::build_plan(r.scenario, r.topology);
  plan_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return plan;
}

void BM_iteration(benchmark::State& state, const std::string& policy) {
  const long gpus = state.range(0);
  const long mb = state.range(1);
  double plan_s = 0;
  const auto plan = make_plan(gpus, mb, policy, plan_s);
  sim::SimResult last;
  double total = 0;
  std::int64_t runs = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    last = sim::simulate(plan);
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++runs;
    benchmark::DoNotOptimize(last.reports.data());
  }
  std::int64_t end = 0;
  for (const auto& r : last.reports)
    for (const auto& it : r.iterations) end = std::max(end, it.end_ns);
  state.SetComplexityN(gpus * mb);
  state.counters["gpus"] = static_cast<double>(gpus);
  state.counters["micro_batches"] = static_cast<double>(mb);
  state.counters["events"] = static_cast<double>(last.stats.events);
  state.counters["simulated_s"] = static_cast<double>(end) / 1e9;
  g_rows[{policy, gpus, mb}] = {total / static_cast<double>(runs), plan_s, last.stats.events, last.stats.flows,
                                last.stats.transfers, static_cast<double>(end) / 1e9};
}

void sweep(benchmark::internal::Benchmark* b) {
  for (long gpus : {256, 1024, 4096, 16384}) b->Args({gpus, 8});
  for (long mb : {16, 32}) b->Args({16384, mb});
  b->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.5)->Complexity(benchmark::oN);
}

BENCHMARK_CAPTURE(BM_iteration, fair, std::string("fair"))->Apply(sweep);
BENCHMARK_CAPTURE(BM_iteration, atlas, std::string("atlas"))->Apply(sweep);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (g_rows.empty()) return 0;
  fmt::print("\nOne iteration of {} grown to N GPUs (simulate() alone; plan built beforehand):\n",
             scenario_file().filename().string());
  fmt::print("| policy | GPUs | micro-batches | GPUs x mb | simulated iteration (s) | wall per iteration (s) | "
             "us per GPU x mb | ratio to linear | events | flows | plan build (s) |\n");
  fmt::print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  std::map<std::string, double> first;  // per policy: us per GPU x mb of its smallest run
  for (const auto& [key, row] : g_rows) {
    const auto& [policy, gpus, mb] = key;
    const double per = row.seconds * 1e6 / static_cast<double>(gpus * mb);
    if (!first.contains(policy)) first[policy] = per;
    fmt::print("| {} | {} | {} | {} | {:.1f} | {:.3f} | {:.2f} | {:.2f} | {} | {} | {:.3f} |\n", policy, gpus, mb,
               gpus * mb, row.iteration_s, row.seconds, per, per / first[policy], row.events, row.flows, row.plan_s);
  }
  return 0;
}
