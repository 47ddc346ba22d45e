// The simulator's burst models on one link: FIFO bursts that overflow the queue, paced
// TCP into the link's queue (pace, RTT, windows, loss, ACKs on the reverse link), slow start,
// and the paced model's piece and stream lengths.
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

TEST_CASE("FIFO bursts that find the link's queue full lose the rest and send it again after an RTO", "[unit][sim]") {
  // As above (4 pipelines' bursts of S at once, RTT 20 ms) with S / B = 0.1 s and a queue
  // of 1.5 S: pipeline 0's burst is queued whole, pipeline 1's half, 2's and 3's not at all.
  // The lost bytes come back after Linux's RTO (SRTT with the queue's delay, + 200 ms) and
  // are not lost again:
  //   p0: 0-0.1;  p1: its first half 0.1-0.15, the other at 0.02 + 0.1 + 0.2 = 0.32 s,
  //   served 0.32-0.37; p2 and p3: at 0.02 + 0.15 + 0.2 = 0.37 s, served 0.37-0.47-0.57.
  constexpr int D = 4;
  auto [topo, s, bytes] = one_link_pipelines(D);
  for (auto& l : topo.links) {
    l.params.rate.bps = static_cast<std::uint64_t>(std::llround(bytes * 80));
    l.params.queue = QueueLimit{QueueLimit::Unit::bytes, static_cast<std::uint64_t>(std::llround(1.5 * bytes))};
  }
  const auto run = [&](bool overflow) {
    auto opt = exact(sim::SimOptions::Bursts::fifo);
    opt.queue_overflow = overflow;
    opt.acks = false;  // the gradients' ACKs would take a little of the activations' link
    const auto r = sim::simulate(plan_of(s, topo), opt);
    if (overflow) {
      CHECK(r.stats.overflows == 3);
      CHECK(r.stats.overflow_bytes == Approx(2.5 * bytes).epsilon(1e-4));  // the queue limit is whole bytes
    } else {
      CHECK(r.stats.overflows == 0);
    }
    // Every byte crossed its link once, whatever was lost on the way (activations one way,
    // gradients back).
    double wire = 0;
    for (const auto& l : r.wan) wire += l.wire_bytes;
    CHECK(wire == Approx(2 * D * bytes).epsilon(1e-9));
    return arrivals(s, r, D, 0.010);
  };
  const auto lossy = run(true);
  const auto unlimited = run(false);
  const std::vector<double> expected{0.1, 0.37, 0.47, 0.57};
  for (int j = 0; j < D; ++j) {
    INFO("pipeline " << j);
    CHECK(lossy[static_cast<std::size_t>(j)] == Approx(expected[static_cast<std::size_t>(j)]).margin(1e-6));
    CHECK(unlimited[static_cast<std::size_t>(j)] == Approx(0.1 * (j + 1)).margin(1e-6));
  }
  // Windowed policies pace their connections in the lab: no bursts overflow there.
  s.policy = "atlas";
  const auto r = sim::simulate(plan_of(s, topo), exact(sim::SimOptions::Bursts::fifo));
  CHECK(r.stats.overflows == 0);
}

