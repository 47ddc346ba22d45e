// A run's WAN windows without sockets: the plan's pipeline messages as gated flows, `want`
// -> grants for a whole TP group, gates opened and closed with reference counts, progress
// from flow counters, lookahead grants, and the windows.csv / accuracy report.
#include <catch2/catch.hpp>

#include <algorithm>

#include "test_workload_fixtures.hpp"
#include "wanlab/common/flows.hpp"
#include "wanlab/core/address_plan.hpp"
#include "wanlab/run/windows.hpp"
#include "wanlab/workload/plan.hpp"

using namespace wanlab;
using namespace wanlab::run;
using nlohmann::json;

namespace {

constexpr Nanos kMs = 1'000'000;

// Two DCs of 2 nodes with 2 GPUs each; pp 2 x dp 2 x tp 2: stage 0 in use, stage 1 in euw,
// each replica's TP pair on one node (workers 0,1 use-0; 2,3 use-1; 4,5 euw-0; 6,7 euw-1).
const workload::Plan& plan() {
  static const workload::Plan p = [] {
    auto topo = workload::testing::lab(json::parse(R"([
      {"name": "use", "nodes": 2, "gpus_per_node": 2},
      {"name": "euw", "nodes": 2, "gpus_per_node": 2}])"));
    auto s = workload::testing::scenario(2, 2, 2, 2, workload::Schedule::gpipe);
    return workload::build_plan(s, topo);
  }();
  return p;
}

RunWindows make(const std::string& policy = "atlas", Nanos lookahead = 0, double rate = 1e9) {
  arbiter::ArbiterOptions o;
  o.idle_timeout = 100 * kMs;
  o.pack_small_transfers = false;  // this plan's messages are tiny: keep one window at a time
  o.handover_lead = 0;
  return RunWindows("r1", plan(), {rate, rate}, arbiter::make_policy(policy), o, lookahead);
}

json want(int worker, int peer, int iteration, std::uint32_t tag) {
  return {{"type", "want"}, {"run", "r1"}, {"worker", worker}, {"peer", peer}, {"iteration", iteration},
          {"tag", tag}, {"bytes", 1}};
}
json delivered(int src, int dst, int iteration, std::uint32_t tag) {
  return {{"type", "delivered"}, {"run", "r1"}, {"src", src}, {"dst", dst}, {"iteration", iteration},
          {"tag", tag}, {"bytes", 1}};
}

std::vector<std::pair<std::string, int>> grants(const WindowActions& a) {
  std::vector<std::pair<std::string, int>> out;
  for (const auto& m : a.messages) {
    REQUIRE(m.message.at("type") == "grant");
    out.emplace_back(m.node, m.message.at("worker").get<int>());
  }
  return out;
}

}  // namespace

TEST_CASE("windows: every WAN pipeline pair is one gated flow, matched by addresses and port block",
          "[unit][run][windows]") {
  auto w = make();
  const auto& flows = w.flows();
  REQUIRE(flows.size() == 2);  // use->euw (activations), euw->use (gradients)
  const auto& fwd = flows.at({0, 1});
  REQUIRE(fwd.size() == 4);  // workers 0..3 -> 4..7
  const auto& f0 = fwd.at(0).matches.at(0);
  REQUIRE(f0.saddr == core::node_address(0, 0).value);
  REQUIRE(f0.daddr == core::node_address(1, 0).value);
  REQUIRE(f0.sport == flows::slot_port(0));
  REQUIRE(f0.sport_mask == flows::kFlowPortMask);
  REQUIRE(fwd.at(1).matches.at(0).sport == flows::slot_port(1));  // worker 1: GPU 1 of use-0
}

TEST_CASE("windows: a want grants the whole TP group and opens its gates; delivery closes them",
          "[unit][run][windows]") {
  auto w = make();
  WindowActions a;
  REQUIRE_FALSE(w.want(want(0, 4, 0, 0), 0, a));
  REQUIRE(grants(a) == std::vector<std::pair<std::string, int>>{{"use-0", 0}, {"use-0", 1}});
  REQUIRE(a.gates == std::vector<GateSwitch>{{{0, 1}, 0, true}, {{0, 1}, 1, true}});
  // The other rank's want adds nothing; replica 1 waits for the link.
  WindowActions b;
  REQUIRE_FALSE(w.want(want(1, 5, 0, 0), kMs, b));
  REQUIRE_FALSE(w.want(want(2, 6, 0, 0), kMs, b));
  REQUIRE(b.messages.empty());
  REQUIRE(b.gates.empty());
  // Delivered by both ranks: replica 0's gates close, replica 1 gets the link.
  WindowActions c;
  REQUIRE_FALSE(w.delivered(delivered(0, 4, 0, 0), 2 * kMs, c));
  REQUIRE(c.gates.empty());
  REQUIRE_FALSE(w.delivered(delivered(1, 5, 0, 0), 3 * kMs, c));
  REQUIRE(grants(c) == std::vector<std::pair<std::string, int>>{{"use-1", 2}, {"use-1", 3}});
  REQUIRE(c.gates == std::vector<GateSwitch>{{{0, 1}, 0, false}, {{0, 1}, 1, false}, {{0, 1}, 2, true},
                                             {{0, 1}, 3, true}});
}

