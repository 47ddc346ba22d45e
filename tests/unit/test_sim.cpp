// The flow-level simulator on whole plans: against the contention-free oracle
// (workload::execute), fair vs atlas windows on one link, the ring all-reduce, traces,
// determinism (the burst models on one link: test_sim_one_link.cpp).
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "test_sim_plans.hpp"
#include "test_workload_fixtures.hpp"
#include "wanlab/sim/prefill.hpp"
#include "wanlab/sim/simulator.hpp"
#include "wanlab/workload/execute.hpp"
#include "wanlab/workload/metrics.hpp"

using namespace wanlab;
using namespace wanlab::workload;

using program::SpanKind;

using namespace sim_test;

TEST_CASE("without contention the simulator gives execute()'s times on a shipped scenario", "[unit][sim]") {
  // three-dc-7b with one pipeline of one GPU per stage, a stage per DC, and WAN links ten
  // times faster: a message (6.5 ms on the wire) is over before the next one on its link
  // starts (>= 48 ms of compute apart), so nothing ever shares a link.
  auto s = shipped_scenario("three-dc-7b.json");
  s.parallelism = {3, 1, 1};
  s.placement = {{"use"}, {"usw"}, {"euw"}};
  // Both send modes: a rendezvous send leaves once the receiver's notice is back.
  s.send_mode = GENERATE(SendMode::eager, SendMode::rendezvous);
  INFO("send_mode " << to_string(s.send_mode));
  auto topo = core::load_topology(s.topology_path);
  for (auto& l : topo.links) l.params.rate.bps *= 10;
  const auto plan = plan_of(s, topo);
  auto opt = exact();
  opt.tcp_window_bytes = 0;  // no TCP ceiling: the oracle has none
  const auto r = sim::simulate(plan, opt);

  const auto comm = [&](int src, int dst, std::uint64_t bytes) {
    const auto a = plan.workers.at(static_cast<std::size_t>(src)).dc;
    const auto b = plan.workers.at(static_cast<std::size_t>(dst)).dc;
    if (a == b) return Duration{0};
    const auto* l = plan.topology.find_link(a, b);
    const double rate = static_cast<double>(l->params.rate.bps) * s.scale;
    return l->params.delay +
           Duration{static_cast<std::int64_t>(std::ceil(static_cast<double>(bytes) * kWireOverhead * 8e9 / rate))};
  };
  const auto oracle = execute(plan.programs, s.iterations, modeled_compute(plan), comm);

  const auto reps = r.reports();
  REQUIRE(reps.size() == oracle.size());
  for (std::size_t w = 0; w < oracle.size(); ++w) {
    INFO("worker " << w);
    REQUIRE(reps[w].iterations.size() == oracle[w].iterations.size());
    for (std::size_t i = 0; i < oracle[w].iterations.size(); ++i) {
      CHECK(std::abs(reps[w].iterations[i].end_ns - oracle[w].iterations[i].end_ns) <= 2);
      CHECK(std::abs(reps[w].iterations[i].start_ns - oracle[w].iterations[i].start_ns) <= 2);
    }
    REQUIRE(reps[w].spans.size() == oracle[w].spans.size());
    for (std::size_t k = 0; k < oracle[w].spans.size(); ++k) {
      CHECK(reps[w].spans[k].kind == oracle[w].spans[k].kind);
      CHECK(std::abs(reps[w].spans[k].end_ns - oracle[w].spans[k].end_ns) <= 2);
    }
  }
  // And the summaries agree.
  const auto a = summarize(plan, reps);
  const auto b = summarize(plan, oracle);
  CHECK(a.at("iteration_time_s").at("mean").get<double>() ==
        Approx(b.at("iteration_time_s").at("mean").get<double>()).epsilon(1e-6));
}

