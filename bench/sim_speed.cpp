// sim_speed: how long the flow-level simulator takes for one training iteration, against
// GPUs x micro-batches (Google Benchmark).
//
// The scenario is bench/scenarios/paper/three-dc-70b.json (70B, PP 4 across use/usw/euw, TP 8,
// full-size bytes and rates) grown to N GPUs as `wanlab simulate --gpus N` grows it, with
// M micro-batches and one iteration (no warm-up). Each benchmark times simulate() alone
// (the plan is built once beforehand); the table at the end gives the mean time per
// simulated iteration, the time per GPU x micro-batch and its ratio to the smallest run's
// (1.0: linear; above: worse than linear).
//
// `paced/POLICY/N/16` does the same for bench/scenarios/paper/three-dc-7b.json (7B, PP 3, one
// stage per DC, 16 micro-batches): its messages fit in a TCP window, so they take the paced
// model (TCP into each link's FIFO queue), whose work grows with simulated time, not with
// messages. Its table follows the first.
//
// `prefill/N` times BubbleTea's prefill pass (sim::simulate_prefill) on a fair run of the
// same scenario at N GPUs (16 micro-batches, 2 iterations, 1 warm-up) with a Poisson load
// of N / 2 requests per second of 2048-token prompts through the training model: the
// dispatcher places each request among all N GPUs. The second table gives the time per
// request.
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

#include "wanlab/sim/prefill.hpp"
#include "wanlab/sim/rescale.hpp"
#include "wanlab/sim/simulator.hpp"
#include "wanlab/workload/plan.hpp"

namespace {

using namespace wanlab;

std::filesystem::path scenario_file(const std::string& name = "three-dc-70b.json") {
  return std::filesystem::path(__FILE__).parent_path() / "scenarios" / "paper" / name;
}

struct Row {
  double seconds = 0;  // mean simulate() time of one iteration
  double plan_s = 0;
  std::uint64_t events = 0, flows = 0, transfers = 0;
  double iteration_s = 0;  // simulated
};
using Rows = std::map<std::tuple<std::string, long, long>, Row>;  // (policy, gpus, micro-batches)
std::map<std::string, Rows> g_rows;                                 // by scenario file

workload::Plan make_plan(const std::string& file, long gpus, long micro_batches, const std::string& policy,
                         double& plan_s) {
  auto s = workload::load_scenario(scenario_file(file));
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

// `label`: the table's policy column (the policy, and what `options` change).
void run_iterations(benchmark::State& state, const std::string& file, const std::string& policy,
                    const sim::SimOptions& options = {}, const std::string& label = {}) {
  const long gpus = state.range(0);
  const long mb = state.range(1);
  double plan_s = 0;
  const auto plan = make_plan(file, gpus, mb, policy, plan_s);
  sim::SimResult last;
  double total = 0;
  std::int64_t runs = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = sim::simulate(plan, options);
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++runs;
    benchmark::DoNotOptimize(r.groups.data());
    last = std::move(r);  // the previous run's result is freed here, outside the timing
  }
  const std::int64_t end = last.end_ns();
  state.SetComplexityN(gpus * mb);
  state.counters["gpus"] = static_cast<double>(gpus);
  state.counters["micro_batches"] = static_cast<double>(mb);
  state.counters["events"] = static_cast<double>(last.stats.events);
  state.counters["simulated_s"] = static_cast<double>(end) / 1e9;
  g_rows[file][{label.empty() ? policy : label, gpus, mb}] = {total / static_cast<double>(runs), plan_s, last.stats.events,
                                      last.stats.flows, last.stats.transfers, static_cast<double>(end) / 1e9};
}

void BM_iteration(benchmark::State& state, const std::string& policy) {
  run_iterations(state, "three-dc-70b.json", policy);
}
void BM_paced(benchmark::State& state, const std::string& policy) { run_iterations(state, "three-dc-7b.json", policy); }
// The same with --paced-stream 8ms.
void BM_paced_streamed(benchmark::State& state, const std::string& policy) {
  sim::SimOptions o;
  o.paced_stream_ns = 8'000'000;
  run_iterations(state, "three-dc-7b.json", policy, o, policy + ", 8 ms streams");
}

struct PrefillRow {
  double seconds = 0;  // mean simulate_prefill() time
  double requests = 0, completed = 0, utilization = 0;
};
std::map<long, PrefillRow> g_prefill;  // by GPUs

void BM_prefill(benchmark::State& state) {
  const long gpus = state.range(0);
  auto s = workload::load_scenario(scenario_file());
  auto topo = core::load_topology(s.topology_path);
  auto r = sim::rescale_gpus(s, topo, gpus);
  r.scenario.micro_batches = 16;
  r.scenario.iterations = 2;
  r.scenario.warmup = 1;
  r.scenario.policy = "fair";
  workload::PrefillSpec p;
  p.model = r.scenario.model;
  p.rate_per_s = static_cast<double>(gpus) / 2;
  p.prompt.tokens = 2048;
  r.scenario.prefill = p;
  const auto plan = workload::build_plan(r.scenario, r.topology);
  const auto trained = sim::simulate(plan);
  nlohmann::json summary;
  double total = 0;
  std::int64_t runs = 0;
  for (auto _ : state) {
    auto reports = trained.reports();
    const auto t0 = std::chrono::steady_clock::now();
    summary = sim::simulate_prefill(plan, reports);
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++runs;
    benchmark::DoNotOptimize(reports.data());
  }
  state.counters["requests"] = summary["requests"].get<double>();
  g_prefill[gpus] = {total / static_cast<double>(runs), summary["requests"].get<double>(),
                     summary["completed"].get<double>(), 0};
}

void sweep(benchmark::internal::Benchmark* b) {
  for (long gpus : {256, 1024, 4096, 16384}) b->Args({gpus, 8});
  for (long mb : {16, 32}) b->Args({16384, mb});
  b->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.5)->Complexity(benchmark::oN);
}