TEST_CASE("windows: progress from flow counters ends a window and passes the link on", "[unit][run][windows]") {
  auto w = make();
  WindowActions a;
  (void)w.want(want(0, 4, 0, 0), 0, a);
  (void)w.want(want(2, 6, 0, 0), 0, a);
  const auto bytes = w.arbiter().transfer(1).spec.bytes;
  REQUIRE(bytes >= 2 * plan().pipeline_message_bytes);
  std::vector<shaping::FlowCounters> c(4);
  for (int i = 0; i < 4; ++i) c[static_cast<std::size_t>(i)].id = i;
  c[0].admitted_bytes = bytes / 2;
  c[1].admitted_bytes = bytes / 2;
  w.flow_bytes({0, 1}, c, 5 * kMs);
  WindowActions b;
  w.tick(5 * kMs, b);
  // Replica 1 owns the link now; replica 0's gates stay open until it is delivered.
  REQUIRE(grants(b) == std::vector<std::pair<std::string, int>>{{"use-1", 2}, {"use-1", 3}});
  REQUIRE(b.gates == std::vector<GateSwitch>{{{0, 1}, 2, true}, {{0, 1}, 3, true}});
}

TEST_CASE("windows: with lookahead the next in line hears its grant shortly before its window",
          "[unit][run][windows]") {
  auto w = make("atlas", 10 * kMs, 1e5);  // 100 kbit/s: 10 ms is 125 bytes
  WindowActions a;
  (void)w.want(want(0, 4, 0, 0), 0, a);
  WindowActions b;
  (void)w.want(want(2, 6, 0, 0), kMs, b);
  REQUIRE(b.messages.empty());  // replica 0 has all its bytes still to send
  // Replica 0 is under 10 ms from the end of its bytes: replica 1 is told now, its gates
  // stay closed while replica 0 holds the window.
  const auto bytes = w.arbiter().transfer(1).spec.bytes;
  REQUIRE(bytes > 1'000);
  std::vector<shaping::FlowCounters> c(4);
  for (int i = 0; i < 4; ++i) c[static_cast<std::size_t>(i)].id = i;
  // All but 100 bytes into the link within 2 ms: what the link has not sent yet counts as
  // still to send, so no grant yet.
  c[0].admitted_bytes = (bytes - 100) / 2;
  c[1].admitted_bytes = (bytes - 100) / 2;
  WindowActions early;
  w.flow_bytes({0, 1}, c, 2 * kMs);
  w.tick(2 * kMs, early);
  REQUIRE(early.messages.empty());
  // Once the link has sent them (12.5 kB/s), with a few more bytes reported meanwhile
  // (a stalled window would end), the next in line hears its grant.
  const Nanos at = static_cast<Nanos>(static_cast<double>(bytes - 100) * 8e9 / 1e5);
  for (Nanos now = 20 * kMs; now <= at; now += 20 * kMs) {
    c[0].admitted_bytes += 1;
    w.flow_bytes({0, 1}, c, now);
    WindowActions none;
    w.tick(now, none);
    REQUIRE(none.gates.empty());
  }
  w.flow_bytes({0, 1}, c, at);
  WindowActions t;
  w.tick(at, t);
  REQUIRE(grants(t) == std::vector<std::pair<std::string, int>>{{"use-1", 2}, {"use-1", 3}});
  REQUIRE(t.gates.empty());
  WindowActions d;
  (void)w.delivered(delivered(0, 4, 0, 0), at + kMs, d);
  (void)w.delivered(delivered(1, 5, 0, 0), at + kMs, d);
  REQUIRE(d.messages.empty());  // no second grant
  REQUIRE(d.gates == std::vector<GateSwitch>{{{0, 1}, 0, false}, {{0, 1}, 1, false}, {{0, 1}, 2, true},
                                             {{0, 1}, 3, true}});
}

TEST_CASE("windows: a silent group loses its window after the timeout", "[unit][run][windows]") {
  auto w = make();
  WindowActions a;
  (void)w.want(want(0, 4, 0, 0), 0, a);
  (void)w.want(want(2, 6, 0, 0), 0, a);
  WindowActions b;
  w.tick(150 * kMs, b);
  REQUIRE(b.gates == std::vector<GateSwitch>{{{0, 1}, 0, false}, {{0, 1}, 1, false}, {{0, 1}, 2, true},
                                             {{0, 1}, 3, true}});
  const auto csv = w.windows_csv(0);
  REQUIRE(csv.find("use,euw,1,0,0,0,1,activation,0,") != std::string::npos);
  REQUIRE(csv.substr(csv.size() - 3) == ",1\n");  // revoked
  REQUIRE(w.accuracy().at("revoked") == 1);
}

TEST_CASE("windows: messages that are not WAN pipeline messages are refused with a reason", "[unit][run][windows]") {
  auto w = make();
  WindowActions a;
  const auto r = w.want(want(0, 1, 0, 0), 0, a);  // same node
  REQUIRE(r);
  REQUIRE(r->find("sends no WAN message") != std::string::npos);
  REQUIRE(w.delivered(delivered(0, 4, 3, 0), 0, a));  // never asked for
  REQUIRE(a.messages.empty());
}