TEST_CASE("D pipelines sending S bytes at once over one link: fair vs atlas", "[unit][sim]") {
  // Two DCs, 4 pipelines of 2 stages, one micro-batch: every stage-0 GPU sends its
  // activations at the same instant. With the link's rate B set so that S/B is 1 s, fair
  // sharing delivers all of them at D S / B; atlas's windows deliver pipeline j's at
  // (j + 1) S / B (the arbiter's expectation), up to the window handover (the next window
  // opens when the last 1 % is left) and the 5 ms progress samples.
  constexpr int D = 4;
  auto [topo, s, bytes] = one_link_pipelines(D);
  for (auto& l : topo.links) l.params.rate.bps = static_cast<std::uint64_t>(std::llround(bytes * 8));  // S / B = 1 s

  // Transfers longer than a window: TCP flows that share the link (not bursts). ACKs off:
  // pipeline 0's gradients go back while the others' activations still go out, and their
  // ACKs would take a little of the link (see the ACK test below).
  auto opt = exact();
  opt.tcp_window_bytes = 1024;
  opt.acks = false;
  std::map<std::string, std::vector<double>> arrived;
  for (const std::string policy : {"fair", "atlas"}) {
    s.policy = policy;
    arrived[policy] = arrivals(s, sim::simulate(plan_of(s, topo), opt), D, 0.010);
  }
  // The same messages within a window are bursts. Shared, they share the link as well:
  // all in at D S / B. FIFO, the link's queue serves them whole, first come first served.
  s.policy = "fair";
  auto shared = exact();
  shared.acks = false;
  arrived["fair-bursts"] = arrivals(s, sim::simulate(plan_of(s, topo), shared), D, 0.010);
  auto fifo = exact(sim::SimOptions::Bursts::fifo);
  fifo.acks = false;
  arrived["fair-fifo-bursts"] = arrivals(s, sim::simulate(plan_of(s, topo), fifo), D, 0.010);
  for (int j = 0; j < D; ++j) {
    INFO("pipeline " << j);
    CHECK(arrived["fair"][static_cast<std::size_t>(j)] == Approx(D).margin(1e-6));
    CHECK(arrived["atlas"][static_cast<std::size_t>(j)] == Approx(j + 1).margin(0.03));
    CHECK(arrived["fair-bursts"][static_cast<std::size_t>(j)] == Approx(D).margin(1e-6));
    CHECK(arrived["fair-fifo-bursts"][static_cast<std::size_t>(j)] == Approx(j + 1).margin(1e-6));
  }
}

TEST_CASE("a ring all-reduce takes 2(n-1) chunk transfers after its last rank enters", "[unit][sim]") {
  // three-dc-7b: per stage a ring of 4 replicas on 4 nodes, each node's link carrying its
  // 8 TP ranks' rings. With 10 Gbit/s node links and no LAN delay, each hop moves
  // 2(n-1) chunks x 8 ranks at 10 Gbit/s.
  const auto s = shipped_scenario("three-dc-7b.json");
  const auto plan = plan_of(s, core::load_topology(s.topology_path));
  sim::SimOptions opt;
  opt.lan_rate_bps = 10e9;
  const auto r = sim::simulate(plan, opt);
  const auto reps = r.reports();
  for (int stage = 0; stage < 3; ++stage) {
    const auto& cost = plan.stages.at(static_cast<std::size_t>(stage));
    const auto bytes = scaled_bytes(cost.gradient_bytes_per_gpu, run_lan_scale(s));  // a ring inside one DC
    const double chunk = static_cast<double>(program::ring_chunk_bytes(bytes, 4));
    const double expected = 6 * chunk * 8 * kWireOverhead * 8 / 10e9;
    for (int it = 0; it < s.iterations; ++it) {
      std::int64_t last_entry = 0, end = 0;
      for (int d = 0; d < 4; ++d) {
        const auto* ar = first_span(reps.at(static_cast<std::size_t>(worker_id(s.parallelism, stage, d, 5))),
                                    SpanKind::allreduce, it);
        REQUIRE(ar != nullptr);
        last_entry = std::max(last_entry, ar->start_ns);
        if (d > 0) CHECK(ar->end_ns == end);  // everyone leaves together
        end = ar->end_ns;
      }
      CHECK(static_cast<double>(end - last_entry) / 1e9 == Approx(expected).margin(2e-9));
    }
  }
}

