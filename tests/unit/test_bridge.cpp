// The lab-to-simulator bridge written once: a WAN message's arbiter request, windows.csv,
// a link's round trip, the pipeline tags' kinds and a ring's neighbours, each one function
// that the lab's run windows, the simulator and the reference share; the lab and the
// simulator checked against each other where they used to hold copies.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "golden.hpp"
#include "process.hpp"
#include "temp_dir.hpp"
#include "test_workload_fixtures.hpp"
#include "wanlab/common/ring.hpp"
#include "wanlab/core/round_trip.hpp"
#include "wanlab/run/windows.hpp"
#include "wanlab/sim/simulator.hpp"
#include "wanlab/sim/windows_csv.hpp"
#include "wanlab/workload/plan.hpp"
#include "wanlab/workload/wan_transfer.hpp"

using namespace wanlab;
using nlohmann::json;

namespace {

constexpr Nanos kMs = 1'000'000;

// Two DCs of 2 nodes with 2 GPUs each; pp 2 x dp 2 x tp 2, 2 connections per WAN peer:
// stage 0 in use, stage 1 in euw, each replica's TP pair on one node.
workload::Plan two_dc_plan(const std::string& policy) {
  auto topo = workload::testing::lab(json::parse(R"([
      {"name": "use", "nodes": 2, "gpus_per_node": 2},
      {"name": "euw", "nodes": 2, "gpus_per_node": 2}])"));
  auto s = workload::testing::scenario(2, 2, 2, 2, workload::Schedule::gpipe);
  s.policy = policy;
  s.connections = 2;
  return workload::build_plan(s, topo);
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

}  // namespace

TEST_CASE("bridge: a WAN message's request counts its crossing TP ranks' connections", "[unit][bridge]") {
  const auto plan = two_dc_plan("atlas");
  workload::WanMessage m;
  m.src = 2;  // stage 0, replica 1, TP rank 0
  m.dst = 6;  // stage 1, replica 1, TP rank 0
  m.kind = workload::transfer_kind(workload::activation_tag(1));
  m.microbatch = 1;
  m.iteration = 3;
  m.payload_bytes = 2 * 1448.0;
  m.ranks = 2;
  m.needed_at = 7 * kMs;
  const auto spec = workload::transfer_request(plan, m);
  REQUIRE(spec.link == arbiter::LinkId{0, 1});
  // The payload with its headers (1514-byte frames for 1448 bytes of payload), rounded up.
  REQUIRE(spec.bytes == static_cast<std::uint64_t>(std::ceil(2 * 1448.0 * workload::kWireOverhead)));
  REQUIRE(spec.bytes >= 2 * 1514);
  REQUIRE(spec.kind == arbiter::TransferKind::activation);
  REQUIRE(spec.iteration == 3);
  REQUIRE(spec.pipeline == 1);
  REQUIRE(spec.src_stage == 0);
  REQUIRE(spec.dst_stage == 1);
  REQUIRE(spec.microbatch == 1);
  REQUIRE(spec.needed_at == 7 * kMs);
  REQUIRE(spec.connections == 2 * 2);  // ranks x the scenario's connections per WAN peer
  m.payload_bytes = 0;
  REQUIRE(workload::transfer_request(plan, m).bytes == 1);  // never an empty transfer
}

TEST_CASE("bridge: the lab's run windows and the simulator ask the arbiter for the same transfer",
          "[unit][bridge]") {
  const auto plan = two_dc_plan("atlas");
  // The simulator's first window of replica 0's micro-batch 0 activations.
  const auto sim = sim::simulate(plan);
  const arbiter::TransferSpec* simulated = nullptr;
  for (const auto& w : sim.windows)
    if (w.spec.iteration == 0 && w.spec.pipeline == 0 && w.spec.microbatch == 0 &&
        w.spec.kind == arbiter::TransferKind::activation && !simulated)
      simulated = &w.spec;
  REQUIRE(simulated);
  // The lab's: both TP ranks of replica 0 want micro-batch 0's activations.
  arbiter::ArbiterOptions o;
  o.pack_small_transfers = false;
  run::RunWindows lab("r1", plan, {1e9, 1e9}, arbiter::make_policy("atlas"), o, 0);
  run::WindowActions actions;
  const auto want = [](int worker, int peer) {
    return json{{"type", "want"}, {"run", "r1"}, {"worker", worker}, {"peer", peer}, {"iteration", 0},
                {"tag", workload::activation_tag(0)}, {"bytes", 1}};
  };
  REQUIRE_FALSE(lab.want(want(0, 4), 0, actions));
  const auto& asked = lab.arbiter().transfer(1).spec;  // the first transfer (ids from 1)
  REQUIRE(asked.link == simulated->link);
  REQUIRE(asked.bytes == simulated->bytes);
  REQUIRE(asked.kind == simulated->kind);
  REQUIRE(asked.pipeline == simulated->pipeline);
  REQUIRE(asked.src_stage == simulated->src_stage);
  REQUIRE(asked.dst_stage == simulated->dst_stage);
  REQUIRE(asked.microbatch == simulated->microbatch);
  REQUIRE(asked.connections == simulated->connections);
  REQUIRE(asked.connections == 4);
}

TEST_CASE("bridge: windows.csv, one writer: times since the origin, wire times left out when revoked",
          "[unit][bridge]") {
  const auto plan = two_dc_plan("atlas");
  arbiter::WindowRecord a;
  a.id = 0;
  a.spec.link = {0, 1};
  a.spec.bytes = 3028;
  a.spec.kind = arbiter::TransferKind::activation;
  a.spec.iteration = 1;
  a.spec.pipeline = 1;
  a.spec.src_stage = 0;
  a.spec.dst_stage = 1;
  a.spec.microbatch = 0;
  a.ready = 1'000 * kMs;
  a.start = 1'000 * kMs + 500'000;
  a.planned_end = 1'002 * kMs;
  a.end = 1'003 * kMs;
  auto b = a;
  b.id = 1;
  b.spec.link = {1, 0};
  b.spec.kind = arbiter::TransferKind::gradient;
  b.revoked = true;
  const auto wire = [](const arbiter::WindowRecord& w) {
    return w.id == 0 ? workload::WireTimes{1'001 * kMs, std::nullopt} : workload::WireTimes{1'001 * kMs, 1'002 * kMs};
  };
  const auto csv = lines(workload::windows_csv(plan.topology, {a, b}, wire, 1'000 * kMs));
  REQUIRE(csv.size() == 3);
  REQUIRE(csv[0] ==
          "src,dst,transfer,iteration,pipeline,src_stage,dst_stage,kind,microbatch,bytes,ready_s,planned_start_s,"
          "planned_end_s,granted_s,closed_s,wire_first_s,wire_last_s,revoked");
  REQUIRE(csv[1] == "use,euw,0,1,1,0,1,activation,0,3028,0.000000,0.000500,0.002000,0.000500,0.003000,0.001000,,0");
  REQUIRE(csv[2] == "euw,use,1,1,1,0,1,gradient,0,3028,0.000000,0.000500,0.002000,0.000500,0.003000,,,1");
}

TEST_CASE("bridge: the lab's and the simulator's windows.csv have the same columns", "[unit][bridge]") {
  const auto plan = two_dc_plan("atlas");
  const auto sim = sim::simulate(plan);
  REQUIRE_FALSE(sim.windows.empty());
  const auto simulated = lines(sim::windows_csv(plan.topology, sim));
  REQUIRE(simulated.size() == sim.windows.size() + 1);
  run::RunWindows lab("r1", plan, {1e9, 1e9}, arbiter::make_policy("atlas"), {}, 0);
  const auto empty = lines(lab.windows_csv(0));
  REQUIRE(empty.size() == 1);
  REQUIRE(empty[0] == simulated[0]);
  // Every simulated row has every column, and its wire times where the window was not revoked.
  for (std::size_t i = 1; i < simulated.size(); ++i) {
    const auto& row = simulated[i];
    REQUIRE(std::count(row.begin(), row.end(), ',') == 17);
    if (row.back() == '0') REQUIRE(row.find(",,") == std::string::npos);
  }
}

TEST_CASE("bridge: a link's round trip is its delay and its reverse link's, mirrored where there is none",
          "[unit][bridge]") {
  auto topo = workload::testing::lab(json::parse(R"([
      {"name": "use", "nodes": 1, "gpus_per_node": 1},
      {"name": "euw", "nodes": 1, "gpus_per_node": 1}])"));
  REQUIRE(topo.links.size() == 2);
  topo.links[0].params.delay = std::chrono::milliseconds(30);
  topo.links[1].params.delay = std::chrono::milliseconds(45);
  topo.links[0].params.jitter = std::chrono::milliseconds(5);  // not counted
  REQUIRE(core::round_trip(topo, topo.links[0]) == std::chrono::milliseconds(75));
  REQUIRE(core::round_trip(topo, topo.links[1]) == std::chrono::milliseconds(75));
  topo.links.pop_back();  // a one-way topology: the reverse is taken to mirror the link
  REQUIRE(core::round_trip(topo, topo.links[0]) == std::chrono::milliseconds(60));
}

TEST_CASE("bridge: pipeline tags: activations even, gradients odd, with and without chunks", "[unit][bridge]") {
  for (int mb = 0; mb < 5; ++mb) {
    REQUIRE_FALSE(workload::is_gradient_tag(workload::activation_tag(mb)));
    REQUIRE(workload::is_gradient_tag(workload::gradient_tag(mb)));
    for (int chunk = 0; chunk < 3; ++chunk) {
      REQUIRE(workload::transfer_kind(workload::activation_tag(mb, chunk, 5)) == arbiter::TransferKind::activation);
      REQUIRE(workload::transfer_kind(workload::gradient_tag(mb, chunk, 5)) == arbiter::TransferKind::gradient);
    }
  }
}

TEST_CASE("bridge: a ring's neighbours wrap around; a stranger has none", "[unit][bridge]") {
  const std::vector<int> ring{4, 9, 2, 7};
  REQUIRE(program::ring_neighbours(ring, 4) == program::RingNeighbours{7, 9});
  REQUIRE(program::ring_neighbours(ring, 9) == program::RingNeighbours{4, 2});
  REQUIRE(program::ring_neighbours(ring, 7) == program::RingNeighbours{2, 4});
  REQUIRE_FALSE(program::ring_neighbours(ring, 5));
  REQUIRE(program::ring_neighbours({3}, 3) == program::RingNeighbours{3, 3});
  REQUIRE(program::ring_neighbours({3, 8}, 3) == program::RingNeighbours{8, 8});
  REQUIRE(program::ring_next(3, 4) == 0);
  REQUIRE(program::ring_prev(0, 4) == 3);
}

TEST_CASE("bridge: the simulator runs bench's rounds and a prefill load's training-only twins",
          "[unit][bridge][cli]") {
  if (!std::filesystem::exists(test::wanlab())) {
    WARN("no wanlab binary at " << test::wanlab() << " (build the wanlab target): not run");
    return;
  }
  const test::TempDir dir("bridge-sim-repeat");
  const auto out = dir.path() / "sim";
  const auto r = test::run(test::wanlab() + " simulate " + WANLAB_SOURCE_DIR +
                           "/bench/scenarios/two-dc-1b-bubbletea.json --policies fair --connections 1 "
                           "--no-placement-baseline --bursts shared --timeline none --repeat 2 --out " +
                           out.string());
  INFO(r.out);
  REQUIRE(r.code == 0);
  const auto bench = json::parse(test::read_text((out / "bench.json").string()));
  REQUIRE(bench.at("repeat") == 2);
  const auto& variants = bench.at("variants");
  REQUIRE(variants.size() == 2);  // fair-k1 and its twin without the prefill load
  const auto named = [&](const std::string& name) {
    for (const auto& v : variants)
      if (v.at("name") == name) return v;
    FAIL("no variant " << name << " in bench.json");
    return json();
  };
  const auto with = named("fair-k1");
  const auto twin = named("fair-k1-training-only");
  CHECK(twin.at("training_only") == true);
  CHECK_FALSE(twin.at("summary").contains("prefill"));
  CHECK(with.at("summary").contains("training_slowdown"));
  for (const auto& v : variants) {
    REQUIRE(v.at("runs").size() == 2);
    CHECK(v.at("runs").at(1).at("folder") == v.at("name").get<std::string>() + "-run2");
    CHECK(std::filesystem::exists(out / (v.at("name").get<std::string>() + "-run2") / "summary.json"));
    CHECK(v.at("repeat").at("iteration_time_s").at("runs") == 2);
  }
  // The simulator is deterministic: its rounds agree to the digit.
  CHECK(with.at("runs").at(0).at("iteration_time_s") == with.at("runs").at(1).at("iteration_time_s"));
  CHECK(with.at("repeat").contains("training_slowdown"));
}

TEST_CASE("bridge: the sensitivity runs' jitter knob is the run with ten times the compute jitter",
          "[unit][bridge][cli]") {
  if (!std::filesystem::exists(test::wanlab())) {
    WARN("no wanlab binary at " << test::wanlab() << " (build the wanlab target): not run");
    return;
  }
  const test::TempDir dir("bridge-sim-jitter");
  const std::string scenario = std::string(WANLAB_SOURCE_DIR) + "/bench/scenarios/two-dc-1b.json";
  const auto simulate = [&](const std::string& name, const std::string& flags) {
    const auto out = dir.path() / name;
    const auto r = test::run(test::wanlab() + " simulate " + scenario +
                             " --policies fair --connections 4 --no-placement-baseline --timeline none --quiet " +
                             flags + " --out " + out.string());
    INFO(r.out);
    REQUIRE(r.code == 0);
    return json::parse(test::read_text((out / "bench.json").string()));
  };
  const auto knobs = simulate("default", "").at("variants").at(0).at("sensitivity");
  INFO(knobs.dump());
  for (const char* k : {"default", "step/4", "shared", "fifo", "jitter x10"}) CHECK(knobs.contains(k));
  // The same as a run of its own at 0.01 (the default jitter is 0.001).
  const auto own = simulate("jitter", "--compute-jitter 0.01 --no-sensitivity").at("variants").at(0);
  CHECK(knobs.at("jitter x10").get<double>() == own.at("summary").at("iteration_time_s").at("mean").get<double>());
  // No jitter, nothing to grow: no such run, and bench.md says n/a.
  const auto none = simulate("none", "--compute-jitter 0").at("variants").at(0).at("sensitivity");
  CHECK_FALSE(none.contains("jitter x10"));
  CHECK(none.contains("step/4"));
  const auto md = test::read_text((dir.path() / "none" / "bench.md").string());
  CHECK(md.find("| jitter x 10 (s) |") != std::string::npos);
}
