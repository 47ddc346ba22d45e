// The lab's photonic rails without a lab (docs/rails.md): the rail switch's circuit logic
// (shaping::RailCircuits) on a virtual clock, and a run's circuit plan learned from the
// programs (run::rail_plans), against what the simulator learns from the same programs.
#include <catch2/catch.hpp>

#include <vector>

#include "test_workload_fixtures.hpp"
#include "wanlab/core/diagnostics.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/run/run_rails.hpp"
#include "wanlab/shaping/rail_circuits.hpp"
#include "wanlab/sim/simulator.hpp"
#include "wanlab/workload/plan.hpp"
#include "wanlab/workload/wan_transfer.hpp"

using namespace wanlab;
using arbiter::RailPhase;
using shaping::RailCircuits;
using shaping::RailFrameInfo;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

constexpr Nanos kUs = 1'000;
constexpr Nanos kMs = 1'000'000;

// Four nodes; forward: 0 -> 2, 1 -> 3; backward: 2 -> 0, 3 -> 1 (a PP 2 x DP 2 layout).
shaping::RailPlan phase_plan() {
  shaping::RailPlan p;
  p.policy = "phase";
  p.configs = {RailPhase::pp_forward, RailPhase::pp_backward};
  p.out = {{2, 3, -1, -1}, {-1, -1, 0, 1}};
  return p;
}

// A TCP segment from node a to node b of `payload` bytes, flow identity from the nodes.
RailFrameInfo seg(int a, int b, std::uint32_t seq, std::uint32_t payload, std::uint32_t ack = 0, bool has_ack = false) {
  RailFrameInfo f;
  f.tcp = true;
  f.src_ip = 100 + static_cast<std::uint32_t>(a);
  f.dst_ip = 100 + static_cast<std::uint32_t>(b);
  f.sport = 1000;
  f.dport = 2000;
  f.seq = seq;
  f.payload = payload;
  f.ack = ack;
  f.has_ack = has_ack;
  return f;
}
// The ACK of a's flow to b, from b, covering `ack`.
RailFrameInfo ack_of(int a, int b, std::uint32_t ack) {
  auto f = seg(b, a, 0, 0, ack, true);
  f.sport = 2000;
  f.dport = 1000;
  return f;
}

core::Topology rails_dc(const json& fabric) {
  json doc{{"name", "r"},
           {"dcs", json::array({{{"name", "a"}, {"nodes", 4}, {"gpus_per_node", 2}, {"fabric", fabric}}})}};
  return core::parse_topology(doc, "r.json", {});
}

json ocs() {
  return {{"type", "rails"}, {"switching", "ocs"}, {"port_rate", "10Gbit"}, {"reconfiguration", "1ms"}};
}

// PP 2 x DP 2 x TP 2 on 4 nodes x 2 GPUs.
workload::Scenario pp_dp() {
  auto s = workload::testing::scenario(2, 2, 2, 4);
  s.iterations = 2;
  s.warmup = 0;
  return s;
}

}  // namespace

TEST_CASE("rail circuits: without a circuit plan every frame crosses", "[rails][lab][unit]") {
  RailCircuits c(4, kMs);
  CHECK_FALSE(c.circuits());
  CHECK(c.classify(1, 0, 3, seg(0, 3, 0, 1448), 0) == RailCircuits::Verdict::pass);
  c.set_plan(shaping::RailPlan{}, 0);  // the packet policy
  CHECK(c.classify(2, 3, 1, seg(3, 1, 0, 1448), 0) == RailCircuits::Verdict::pass);
  CHECK(c.next_event() == kNever);
}