TEST_CASE("an all-reduce across DCs goes through the pair's TCP connections", "[unit][sim]") {
  // DP across two DCs (one GPU each, 1 Gbit/s, RTT 20 ms): each ring hop carries the whole
  // gradient buffer, a few MB, over the WAN. Paced, it is a message of the pair's
  // connections: slow start from 10 segments takes rounds that a flow at the window's
  // ceiling does not, the pairs' windows are reported, and later iterations, with the
  // window grown, are faster than the first.
  auto s = workload::testing::scenario(1, 2, 1, 1);
  s.placement = {{"a", "b"}};
  const auto topo = workload::testing::lab({{{"name", "a"}, {"nodes", 1}, {"gpus_per_node", 1}},
                                            {{"name", "b"}, {"nodes", 1}, {"gpus_per_node", 1}}});
  const auto plan = plan_of(s, topo);
  const auto paced = sim::simulate(plan, exact(sim::SimOptions::Bursts::paced));
  const auto flow = sim::simulate(plan, exact(sim::SimOptions::Bursts::shared));
  const auto span_ns = [](const sim::SimResult& r, int it) {
    const auto* ar = first_span(r.reports().at(0), SpanKind::allreduce, it);
    REQUIRE(ar != nullptr);
    return static_cast<double>(ar->end_ns - ar->start_ns);
  };
  const double bytes = static_cast<double>(plan.stages.at(0).gradient_bytes_per_gpu);
  INFO("gradient bytes " << bytes);
  REQUIRE(bytes * kWireOverhead > 1e6);  // far more than the initial window
  const double rtt = 20e6;
  CHECK(span_ns(paced, 0) > span_ns(flow, 0) + 3 * rtt);
  CHECK(span_ns(paced, 2) < span_ns(paced, 0) - rtt);
  REQUIRE(paced.tcp.size() == 2);  // a -> b and b -> a
  for (const auto& t : paced.tcp) CHECK(t.cwnd_bytes > 10 * sim::kMss);
  CHECK(flow.tcp.empty());
}

TEST_CASE("link rates follow a trace", "[unit][sim]") {
  const auto s = shipped_scenario("two-dc-1b.json");
  const auto topo = core::load_topology(s.topology_path);
  auto halved = topo;
  for (auto& l : halved.links) l.params.rate.bps /= 2;
  const auto base = sim::simulate(plan_of(s, topo));
  const auto slow = sim::simulate(plan_of(s, halved));

  // A step to half the rate at t = 0 is the halved topology.
  sim::SimOptions at_start;
  for (std::size_t i = 0; i < topo.links.size(); ++i)
    at_start.traces.push_back({i, {{0, static_cast<double>(halved.links[i].params.rate.bps)}}, 0});
  const auto stepped = sim::simulate(plan_of(s, topo), at_start);
  CHECK(stepped.reports() == slow.reports());
  CHECK(iteration_ends(slow.reports()).back() > iteration_ends(base.reports()).back());

  // A step after the first iteration leaves it alone and slows the later ones.
  const auto first_end = iteration_ends(base.reports()).front();
  sim::SimOptions later;
  for (std::size_t i = 0; i < topo.links.size(); ++i)
    later.traces.push_back({i, {{first_end + 1, static_cast<double>(halved.links[i].params.rate.bps)}}, 0});
  const auto changed = sim::simulate(plan_of(s, topo), later);
  const auto ends = iteration_ends(changed.reports());
  CHECK(ends.front() == first_end);
  const auto base_ends = iteration_ends(base.reports());
  CHECK(ends.back() - ends.front() > base_ends.back() - base_ends.front());
}