TEST_CASE("paced bursts: TCP's pace into the link's FIFO queue, in the order they entered, loss sent again", "[unit][sim]") {
  // One link a -> b, RTT 20 ms. A message of S (8.6 kB) fits in a fresh connection's
  // initial window (10 segments, IW): in slow start it enters at Linux's 2 x cwnd / SRTT =
  // 2 IW / 20 ms, 5.9 ms for all of it.
  const double iw = sim::SimOptions{}.initial_window_bytes;
  const auto paced = [] {
    auto o = exact(sim::SimOptions::Bursts::paced);
    o.acks = false;
    return o;
  }();
  auto shared = exact();
  shared.acks = false;
  {
    // One pipeline on a fast link (S / B = 1 ms): the link waits for the bytes, and the
    // last one leaves as it enters (a piece of at most 1 ms of entry after it, 0.17 ms on
    // this link); shared, the message leaves at the link's rate.
    auto [topo, s, bytes] = one_link_pipelines(1);
    REQUIRE(bytes < iw);
    for (auto& l : topo.links) l.params.rate.bps = static_cast<std::uint64_t>(std::llround(bytes * 8 * 1000));
    const auto a = arrivals(s, sim::simulate(plan_of(s, topo), paced), 1, 0.010);
    CHECK(a[0] == Approx(bytes * 0.020 / (2 * iw)).margin(0.0002));
    const auto b = arrivals(s, sim::simulate(plan_of(s, topo), shared), 1, 0.010);
    CHECK(b[0] == Approx(0.001).margin(1e-6));
  }
  {
    // Two pipelines, S / B = 0.1 s; pipeline 1's stage-0 GPU at half speed, so its burst
    // starts one forward pass (f) after pipeline 0's. Paced, its bytes are behind all of
    // pipeline 0's in the queue: pipeline 0 is in at S / B, pipeline 1 at 2 S / B (from
    // pipeline 0's send). Shared, pipeline 1 takes half the link from pipeline 0 as soon as
    // it starts: pipeline 0 is in at 2 S / B - f.
    auto [topo, s, bytes] = one_link_pipelines(2);
    for (auto& l : topo.links) l.params.rate.bps = static_cast<std::uint64_t>(std::llround(bytes * 80));
    auto plan = plan_of(s, topo);
    for (auto& x : plan.effective_flops) x /= 75'000;  // a forward pass of about 10 ms
    plan.effective_flops.at(static_cast<std::size_t>(worker_id(s.parallelism, 0, 1, 0))) /= 2;
    const auto r = sim::simulate(plan, paced);
    const auto reps = r.reports();
    const double f = static_cast<double>(first_span(reps[0], SpanKind::forward, 0)->end_ns -
                                         first_span(reps[0], SpanKind::forward, 0)->start_ns) / 1e9;
    REQUIRE(f > 0.002);
    REQUIRE(f < 0.05);
    const auto a = arrivals(s, r, 2, 0.010);
    // The link serves a piece once it is whole: up to 1 ms late.
    CHECK(a[0] == Approx(0.1).margin(0.0015));
    CHECK(a[1] == Approx(0.2).margin(0.0015));
    CHECK(r.stats.overflows == 0);
    const auto b = arrivals(s, sim::simulate(plan, shared), 2, 0.010);
    CHECK(b[0] == Approx(0.2 - f).margin(1e-4));
    CHECK(b[1] == Approx(0.2).margin(1e-4));
  }
  {
    // Four pipelines' bursts at once into a queue of 1.5 S (S / B = 0.1 s): 4 S enter in
    // 8.33 ms, the queue keeps 1.5 S and what the link sent meanwhile, the rest (about
    // 2.4 S) is lost,
    // a quarter from each. Each sender hears of it an RTT and the full queue's delay after
    // its first loss, sends it again at 0.7 of its pace (CUBIC's cut), and it is not lost
    // again: the link is busy from the start to the end, so all are in at 4 S / B, the
    // last ones behind the resent bytes of all four.
    auto [topo, s, bytes] = one_link_pipelines(4);
    for (auto& l : topo.links) {
      l.params.rate.bps = static_cast<std::uint64_t>(std::llround(bytes * 80));
      l.params.queue = QueueLimit{QueueLimit::Unit::bytes, static_cast<std::uint64_t>(std::llround(1.5 * bytes))};
    }
    const auto r = sim::simulate(plan_of(s, topo), paced);
    // The gradients come back the same way, four at once into a queue of 1.5 S.
    CHECK(r.stats.overflows == 8);
    CHECK(r.stats.overflow_bytes > 2 * 2 * bytes);
    CHECK(r.stats.overflow_bytes < 2 * 2.5 * bytes);
    double wire = 0;
    for (const auto& l : r.wan) wire += l.wire_bytes;
    CHECK(wire == Approx(2 * 4 * bytes).epsilon(1e-9));  // activations and gradients, each once
    const auto a = arrivals(s, r, 4, 0.010);
    for (int j = 0; j < 4; ++j) {
      INFO("pipeline " << j);
      CHECK(a[static_cast<std::size_t>(j)] > 0.4);
      CHECK(a[static_cast<std::size_t>(j)] < 0.43);
    }
  }
}