TEST_CASE("rail circuits: a configuration passes its circuits and holds the rest at the sender",
          "[rails][lab][unit]") {
  RailCircuits c(4, kMs, 1024, 200 * kUs);
  c.set_plan(phase_plan(), 0);
  REQUIRE(c.circuits());
  CHECK(c.stats().current == "pp-forward");
  // Forward data crosses; its ACKs cross the circuit's reverse direction.
  CHECK(c.classify(1, 0, 2, seg(0, 2, 1, 1448), 0) == RailCircuits::Verdict::pass);
  CHECK(c.classify(2, 2, 0, ack_of(0, 2, 1449), 10 * kUs) == RailCircuits::Verdict::pass);
  // Backward data waits for its configuration; a pair no configuration joins is refused.
  CHECK(c.classify(3, 2, 0, seg(2, 0, 1, 1448), 20 * kUs) == RailCircuits::Verdict::held);
  CHECK(c.classify(4, 0, 1, seg(0, 1, 1, 1448), 20 * kUs) == RailCircuits::Verdict::dropped);
  CHECK(c.stats().no_circuit == 1);
  CHECK(c.stats().waiting_now == 1);
  // The forward frame is still inside the switch: no switch yet.
  std::vector<std::uint32_t> out;
  c.advance(500 * kUs, out);
  CHECK(out.empty());
  CHECK(c.stats().reconfigurations == 0);
  c.left();
  // Drained (nothing inside, all acknowledged, 200 us without data): the switch starts and
  // takes its latency, during which nothing crosses.
  c.advance(500 * kUs, out);
  CHECK(c.stats().reconfigurations == 1);
  CHECK(c.next_event() == 500 * kUs + kMs);
  CHECK(c.classify(5, 0, 2, seg(0, 2, 1449, 1448), 600 * kUs) == RailCircuits::Verdict::held);
  c.advance(500 * kUs + kMs - 1, out);
  CHECK(out.empty());
  c.advance(500 * kUs + kMs, out);
  CHECK(out == std::vector<std::uint32_t>{3});  // the backward frame, now
  CHECK(c.stats().current == "pp-backward");
  CHECK(c.stats().reconfiguring_ns == kMs);
  CHECK(c.stats().held_frames == 2);
}

TEST_CASE("rail circuits: unacknowledged data holds the circuits, for at most the ACK wait", "[rails][lab][unit]") {
  RailCircuits c(4, kMs, 1024, 200 * kUs);
  c.set_plan(phase_plan(), 0);
  std::vector<std::uint32_t> out;
  CHECK(c.classify(1, 0, 2, seg(0, 2, 1, 1448), 0) == RailCircuits::Verdict::pass);
  c.left();
  CHECK(c.classify(2, 2, 0, seg(2, 0, 1, 1448), 10 * kUs) == RailCircuits::Verdict::held);
  c.advance(300 * kUs, out);  // past the guard, but the segment is not acknowledged
  CHECK(c.stats().reconfigurations == 0);
  CHECK(c.next_event() == shaping::kRailAckWait);
  c.advance(shaping::kRailAckWait, out);  // a delayed ACK does not hold the rails longer
  CHECK(c.stats().reconfigurations == 1);

  RailCircuits d(4, kMs, 1024, 200 * kUs);
  d.set_plan(phase_plan(), 0);
  CHECK(d.classify(1, 0, 2, seg(0, 2, 1, 1448), 0) == RailCircuits::Verdict::pass);
  d.left();
  CHECK(d.classify(2, 2, 0, seg(2, 0, 1, 1448), 10 * kUs) == RailCircuits::Verdict::held);
  CHECK(d.classify(3, 2, 0, ack_of(0, 2, 1449), 50 * kUs) == RailCircuits::Verdict::pass);  // a small frame
  d.advance(300 * kUs, out);  // acknowledged and past the guard: drained
  CHECK(d.stats().reconfigurations == 1);
}

TEST_CASE("rail circuits: a full FIFO drops, static keeps its circuits, a new plan hands back what waits",
          "[rails][lab][unit]") {
  RailCircuits c(4, kMs, 2, 200 * kUs);
  c.set_plan(phase_plan(), 0);
  CHECK(c.classify(1, 2, 0, seg(2, 0, 1, 1448), 0) == RailCircuits::Verdict::held);
  CHECK(c.classify(2, 2, 0, seg(2, 0, 1449, 1448), 0) == RailCircuits::Verdict::held);
  CHECK(c.classify(3, 2, 0, seg(2, 0, 2897, 1448), 0) == RailCircuits::Verdict::dropped);
  CHECK(c.stats().held_dropped == 1);
  CHECK(c.set_plan(shaping::RailPlan{}, 0) == std::vector<std::uint32_t>{1, 2});

  auto st = phase_plan();
  st.policy = "static";
  st.configs = {RailPhase::pp_forward};
  st.out = {st.out[0]};
  c.set_plan(st, 0);
  CHECK(c.classify(4, 2, 0, seg(2, 0, 1, 1448), 0) == RailCircuits::Verdict::dropped);  // no configuration has it
  CHECK(c.classify(5, 0, 2, seg(0, 2, 1, 1448), 0) == RailCircuits::Verdict::pass);
  CHECK_THROWS_AS(c.set_plan({"phase", {RailPhase::pp_forward}, {{1, 2}}}, 0), std::invalid_argument);
  CHECK_THROWS_AS(c.set_plan({"nope", {}, {}}, 0), std::invalid_argument);
}

