// The ns-3 reference executor against a closed form (one WAN transfer) and the simulator
// (a tiny two-DC pipeline), and what it refuses.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <optional>

#include "test_workload_fixtures.hpp"
#include "wanlab/ns3ref/reference.hpp"
#include "wanlab/sim/simulator.hpp"
#include "wanlab/workload/plan.hpp"

namespace {

using namespace wanlab;

// DCs a and b, one node each (1 Gbit/s, RTT 20 ms), two stages.
workload::Plan two_dc(int micro_batches, const workload::ModelSpec& model) {
  auto topo = workload::testing::lab({{{"name", "a"}, {"nodes", 1}, {"gpus_per_node", 1}},
                                      {{"name", "b"}, {"nodes", 1}, {"gpus_per_node", 1}}});
  auto s = workload::testing::scenario(2, 1, 1, micro_batches);
  s.model = model;
  s.iterations = 2;
  s.warmup = 0;
  s.connections = 1;
  return workload::build_plan(s, topo);
}

// One WAN transfer of `bytes` from a to b (two_dc's link), one iteration, no jitter.
ns3ref::Result one_transfer(std::uint64_t bytes, std::optional<QueueLimit> queue = std::nullopt) {
  auto plan = two_dc(1, workload::testing::small_model());
  plan.scenario.iterations = 1;
  plan.programs[0].ops = {program::Op{program::OpKind::send, 0, 0, 1, bytes, 0, {}}};
  plan.programs[1].ops = {program::Op{program::OpKind::recv, 0, 0, 0, bytes, 0, {}}};
  if (queue)
    for (auto& l : plan.topology.links) l.params.queue = queue;
  ns3ref::Options o;
  o.compute_jitter = 0;
  return ns3ref::run(plan, o);
}

double iteration_s(const std::vector<program::WorkerReport>& groups, int iteration) {
  std::int64_t start = -1, end = 0;
  for (const auto& g : groups) {
    const auto& it = g.iterations.at(static_cast<std::size_t>(iteration));
    start = start < 0 ? it.start_ns : std::min(start, it.start_ns);
    end = std::max(end, it.end_ns);
  }
  return static_cast<double>(end - start) / 1e9;
}

}  // namespace

TEST_CASE("ns-3 reference: one WAN transfer takes size / rate plus its slow start's round trips", "[ns3]") {
  constexpr std::uint64_t kBytes = 20'000'000;
  const auto r = one_transfer(kBytes);
  const double t = static_cast<double>(r.run.groups.at(1).iterations.at(0).end_ns) / 1e9;
  // On the wire: full frames of 1514 bytes per 1448 of payload at 1 Gbit/s, then 10 ms to
  // arrive; slow start from 10 segments to the 2.5 MB path (BDP) takes about
  // log2(1727 / 10) = 7.4 round trips, part of which the link is busy anyway.
  const double wire = kBytes * 1514.0 / 1448.0 * 8 / 1e9;
  const double rtt = 0.020;
  INFO("transfer took " << t << " s; size / rate " << wire << " s");
  CHECK(t >= wire + rtt / 2);
  CHECK(t <= wire + rtt / 2 + 8 * rtt);
  // Slow start alone accounts for at least 3 round trips more than the wire time here.
  CHECK(t >= wire + rtt / 2 + 3 * rtt);
  // Link totals: the payload, and at least its frames on the wire.
  CHECK(r.run.wan.at(0).payload_bytes == Approx(static_cast<double>(kBytes)));
  CHECK(r.run.wan.at(0).wire_bytes >= static_cast<double>(kBytes) * 1514.0 / 1448.0 * 0.999);
  CHECK(r.queues.at(0).drops == 0);
  CHECK(r.connections == 1);
}