TEST_CASE("paced: a sender below the link's rate measures the path's RTT, not the step's", "[unit][sim]") {
  // One pipeline on one link a -> b (RTT 20 ms), S / B = 1 ms: the message enters at its
  // pace over 5.9 ms, far below the link's rate, so each byte leaves as it enters and its
  // ACK is back 20 ms later. The model cuts what enters into 1 ms pieces and sends each
  // once it is whole (0.17 ms at the link's rate), but its ACKs leave from when an exact
  // FIFO would have sent the bytes: SRTT 20 ms. (Taken from the piece's own departure, they
  // came back on the next millisecond after it: 21 ms, and every pace 5 % slow.)
  auto [topo, s, bytes] = one_link_pipelines(1);
  for (auto& l : topo.links) l.params.rate.bps = static_cast<std::uint64_t>(std::llround(bytes * 8 * 1000));
  for (const std::int64_t step : {1'000'000, 250'000}) {
    auto o = exact(sim::SimOptions::Bursts::paced);
    o.paced_piece_ns = step;
    const auto r = sim::simulate(plan_of(s, topo), o);
    REQUIRE(r.tcp.size() == 2);  // activations a -> b, gradients b -> a
    for (const auto& t : r.tcp) {
      INFO("step " << step << " ns, " << t.src << " -> " << t.dst);
      CHECK(t.srtt_ns == Approx(20e6).margin(1e3));
    }
  }
}

TEST_CASE("paced: steps longer than the round trip and senders held up by their windows", "[unit][sim]") {
  // Four pipelines at once on one link (RTT 20 ms, S / B = 0.1 s), each sender in slow
  // start pacing at twice its window per RTT: their windows fill and they wait for ACKs.
  // With 50 ms pieces the bytes of a piece are ACKed before the link is done sending it
  // in the model (the ACKs are then taken in from that instant on); the ACKs must still
  // come, no RTT sample may fall below the path's, and the step may cost at most about
  // two steps of waiting.
  auto [topo, s, bytes] = one_link_pipelines(4);
  for (auto& l : topo.links) l.params.rate.bps = static_cast<std::uint64_t>(std::llround(bytes * 80));
  for (const std::int64_t step : {1'000'000, 50'000'000}) {
    auto o = exact(sim::SimOptions::Bursts::paced);
    o.paced_piece_ns = step;
    o.paced_piece_ns_per_message = 0;
    const auto r = sim::simulate(plan_of(s, topo), o);
    INFO("step " << step << " ns");
    REQUIRE(r.tcp.size() == 8);
    for (const auto& t : r.tcp) CHECK(t.srtt_ns >= 20e6);
    // Each direction moves 4 S at B: at least 0.4 s, and a step's worth of waiting more at most.
    const auto a = arrivals(s, r, 4, 0.010);
    CHECK(*std::max_element(a.begin(), a.end()) > 0.4);
    CHECK(*std::max_element(a.begin(), a.end()) < 0.4 + 0.15 + 2.0 * static_cast<double>(step) / 1e9);
  }
}

TEST_CASE("a message's ACKs take their share of the reverse link", "[unit][sim]") {
  // Two pipelines of 2 stages, one each way: replica 0's stage 0 in a and stage 1 in b,
  // replica 1's the other way round. Both stage-0 GPUs send S at the same instant, S / B =
  // 1 s on either link, no TCP ceiling. Each link then carries one message and the other's
  // ACKs (kAckFraction f of its wire bytes, at f of its rate): the message gets (1 - f) B
  // until those ACKs are done at 1 s, then the link, so it is in at (1 + f) S / B.
  auto [topo, s, bytes] = one_link_pipelines(2);
  s.placement = {{"a", "b"}, {"b", "a"}};
  for (auto& l : topo.links) l.params.rate.bps = static_cast<std::uint64_t>(std::llround(bytes * 8));  // S / B = 1 s
  const auto plan = plan_of(s, topo);
  // The arrivals with `opt` and ACKs on or off; the WAN links' wire bytes of the whole run
  // go to wire[acks].
  const auto run = [&](sim::SimOptions opt, bool acks, std::map<bool, double>& wire) {
    opt.acks = acks;
    const auto r = sim::simulate(plan, opt);
    for (const auto& l : r.wan) wire[acks] += l.wire_bytes;
    return arrivals(s, r, 2, 0.010);
  };
  std::map<bool, double> wire;
  auto flows = exact();
  flows.tcp_window_bytes = 0;
  const auto with = run(flows, true, wire);
  const auto without = run(flows, false, wire);
  // Everything crosses the WAN here (the stage-0 replicas' all-reduce too): with ACKs, f more.
  CHECK(wire[true] == Approx(wire[false] * (1 + sim::kAckFraction)).epsilon(1e-9));
  for (int j = 0; j < 2; ++j) {
    INFO("pipeline " << j);
    CHECK(without[static_cast<std::size_t>(j)] == Approx(1).margin(1e-6));
    CHECK(with[static_cast<std::size_t>(j)] == Approx(1 + sim::kAckFraction).margin(1e-6));
  }

  // Paced (the messages within their window, a window of 2 S from the start: each enters
  // its link's queue in 5 ms, faster than the link sends, and the link starts on it when
  // its first 1 ms piece is whole): while one link sends its queue, its ACKs hold f of its
  // rate on the other, so each link sends at (1 - f) B while the other does, and both are
  // done at 1 ms + S / ((1 - f) B). The ACKs' bytes are f of the data's, as above.
  std::map<bool, double> paced_wire;
  auto paced = exact(sim::SimOptions::Bursts::paced);
  paced.tcp_window_bytes = 2 * bytes;
  paced.initial_window_bytes = 2 * bytes;
  paced.queue_overflow = false;
  const auto paced_with = run(paced, true, paced_wire);
  const auto paced_without = run(paced, false, paced_wire);
  CHECK(paced_wire[true] == Approx(paced_wire[false] + wire[true] - wire[false]).epsilon(1e-9));
  for (int j = 0; j < 2; ++j) {
    INFO("paced, pipeline " << j);
    CHECK(paced_without[static_cast<std::size_t>(j)] == Approx(0.001 + 1).margin(1e-4));
    CHECK(paced_with[static_cast<std::size_t>(j)] == Approx(0.001 + 1 / (1 - sim::kAckFraction)).margin(1e-4));
  }
}

TEST_CASE("slow start: a message on a fresh connection takes log2(S / IW + 1) round trips", "[unit][sim]") {
  // One pipeline of 2 stages over a fast link (the rate never binds): without slow start
  // the activations arrive one-way delay after they leave; with it the connection's window
  // starts at 10 segments and doubles every RTT, so k = ceil(log2(S / IW + 1)) round trips.
  auto topo = testing::lab({{{"name", "a"}, {"nodes", 1}, {"gpus_per_node", 1}},
                            {{"name", "b"}, {"nodes", 1}, {"gpus_per_node", 1}}});
  for (auto& l : topo.links) l.params.rate.bps = 1'000'000'000'000;  // 1 Tbit/s
  auto s = testing::scenario(2, 1, 1, 1);
  s.iterations = 1;
  s.warmup = 0;
  s.connections = 1;
  s.micro_batch_size = 64;  // a message of some 0.5 MB: several rounds
  const auto plan = plan_of(s, topo);
  const double bytes = static_cast<double>(plan.pipeline_message_bytes) * kWireOverhead;
  const double delay = static_cast<double>(topo.links[0].params.delay.count()) / 1e9;
  const double rtt = 2 * delay;
  auto arrival = [&](bool slow_start, sim::SimOptions::Bursts bursts = sim::SimOptions::Bursts::shared) {
    auto opt = exact(bursts);
    opt.tcp_window_bytes = 1e12;
    opt.slow_start = slow_start;
    const auto r = sim::simulate(plan, opt);
    const auto reps = r.reports();
    const double t0 = static_cast<double>(first_span(reps[0], SpanKind::forward, 0)->end_ns) / 1e9;
    const auto* wait = first_span(reps[static_cast<std::size_t>(worker_id(s.parallelism, 1, 0, 0))],
                                  SpanKind::recv_wait, 0);
    REQUIRE(wait != nullptr);
    return static_cast<double>(wait->end_ns) / 1e9 - t0;
  };
  const double iw = sim::SimOptions{}.initial_window_bytes;
  const double k = std::ceil(std::log2(bytes / iw + 1));
  INFO("message " << bytes << " bytes, initial window " << iw << ", " << k << " rounds of " << rtt * 1e3 << " ms");
  REQUIRE(k >= 3);  // the check means something only when slow start takes several rounds
  CHECK(arrival(false) == Approx(delay).margin(1e-3));
  const double with = arrival(true) - delay;
  CHECK(with >= (k - 1) * rtt - 1e-3);
  CHECK(with <= k * rtt + 1e-3);
  // The paced model's window grows as its ACKs come back (no queue here, so HyStart never
  // ends slow start), a round of 2 x cwnd / SRTT each: the same k rounds, the last one
  // paced over half an RTT at most, and each round up to a piece (1 ms) later, as ACKs
  // are taken a piece at a time.
  const double paced = arrival(false, sim::SimOptions::Bursts::paced) - delay;
  CHECK(paced >= (k - 1) * rtt - 1e-3);
  CHECK(paced <= (k - 0.5) * rtt + k * 1e-3 + 1e-3);
}

TEST_CASE("paced: a message whose window fills with lost bytes still gets through", "[unit][sim]") {
  // One pipeline, a 0.5 MB message (more than slow start's window for several rounds) into
  // a queue of one frame on a link where it takes 10 s: slow start's first round enters 26
  // times faster than the link, most of it is lost, and the window (cut to 0.7 of 10
  // segments) is full of lost bytes. The sender hears of them a round trip later (not when
  // its last byte has gone, which would never come) and sends them again; the message
  // arrives, after its line time and the resends.
  auto topo = testing::lab({{{"name", "a"}, {"nodes", 1}, {"gpus_per_node", 1}},
                            {{"name", "b"}, {"nodes", 1}, {"gpus_per_node", 1}}});
  auto s = testing::scenario(2, 1, 1, 1);
  s.iterations = 1;
  s.warmup = 0;
  s.connections = 1;
  s.micro_batch_size = 64;
  const double bytes = static_cast<double>(plan_of(s, topo).pipeline_message_bytes) * kWireOverhead;
  for (auto& l : topo.links) {
    l.params.rate.bps = static_cast<std::uint64_t>(std::llround(bytes * 0.8));  // S / B = 10 s
    l.params.queue = QueueLimit{QueueLimit::Unit::bytes, 1'514};               // one frame
  }
  auto opt = exact(sim::SimOptions::Bursts::paced);
  opt.acks = false;
  sim::SimResult r;
  REQUIRE_NOTHROW(r = sim::simulate(plan_of(s, topo), opt));
  CHECK(r.stats.overflows >= 1);
  CHECK(r.stats.overflow_bytes > 0);
  const auto a = arrivals(s, r, 1, 0.010);
  CHECK(a[0] > 10.0);
  CHECK(a[0] < 30.0);
  double wire = 0;
  for (const auto& l : r.wan) wire += l.wire_bytes;
  CHECK(wire == Approx(2 * bytes).epsilon(1e-9));  // activations and gradients, each once
}

TEST_CASE("paced: the result does not hang on the piece length (a reopened window sends at its pace)", "[unit][sim]") {
  // three-dc-7b at full size (96 GPUs, 4 pipelines; 4.4 Gbit/s WAN links, RTT 68-122 ms)
  // under atlas: each transfer has its link alone, in slow start, paced at the link's rate.
  // A window that fills waits for its ACKs; when they reopen it, TCP sends on at its pace
  // from then. Crediting it instead with its pace since the last cut (before it filled) put
  // the whole reopened window into the queue at once: queues of up to 11 ms that ended
  // slow start through HyStart (a quarter of the pairs here) with 1 ms pieces, 3.42 s per
  // iteration, against 2.85 s with 0.25 ms pieces. The pieces are only the model's step:
  // quartering them must not move the result.
  const auto plan = full_size_three_dc_7b("atlas", 4, 2);
  const auto run = [&](std::int64_t piece_ns) {
    auto opt = paper_options();
    opt.paced_piece_ns = piece_ns;
    const auto r = sim::simulate(plan, opt);
    double in_slow_start = 0;
    for (const auto& t : r.tcp) in_slow_start += t.ssthresh_bytes >= t.cwnd_bytes ? 1 : 0;
    return std::pair{seconds_per_iteration(r), in_slow_start / static_cast<double>(r.tcp.size())};
  };
  const auto [t1, ss1] = run(1'000'000);
  const auto [t4, ss4] = run(250'000);
  INFO("1 ms pieces: " << t1 << " s per iteration; 0.25 ms: " << t4 << " s");
  CHECK(t1 == Approx(t4).epsilon(0.02));
  // No pair left slow start because of a queue that its own pace would not have made.
  CHECK(ss1 == Approx(ss4).margin(0.1));
}

TEST_CASE("paced: long pieces with many messages entering give the result of 1 ms pieces", "[unit][sim]") {
  // three-dc-7b at full size with 64 pipelines (1,536 GPUs) under fair: some 64 messages
  // enter each link at once, so pieces are 100 us per message (6.4 ms), cut on their own
  // clock, and a message that starts or ends in between does so inside the open piece.
  // That is a coarser step, not another model: the iteration time stays within 2 % of
  // 1 ms pieces everywhere (paced_piece_ns_per_message = 0), with fewer events (measured:
  // 48.61 against 49.17 s, 467,000 events against 870,000).
  const auto plan = full_size_three_dc_7b("fair", 64, 4);
  const auto run = [&](std::int64_t per_message) {
    auto opt = paper_options();
    opt.paced_piece_ns_per_message = per_message;
    const auto r = sim::simulate(plan, opt);
    return std::pair{seconds_per_iteration(r), r.stats.events};
  };
  const auto [fine, fine_events] = run(0);
  const auto [coarse, coarse_events] = run(100'000);
  INFO("1 ms pieces: " << fine << " s per iteration, " << fine_events << " events; long pieces: " << coarse << " s, "
                       << coarse_events << " events");
  CHECK(coarse == Approx(fine).epsilon(0.02));
  CHECK(coarse_events < fine_events * 0.6);
}

TEST_CASE("paced: streamed pieces keep the result of 1 ms pieces with fewer pieces, and every byte", "[unit][sim]") {
  // three-dc-7b at full size with 64 pipelines (1,536 GPUs) under atlas: each window's
  // transfer enters alone, past slow start after the first iteration, its window holding
  // all of it, at a pace below the link's. With --paced-stream 8ms it goes in 8 ms pieces
  // that the link sends as they fill; its ACKs come back per millisecond, as plain
  // pieces' do. Measured: 44.53 s per iteration against 44.44 s with 1 ms pieces
  // (+0.2 %), 0.56 x the events, 0.37 x the flows; the same payload on every link, and the
  // same wire bytes but for what the queue lost and was sent again.
  const auto plan = full_size_three_dc_7b("atlas", 64, 3);
  const auto run = [&](std::int64_t stream) {
    auto opt = paper_options();
    opt.paced_stream_ns = stream;
    return sim::simulate(plan, opt);
  };
  const auto plain = run(0);
  const auto streamed = run(8'000'000);
  const double a = seconds_per_iteration(plain);
  const double b = seconds_per_iteration(streamed);
  INFO("1 ms pieces: " << a << " s per iteration, " << plain.stats.events << " events, " << plain.stats.flows
                       << " flows; 8 ms streams: " << b << " s, " << streamed.stats.events << " events, "
                       << streamed.stats.flows << " flows");
  CHECK(b == Approx(a).epsilon(0.005));
  CHECK(streamed.stats.events < plain.stats.events * 0.7);
  CHECK(streamed.stats.flows < plain.stats.flows / 2);
  REQUIRE(plain.wan.size() == streamed.wan.size());
  for (std::size_t i = 0; i < plain.wan.size(); ++i) {
    INFO("link " << i);
    CHECK(streamed.wan[i].payload_bytes == Approx(plain.wan[i].payload_bytes).epsilon(1e-9));
    CHECK(streamed.wan[i].wire_bytes == Approx(plain.wan[i].wire_bytes).epsilon(1e-4));
  }
  // Off by default; a stream no longer than a plain piece is refused.
  CHECK(sim::SimOptions{}.paced_stream_ns == 0);
  auto bad = paper_options();
  bad.paced_stream_ns = -1;
  CHECK_THROWS_AS(sim::simulate(plan, bad), std::invalid_argument);
}