TEST_CASE("the simulator is deterministic and reports every worker", "[unit][sim]") {
  auto s = shipped_scenario("three-dc-7b.json");
  s.policy = "atlas";
  const auto plan = plan_of(s, core::load_topology(s.topology_path));
  const auto a = sim::simulate(plan);
  const auto b = sim::simulate(plan);
  const auto reps = a.reports();
  CHECK(reps == b.reports());
  CHECK(a.windows.size() == b.windows.size());
  REQUIRE(reps.size() == plan.workers.size());
  for (std::size_t w = 0; w < reps.size(); ++w) CHECK(reps[w].worker == static_cast<int>(w));
  CHECK(!a.windows.empty());
  // Every granted transfer's bytes went onto its link from its grant on (or later, behind
  // an earlier message of its pair); the window may end before its last byte (the
  // arbiter hands over that lead ahead).
  std::size_t on_wire = 0;
  for (const auto& w : a.windows) {
    if (w.revoked) continue;
    REQUIRE(w.id < a.wire.size());
    const auto& x = a.wire[w.id];
    INFO("transfer " << w.id);
    REQUIRE(x.first);
    REQUIRE(x.last);
    CHECK(*x.first >= w.start);
    CHECK(*x.last > *x.first);
    ++on_wire;
  }
  CHECK(on_wire > 0);
  CHECK(a.stats.simulated_workers == plan.workers.size() / 8);
  REQUIRE(a.groups.size() == plan.workers.size() / 8);
  // summary and timeline accept the reports as they are.
  const auto summary = summarize(plan, reps);
  CHECK(summary.at("iteration_time_s").at("mean").get<double>() > 0);
  CHECK(chrome_trace(plan, reps).at("traceEvents").size() > 0);
  // A TP rank's own report is its group's with its own worker id and its own peers.
  const int w = worker_id(s.parallelism, 1, 2, 5);
  const auto& group = a.groups.at(static_cast<std::size_t>(worker_id(s.parallelism, 1, 2, 0) / 8));
  const auto& own = reps.at(static_cast<std::size_t>(w));
  CHECK(own == a.report(w));
  REQUIRE(own.spans.size() == group.spans.size());
  int peers = 0;
  for (std::size_t k = 0; k < own.spans.size(); ++k) {
    CHECK(own.spans[k].start_ns == group.spans[k].start_ns);
    CHECK(own.spans[k].end_ns == group.spans[k].end_ns);
    if (group.spans[k].peer < 0) continue;
    ++peers;
    CHECK(own.spans[k].peer == group.spans[k].peer + 5);
    CHECK(plan.workers.at(static_cast<std::size_t>(own.spans[k].peer)).tp_rank == 5);
  }
  CHECK(peers > 0);
  CHECK_THROWS_AS(a.report(static_cast<int>(plan.workers.size())), std::out_of_range);
  CHECK_THROWS_AS(a.report(-1), std::out_of_range);
  // Without the copies: the same summary, the same end, the same subsets.
  CHECK(summarize(plan, a.by_worker()) == summary);
  std::int64_t end = 0;
  for (const auto& r : reps) end = std::max(end, r.iterations.back().end_ns);
  CHECK(a.end_ns() == end);
  const std::vector<int> keep{0, w, static_cast<int>(plan.workers.size()) - 1};
  const auto x = sim::subset(plan, a, keep);
  const auto y = sim::subset(plan, reps, keep);
  CHECK(x.reports == y.reports);
  CHECK(x.plan.workers.size() == 3);
  CHECK_THROWS_AS(sim::subset(plan, a, {static_cast<int>(plan.workers.size())}), std::invalid_argument);
}