TEST_CASE("ns-3 reference: a tiny two-DC pipeline matches the simulator", "[ns3]") {
  auto model = workload::testing::small_model();
  model.layers = 4;
  model.hidden = 2048;
  model.heads = 16;
  model.kv_heads = 16;
  model.ffn_hidden = 5504;
  model.seq_len = 1024;
  for (const char* policy : {"fair", "atlas"}) {
    auto plan = two_dc(4, model);
    plan.scenario.policy = policy;
    ns3ref::Options o;
    const auto ref = ns3ref::run(plan, o);
    const auto sim = sim::simulate(plan);
    // The second iteration (the first is a warm-up in every shipped scenario: its
    // connections come out of their first slow start).
    const double a = iteration_s(ref.run.groups, 1);
    const double b = iteration_s(sim.groups, 1);
    INFO(policy << " iteration 1: ns-3 " << a << " s, simulator " << b << " s");
    CHECK(b == Approx(a).epsilon(0.10));
    CHECK(ref.run.wan.at(0).payload_bytes == Approx(sim.wan.at(0).payload_bytes));
    if (std::string(policy) == "atlas") CHECK_FALSE(ref.run.windows.empty());
  }
}

TEST_CASE("ns-3 reference: refuses what it cannot express, in one line", "[ns3]") {
  auto plan = two_dc(1, workload::testing::small_model());
  plan.topology.links[0].params.jitter = std::chrono::milliseconds(1);
  const auto why = ns3ref::unsupported(plan);
  REQUIRE(why);
  CHECK(why->find("lacks WAN jitter") != std::string::npos);
  CHECK(why->find('\n') == std::string::npos);
  CHECK_THROWS_WITH(ns3ref::run(plan), *why);

  auto asym = two_dc(1, workload::testing::small_model());
  asym.topology.links[1].params.delay = std::chrono::milliseconds(3);
  CHECK(ns3ref::unsupported(asym).value_or("").find("asymmetric delays") != std::string::npos);

  auto lan = two_dc(1, workload::testing::small_model());
  lan.topology.lan.rate.bps = 10'000'000'000ULL;
  CHECK(ns3ref::unsupported(lan).value_or("").find("limited LAN") != std::string::npos);

  CHECK_FALSE(ns3ref::unsupported(two_dc(1, workload::testing::small_model())));
}

TEST_CASE("ns-3 reference: window-limited connections run to the end (no empty segment sent)", "[ns3]") {
  // three-dc-7b-window (157 KB windows at scale 0.05) for one iteration, one connection per
  // pair: with the window as the receiver's buffer, ns-3 3.37 sent an empty segment when
  // the bytes in flight reached the peer's window exactly and crashed (SIGSEGV in
  // TcpRateLinux::SkbSent) 0.4 s into this run. The window is now the sender's buffer.
  auto sc = workload::load_scenario(std::filesystem::path(WANLAB_SOURCE_DIR) / "bench/scenarios/three-dc-7b-window.json");
  sc.iterations = 1;
  sc.warmup = 0;
  sc.connections = 1;
  sc.policy = "fair";
  const auto plan = workload::build_plan(sc, core::load_topology(sc.topology_path));
  const auto r = ns3ref::run(plan);
  const auto sim = sim::simulate(plan);
  // Every byte of every WAN transfer arrived, the simulator's bytes on each link.
  REQUIRE(r.run.groups.size() == sim.groups.size());
  REQUIRE(r.run.wan.size() == sim.wan.size());
  double payload = 0;
  for (std::size_t l = 0; l < sim.wan.size(); ++l) {
    CHECK(r.run.wan[l].payload_bytes == Approx(sim.wan[l].payload_bytes));
    payload += r.run.wan[l].payload_bytes;
  }
  CHECK(payload > 0);
  CHECK(iteration_s(r.run.groups, 0) > 0);
}

