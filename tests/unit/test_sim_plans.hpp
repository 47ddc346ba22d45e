#pragma once
// Whole-plan helpers of the simulator tests (test_sim.cpp, test_sim_one_link.cpp): shipped
// scenarios and their plans, one-link pipelines, paper-scale options, exact models.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include "test_workload_fixtures.hpp"
#include "wanlab/sim/prefill.hpp"
#include "wanlab/sim/simulator.hpp"
#include "wanlab/workload/execute.hpp"
#include "wanlab/workload/metrics.hpp"

namespace sim_test {

using namespace wanlab;
using namespace wanlab::workload;
using program::SpanKind;

inline Scenario shipped_scenario(const std::string& name) {
  return load_scenario(testing::kSource + "/bench/scenarios/" + name);
}

inline Plan plan_of(const Scenario& s, const core::Topology& topo) {
  return build_plan(s, topo);
}

// The end of every iteration: the last worker's.
inline std::vector<std::int64_t> iteration_ends(const std::vector<program::WorkerReport>& reports) {
  std::vector<std::int64_t> ends;
  for (const auto& r : reports)
    for (std::size_t i = 0; i < r.iterations.size(); ++i) {
      if (ends.size() <= i) ends.push_back(0);
      ends[i] = std::max(ends[i], r.iterations[i].end_ns);
    }
  return ends;
}

inline const program::Span* first_span(const program::WorkerReport& r, SpanKind kind, int iteration) {
  for (const auto& s : r.spans)
    if (s.kind == kind && s.iteration == iteration) return &s;
  return nullptr;
}

// D pipelines of 2 stages across two DCs of D single-GPU nodes, one micro-batch, one
// iteration: every stage-0 GPU sends its activations (`bytes` on the wire) at once over
// the one link a -> b (RTT 20 ms).
struct OneLinkPipelines {
  core::Topology topo;
  Scenario s;
  double bytes = 0;
};

inline OneLinkPipelines one_link_pipelines(int d) {
  OneLinkPipelines o{testing::lab({{{"name", "a"}, {"nodes", d}, {"gpus_per_node", 1}},
                                   {{"name", "b"}, {"nodes", d}, {"gpus_per_node", 1}}}),
                     testing::scenario(2, d, 1, 1)};
  o.s.iterations = 1;
  o.s.warmup = 0;
  o.bytes = static_cast<double>(plan_of(o.s, o.topo).pipeline_message_bytes) * kWireOverhead;
  return o;
}

// When each stage-1 GPU got its activations: seconds after stage 0's forward ended, less
// the one-way delay.
inline std::vector<double> arrivals(const Scenario& s, const sim::SimResult& r, int d, double delay) {
  const auto reps = r.reports();
  const double t0 = static_cast<double>(first_span(reps[0], SpanKind::forward, 0)->end_ns) / 1e9;
  std::vector<double> out;
  for (int j = 0; j < d; ++j) {
    const auto* wait =
        first_span(reps[static_cast<std::size_t>(worker_id(s.parallelism, 1, j, 0))], SpanKind::recv_wait, 0);
    REQUIRE(wait != nullptr);
    out.push_back(static_cast<double>(wait->end_ns) / 1e9 - t0 - delay);
  }
  return out;
}

// three-dc-7b at full size (scale 1: WAN links of 3.9-4.4 Gbit/s, RTTs of 68-122 ms) under
// `policy`, with `dp` pipelines (the DCs grown to hold them) and `iterations`, the first a
// warm-up.
inline Plan full_size_three_dc_7b(const std::string& policy, int dp, int iterations) {
  auto s = shipped_scenario("three-dc-7b.json");
  s.scale = 1;
  s.lan_scale = 1;
  s.policy = policy;
  s.parallelism.dp = dp;
  s.iterations = iterations;
  s.warmup = 1;
  auto topo = core::load_topology(s.topology_path);
  for (auto& dc : topo.dcs) dc.nodes = dc.nodes * dp / 4;
  return plan_of(s, topo);
}

// The simulator's defaults with bench/paper_scale.py's node links (8 x 400 Gbit/s).
inline sim::SimOptions paper_options() {
  sim::SimOptions o;
  o.lan_rate_bps = 3.2e12;
  return o;
}

// The mean simulated time of the iterations after the first.
inline double seconds_per_iteration(const sim::SimResult& r) {
  const auto ends = iteration_ends(r.reports());
  REQUIRE(ends.size() >= 2);
  return static_cast<double>(ends.back() - ends.front()) / 1e9 / static_cast<double>(ends.size() - 1);
}

// The models the exact checks below are written for: the FLOP model's compute times (no
// jitter) and, unless a check picks another, bursts as max-min flows.
inline sim::SimOptions exact(sim::SimOptions::Bursts bursts = sim::SimOptions::Bursts::shared) {
  sim::SimOptions o;
  o.compute_jitter = 0;
  o.bursts = bursts;
  return o;
}

}  // namespace sim_test