TEST_CASE("compute jitter: each op within +-j of its modeled time, repeatable, and lockstep pipelines drift apart",
          "[unit][sim]") {
  auto s = shipped_scenario("two-dc-1b.json");
  s.policy = "atlas";
  s.connections = 1;
  const auto plan = plan_of(s, core::load_topology(s.topology_path));
  // Shared bursts: atlas's packing and a FIFO queue already set lockstep pipelines apart
  // (one pipeline's second transfer goes in the first window); max-min sharing does not.
  const auto lockstep = sim::simulate(plan, exact());
  auto opt = exact();
  opt.compute_jitter = 0.05;
  const auto a = sim::simulate(plan, opt);
  const auto b = sim::simulate(plan, opt);
  CHECK(a.reports() == b.reports());  // the scenario's seed: the same run every time
  const auto a_reps = a.reports();
  const auto l_reps = lockstep.reports();
  REQUIRE(a_reps.size() == l_reps.size());
  // Op by op (program order), against the FLOP model's time.
  int compute = 0, changed = 0;
  double lo = 2, hi = 0;
  for (std::size_t w = 0; w < a_reps.size(); ++w) {
    const auto& x = a_reps[w].spans;
    const auto& y = l_reps[w].spans;
    REQUIRE(x.size() == y.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (x[i].kind != program::SpanKind::forward && x[i].kind != program::SpanKind::backward) continue;
      REQUIRE(x[i].kind == y[i].kind);
      const double model = static_cast<double>(y[i].end_ns - y[i].start_ns);
      if (model < 1e5) continue;  // (ns rounding)
      const double r = static_cast<double>(x[i].end_ns - x[i].start_ns) / model;
      lo = std::min(lo, r);
      hi = std::max(hi, r);
      ++compute;
      changed += std::abs(r - 1) > 1e-3;
    }
  }
  INFO("ratios to the model " << lo << " .. " << hi << " over " << compute << " ops");
  REQUIRE(compute > 100);
  CHECK(lo >= 0.95 - 1e-6);
  CHECK(hi <= 1.05 + 1e-6);
  CHECK(lo < 0.97);  // the whole range is used
  CHECK(hi > 1.03);
  CHECK(changed > compute * 9 / 10);
  // Identical pipelines in lockstep send at the same instant, every time; with jitter they
  // drift apart.
  const auto send_spread = [&](const std::vector<program::WorkerReport>& reps) {
    std::int64_t first = std::numeric_limits<std::int64_t>::max(), last = 0;
    for (int d = 0; d < s.parallelism.dp; ++d)
      for (const auto& sp : reps.at(static_cast<std::size_t>(worker_id(s.parallelism, 0, d, 0))).spans)
        if (sp.kind == SpanKind::send && sp.iteration == 2 && sp.microbatch == 3) {
          first = std::min(first, sp.start_ns);
          last = std::max(last, sp.start_ns);
        }
    REQUIRE(last >= first);
    return last - first;
  };
  CHECK(send_spread(l_reps) == 0);
  CHECK(send_spread(a_reps) > 100'000);  // over 0.1 ms apart
}

TEST_CASE("bad simulator inputs are refused", "[unit][sim]") {
  auto s = shipped_scenario("two-dc-1b.json");
  const auto topo = core::load_topology(s.topology_path);
  s.policy = "nonesuch";
  CHECK_THROWS_AS(sim::simulate(plan_of(s, topo)), std::invalid_argument);
  s.policy = "fair";
  sim::SimOptions opt;
  opt.progress_period_ns = 0;
  CHECK_THROWS_AS(sim::simulate(plan_of(s, topo), opt), std::invalid_argument);
  opt = {};
  opt.traces.push_back({99, {{0, 1e9}}, 0});
  CHECK_THROWS_AS(sim::simulate(plan_of(s, topo), opt), std::invalid_argument);
  for (const double j : {-0.01, 0.51}) {
    opt = {};
    opt.compute_jitter = j;
    CHECK_THROWS_WITH(sim::simulate(plan_of(s, topo), opt), Catch::Contains("compute jitter"));
  }
  // Unpaced senders: the paced model refuses them; a windowed policy paces its
  // connections anyway, and the other burst models make no pacing claim.
  s.tcp_pacing = false;
  CHECK_THROWS_WITH(sim::simulate(plan_of(s, topo)), Catch::Contains("\"tcp_pacing\": false"));
  opt = {};
  opt.bursts = sim::SimOptions::Bursts::fifo;
  CHECK_NOTHROW(sim::simulate(plan_of(s, topo), opt));
  s.policy = "atlas";
  CHECK_NOTHROW(sim::simulate(plan_of(s, topo)));
}

TEST_CASE("prefill in the simulator: placed in the bubbles, never on top of training, deterministic", "[sim][bubbletea]") {
  const auto s = shipped_scenario("three-dc-7b-bubbletea.json");
  REQUIRE(s.prefill);
  const auto plan = plan_of(s, core::load_topology(s.topology_path));
  const auto trained = sim::simulate(plan);
  auto reports = trained.reports();
  const auto summary = sim::simulate_prefill(plan, reports);

  // Training is not moved; every GPU ran prefill only where it did not compute.
  std::size_t prefill_spans = 0;
  for (std::size_t w = 0; w < reports.size(); ++w) {
    CHECK(reports[w].iterations == trained.report(static_cast<int>(w)).iterations);
    std::vector<std::pair<std::int64_t, std::int64_t>> busy;
    for (const auto& span : reports[w].spans)
      if (span.kind == SpanKind::forward || span.kind == SpanKind::backward || span.kind == SpanKind::optimizer ||
          span.kind == SpanKind::prefill) {
        busy.emplace_back(span.start_ns, span.end_ns);
        prefill_spans += span.kind == SpanKind::prefill;
      }
    std::sort(busy.begin(), busy.end());
    for (std::size_t i = 1; i < busy.size(); ++i) {
      INFO("worker " << w << " span " << i);
      CHECK(busy[i].first >= busy[i - 1].second);
    }
  }
  CHECK(prefill_spans > 1000);
  // What the load offered over the run (550 requests/s), placed and completed mostly.
  const auto ends = iteration_ends(trained.reports());
  const double run_s = static_cast<double>(ends.back()) / 1e9;
  CHECK(summary["requests"].get<double>() == Approx(550 * run_s).epsilon(0.05));
  CHECK(summary["completed"].get<double>() > 0.6 * summary["requests"].get<double>());
  CHECK(summary["ttft_s"]["p50"].get<double>() > 0);
  CHECK(summary["ttft_s"]["p50"].get<double>() < s.prefill->deadline_s);
  CHECK(summary["kv_delivered"] == summary["completed"]);
  CHECK(summary["kv_in_flight_at_end"] == 0);
  // The load's own description, as the lab writes it (workload::prefill_load_summary).
  CHECK(summary["offered_rate_per_s"] == 550.0);
  CHECK(summary["model"] == "7b");
  CHECK(summary["deadline_s"] == 2.0);
  CHECK(summary["bytes_scale"] == Approx(2e-05));
  CHECK(summary["loadgen"] == "use-0");
  CHECK(summary["decode"] == nlohmann::json::array({"use-1", "usw-1", "euw-1"}));
  // The GPUs are far busier with the load than without it.
  const auto before = summarize(plan, trained.reports())["gpu_utilization"]["mean"].get<double>();
  const auto after = summarize(plan, reports)["gpu_utilization"]["mean"].get<double>();
  CHECK(before < 0.1);
  CHECK(after > 0.6);
  // Same input, same result.
  auto again = trained.reports();
  CHECK(sim::simulate_prefill(plan, again) == summary);
  CHECK(again == reports);
}

TEST_CASE("compute before each op, in one pass, equals compute_before() op by op", "[unit][sim]") {
  auto s = shipped_scenario("three-dc-7b.json");
  s.micro_batches = 16;
  const auto plan = plan_of(s, core::load_topology(s.topology_path));
  for (const int worker : {0, static_cast<int>(plan.workers.size()) / 2, static_cast<int>(plan.workers.size()) - 1}) {
    const auto each = compute_before_each(plan, worker);
    const auto& ops = plan.programs.at(static_cast<std::size_t>(worker)).ops;
    REQUIRE(each.size() == ops.size() + 1);
    for (std::size_t i = 0; i <= ops.size(); ++i) CHECK(each[i] == compute_before(plan, worker, i));
    CHECK(each.back() > 0);
  }
}

TEST_CASE("a plan whose send has no matching recv is refused, naming the worker and the tag", "[unit][sim]") {
  const auto s = shipped_scenario("two-dc-1b.json");
  auto plan = plan_of(s, core::load_topology(s.topology_path));
  // Stage 1's TP rank 0 of replica 0 no longer receives its first activation's tag.
  const int w = worker_id(s.parallelism, 1, 0, 0);
  auto& ops = plan.programs.at(static_cast<std::size_t>(w)).ops;
  const auto recv = std::find_if(ops.begin(), ops.end(), [](const program::Op& op) { return op.kind == program::OpKind::recv; });
  REQUIRE(recv != ops.end());
  const auto tag = recv->tag;
  const int sender = recv->peer;
  recv->tag += 1000;
  try {
    (void)sim::simulate(plan);
    FAIL("simulate accepted a send without its recv");
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    CHECK(msg.find(fmt::format("worker {} sends tag {} to worker {}", sender, tag, w)) != std::string::npos);
  }
}