TEST_CASE("rail plans: a run's circuits per phase, learned from the programs", "[rails][lab][unit]") {
  const auto plan = workload::build_plan(pp_dp(), rails_dc(ocs()));
  const auto plans = run::rail_plans(plan);
  REQUIRE(plans.size() == 1);
  const auto& p = plans.at(0);
  CHECK(p.policy == "phase");
  CHECK(p.configs == std::vector<RailPhase>{RailPhase::pp_forward, RailPhase::pp_backward, RailPhase::dp_allreduce});
  REQUIRE(p.out.size() == 3);
  // Every worker's sends and ring hop have their circuit, between the same nodes as its program says.
  for (std::size_t w = 0; w < plan.programs.size(); ++w) {
    const auto& me = plan.workers[w];
    for (const auto& op : plan.programs[w].ops) {
      if (op.kind != program::OpKind::send) continue;
      const auto& peer = plan.workers.at(static_cast<std::size_t>(op.peer));
      if (peer.node == me.node) continue;
      const auto c = workload::is_gradient_tag(op.tag) ? 1 : 0;
      CHECK(p.out[c][static_cast<std::size_t>(me.node)] == peer.node);
    }
  }
  // The simulator learns the same phases from the same plan.
  const auto sim = sim::simulate(plan);
  REQUIRE(sim.rails.size() == 1);
  CHECK(sim.rails[0].phases == std::vector<std::string>{"pp-forward", "pp-backward", "dp-allreduce"});

  // Electrical rails, or the packet policy: no circuits.
  auto packet = ocs();
  packet["switching"] = "packet";
  packet.erase("reconfiguration");
  CHECK(run::rail_plans(workload::build_plan(pp_dp(), rails_dc(packet))).at(0).configs.empty());
  auto s = pp_dp();
  s.rails = workload::RailsSpec{"packet", {}};
  CHECK(run::rail_plans(workload::build_plan(s, rails_dc(ocs()))).at(0).configs.empty());
  // No rails: no plans.
  json lan{{"name", "r"}, {"dcs", json::array({{{"name", "a"}, {"nodes", 4}, {"gpus_per_node", 2}}})}};
  CHECK(run::rail_plans(workload::build_plan(pp_dp(), core::parse_topology(lan, "r.json", {}))).empty());
}

TEST_CASE("rail plans: what the rails cannot carry is refused, as the simulator refuses it", "[rails][lab][unit]") {
  // A phase the program lacks.
  auto s = pp_dp();
  s.parallelism.pp = 1;
  s.parallelism.dp = 4;
  s.rails = workload::RailsSpec{"phase", {"pp-forward"}};
  try {
    run::rail_plans(workload::build_plan(s, rails_dc(ocs())));
    FAIL("expected a ConfigError");
  } catch (const core::ConfigError& e) {
    REQUIRE(e.diagnostics().size() == 1);
    CHECK(e.diagnostics()[0].path == "/rails/phases/0");
  }
  // Static with pipeline sends across the rails.
  s = pp_dp();
  s.rails = workload::RailsSpec{"static", {}};
  try {
    run::rail_plans(workload::build_plan(s, rails_dc(ocs())));
    FAIL("expected a ConfigError");
  } catch (const core::ConfigError& e) {
    REQUIRE(e.diagnostics().size() == 1);
    CHECK(e.diagnostics()[0].path == "/rails/policy");
    CHECK_THAT(e.diagnostics()[0].reason, Contains("pp-forward"));
  }
  // TP groups that do not start at the same GPU would change rails.
  s = pp_dp();
  s.parallelism.tp = 1;
  s.parallelism.dp = 4;
  CHECK_THROWS_WITH(run::rail_plans(workload::build_plan(s, rails_dc(ocs()))), Contains("a rail joins GPUs of one index"));
}