BENCHMARK_CAPTURE(BM_iteration, fair, std::string("fair"))->Apply(sweep);
BENCHMARK_CAPTURE(BM_iteration, atlas, std::string("atlas"))->Apply(sweep);
// 7B: stages x replicas x TP, as `wanlab simulate --gpus` grows it (multiples of 24).
void paced_sweep(benchmark::internal::Benchmark* b) {
  for (long gpus : {1536, 6144, 16368}) b->Args({gpus, 16});
  b->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1)->Complexity(benchmark::oN);
}

BENCHMARK_CAPTURE(BM_paced, fair, std::string("fair"))->Apply(paced_sweep);
BENCHMARK_CAPTURE(BM_paced, atlas, std::string("atlas"))->Apply(paced_sweep);
BENCHMARK_CAPTURE(BM_paced_streamed, fair, std::string("fair"))->Apply(paced_sweep);
BENCHMARK_CAPTURE(BM_paced_streamed, atlas, std::string("atlas"))->Apply(paced_sweep);
BENCHMARK(BM_prefill)->Arg(256)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (!g_prefill.empty()) {
    fmt::print("\nBubbleTea's prefill pass (simulate_prefill) on a fair run of {} at N GPUs, N / 2 requests/s:\n",
               scenario_file().filename().string());
    fmt::print("| GPUs | requests | completed | wall (s) | us per request |\n| ---: | ---: | ---: | ---: | ---: |\n");
    for (const auto& [gpus, row] : g_prefill)
      fmt::print("| {} | {:.0f} | {:.0f} | {:.3f} | {:.1f} |\n", gpus, row.requests, row.completed, row.seconds,
                 row.requests > 0 ? row.seconds * 1e6 / row.requests : 0.0);
  }
  for (const auto& [file, rows] : g_rows) {
    fmt::print("\nOne iteration of {} grown to N GPUs (simulate() alone; plan built beforehand):\n", file);
    fmt::print("| policy | GPUs | micro-batches | GPUs x mb | simulated iteration (s) | wall per iteration (s) | "
               "us per GPU x mb | ratio to linear | events | flows | plan build (s) |\n");
    fmt::print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    std::map<std::string, double> first;  // per policy: us per GPU x mb of its smallest run
    for (const auto& [key, row] : rows) {
      const auto& [policy, gpus, mb] = key;
      const double per = row.seconds * 1e6 / static_cast<double>(gpus * mb);
      if (!first.contains(policy)) first[policy] = per;
      fmt::print("| {} | {} | {} | {} | {:.1f} | {:.3f} | {:.2f} | {:.2f} | {} | {} | {:.3f} |\n", policy, gpus, mb,
                 gpus * mb, row.iteration_s, row.seconds, per, per / first[policy], row.events, row.flows, row.plan_s);
    }
  }
  return 0;
}