TEST_CASE("ns-3 reference: a window grows only while it is used, as Linux's", "[ns3]") {
  // 20 messages of 500 KB (346 segments, a fifth of the 2.5 MB path), each sent when the
  // last one's reply is back: each is one flight. Linux (tcp_is_cwnd_limited) grows the
  // window in slow start only up to twice what is in flight, so it ends near 700 segments;
  // ns-3 3.37's CUBIC grew it by every message, to about 20 x 346 segments, and paced at
  // that. The simulator keeps the same rule.
  auto plan = two_dc(1, workload::testing::small_model());
  constexpr std::uint64_t kBytes = 500'000;
  constexpr int kMessages = 20;
  plan.scenario.iterations = 1;
  plan.programs[0].ops.clear();
  plan.programs[1].ops.clear();
  for (std::uint32_t i = 0; i < kMessages; ++i) {
    plan.programs[0].ops.push_back(program::Op{program::OpKind::send, 0, 0, 1, kBytes, 2 * i, {}});
    plan.programs[0].ops.push_back(program::Op{program::OpKind::recv, 0, 0, 1, 1000, 2 * i + 1, {}});
    plan.programs[1].ops.push_back(program::Op{program::OpKind::recv, 0, 0, 0, kBytes, 2 * i, {}});
    plan.programs[1].ops.push_back(program::Op{program::OpKind::send, 0, 0, 0, 1000, 2 * i + 1, {}});
  }
  ns3ref::Options o;
  o.compute_jitter = 0;
  const auto r = ns3ref::run(plan, o);
  const auto sim = sim::simulate(plan);
  const auto forward = [](const std::vector<sim::TcpEnd>& ends) {
    for (const auto& e : ends)
      if (e.src == 0 && e.dst == 1) return e.cwnd_bytes;
    return 0.0;
  };
  const double ns3_cwnd = forward(r.run.tcp), sim_cwnd = forward(sim.tcp);
  INFO("window at the end: ns-3 " << ns3_cwnd / 1448 << " segments, simulator " << sim_cwnd / 1448 << " segments");
  CHECK(r.queues.at(0).drops == 0);
  CHECK(ns3_cwnd >= static_cast<double>(kBytes));
  CHECK(ns3_cwnd <= 2.5 * static_cast<double>(kBytes));
  CHECK(sim_cwnd == Approx(ns3_cwnd).epsilon(0.25));
}

TEST_CASE("ns-3 reference: a queue that overflows counts its drops, and TCP recovers", "[ns3]") {
  // One 20 MB transfer over 1 Gbit/s and 20 ms into a 20-packet queue: slow start overfills
  // it. The drops were once made by ns-3's traffic-control layer, which drops without a
  // trace when a device's transmit queue is stopped (flow control), so the reference
  // counted none; the WAN devices now have no flow control and the queue drops and counts.
  constexpr std::uint64_t kBytes = 20'000'000;
  const auto r = one_transfer(kBytes, QueueLimit{QueueLimit::Unit::packets, 20});
  const auto& q = r.queues.at(0);
  INFO("drops " << q.drops << ", packets " << q.packets);
  CHECK(q.queue_packets == 20);
  CHECK(q.drops > 0);
  CHECK(q.dropped_bytes >= q.drops * 1500);
  // What was dropped was sent again: more frames crossed than the payload needs.
  CHECK(r.run.wan.at(0).wire_bytes > static_cast<double>(kBytes) * 1514.0 / 1448.0);
  CHECK(r.run.wan.at(0).payload_bytes == Approx(static_cast<double>(kBytes)));
  REQUIRE(r.recovery.size() == r.run.tcp.size());
  std::uint64_t recovered = 0;
  for (const auto& p : r.recovery) recovered += p.recoveries + p.timeouts;
  CHECK(recovered > 0);
  // The transfer still ends, later than the wire time.
  const double t = static_cast<double>(r.run.groups.at(1).iterations.at(0).end_ns) / 1e9;
  CHECK(t > kBytes * 1514.0 / 1448.0 * 8 / 1e9);
}

TEST_CASE("ns-3 reference: the retransmission timer is Linux's, at least 200 ms past the smoothed RTT", "[ns3]") {
  // Linux: srtt + max(4 x mdev, 200 ms). ns-3 3.37: max(200 ms, srtt + 4 x var), about
  // 200 ms on this 20 ms path, which a queue that fills by 180 ms outruns with nothing lost.
  constexpr std::uint64_t kBytes = 20'000'000;
  const auto r = one_transfer(kBytes);
  REQUIRE(r.recovery.size() == r.run.tcp.size());
  for (std::size_t i = 0; i < r.run.tcp.size(); ++i) {
    const auto& t = r.run.tcp[i];
    if (t.src != 0 || t.dst != 1) continue;
    INFO("srtt " << t.srtt_ns / 1e6 << " ms, rto " << r.recovery[i].rto_ns / 1e6 << " ms");
    CHECK(t.srtt_ns >= 20e6);
    CHECK(r.recovery[i].rto_ns >= t.srtt_ns + 195e6);
    CHECK(r.recovery[i].timeouts == 0);
  }
}
