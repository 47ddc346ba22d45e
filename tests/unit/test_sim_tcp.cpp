// The simulator's TCP model (sim/tcp_model.hpp): slow start by what is ACKed while the
// window is in use, HyStart's delay test, CUBIC's cut and TCP-friendly growth, the pacing
// rate, and the shared flows' slow start.
#include <catch2/catch.hpp>

#include <cmath>

#include "wanlab/sim/tcp_model.hpp"

using namespace wanlab::sim;
using wanlab::Nanos;

namespace {
constexpr Nanos kRtt = 20'000'000;
constexpr double kWindow = 4 << 20;
}  // namespace

TEST_CASE("a TCP window starts at the initial window and the path's RTT, once", "[unit][sim][sim-parts]") {
  TcpWindow w;
  w.start(kWindow, 10 * kMss, kRtt);
  CHECK(w.cwnd == 10 * kMss);
  CHECK(w.srtt == static_cast<double>(kRtt));
  CHECK(std::isinf(w.ssthresh));
  w.cwnd = 50 * kMss;
  w.start(kWindow, 10 * kMss, 2 * kRtt);  // the pair's later messages keep what it reached
  CHECK(w.cwnd == 50 * kMss);
  CHECK(w.srtt == static_cast<double>(kRtt));

  TcpWindow small;  // a buffer below the initial window: the buffer holds what is in flight
  small.start(4 * kMss, 10 * kMss, kRtt);
  CHECK(small.cwnd == 10 * kMss);
  CHECK(small.room() == 4 * kMss);
  small.inflight = 3 * kMss;
  CHECK(small.room() == kMss);
}

TEST_CASE("slow start grows by what is ACKed only while half the window is in use", "[unit][sim][sim-parts]") {
  TcpWindow w;
  w.start(kWindow, 10 * kMss, kRtt);
  w.inflight = 10 * kMss;  // all of it in flight
  w.on_ack(5 * kMss, kRtt, 0, kRtt, kRtt);
  CHECK(w.cwnd == 15 * kMss);
  CHECK(w.inflight == 5 * kMss);

  TcpWindow idle;  // an application-limited sender: a quarter of the window in flight
  idle.start(kWindow, 10 * kMss, kRtt);
  idle.inflight = 2 * kMss;
  idle.on_ack(2 * kMss, kRtt, 0, kRtt, kRtt);
  CHECK(idle.cwnd == 10 * kMss);
  CHECK(idle.inflight == 0);

  // A sender its buffer holds to W in flight: the window grows on in slow start to twice
  // W (Linux's tcp_is_cwnd_limited), not beyond, and is never more room than the buffer.
  TcpWindow held;
  held.start(kWindow, 10 * kMss, kRtt);
  held.cwnd = kWindow;
  held.inflight = kWindow;
  CHECK(held.room() == 0);
  held.on_ack(10 * kMss, kRtt, 0, kRtt, kRtt);
  CHECK(held.cwnd == kWindow + 10 * kMss);
  CHECK(held.room() == 10 * kMss);  // the buffer, not the window, bounds it
  held.cwnd = 2 * kWindow - kMss;
  held.inflight = kWindow;
  held.on_ack(10 * kMss, kRtt, 0, kRtt, kRtt);
  CHECK(held.cwnd == 2 * kWindow + 9 * kMss);  // the ACKs came while half of it was in use
  held.inflight = kWindow;
  held.on_ack(10 * kMss, kRtt, 0, kRtt, kRtt);
  CHECK(held.cwnd == 2 * kWindow + 9 * kMss);  // now less than half: no more
  // Its pacing rate follows the window, as Linux's: 2 x cwnd / SRTT in slow start.
  CHECK(held.pacing_rate(1.2) == Approx(2 * held.cwnd / static_cast<double>(kRtt)));
}

TEST_CASE("HyStart ends slow start when a round's first 8 segments see more than the least RTT", "[unit][sim][sim-parts]") {
  TcpWindow w;
  w.start(kWindow, 10 * kMss, kRtt);
  w.cwnd = 32 * kMss;  // above HyStart's low window
  w.inflight = 32 * kMss;
  // Round 1: 8 segments at the path's RTT, the least yet (20 ms: the threshold is
  // max(4 ms, 20 / 8 ms) = 4 ms above it).
  w.on_ack(8 * kMss, kRtt, 0, kRtt, kRtt);
  CHECK(std::isinf(w.ssthresh));
  CHECK(w.delay_min == static_cast<double>(kRtt));
  // Round 2: 4 segments 5 ms late, then 4 only 3 ms late: the round's least RTT is 3 ms
  // above, slow start goes on.
  w.inflight = w.cwnd;
  Nanos sent = kRtt;
  w.on_ack(4 * kMss, sent + kRtt + 5'000'000, sent, sent + kRtt + 5'000'000, sent + kRtt + 5'000'000);
  w.on_ack(4 * kMss, sent + kRtt + 5'000'001, sent + 1, sent + kRtt + 3'000'001, sent + kRtt + 3'000'001);
  CHECK(std::isinf(w.ssthresh));
  // Later ACKs of the same round are not HyStart's sample, however late.
  w.on_ack(kMss, sent + kRtt + 9'000'002, sent + 2, sent + kRtt + 9'000'002, sent + kRtt + 9'000'002);
  CHECK(std::isinf(w.ssthresh));
  // Round 3: its first 8 segments all 5 ms late (one ACK batch): slow start ends at the
  // window it had before them.
  sent = 2 * kRtt + 6'000'000;
  w.inflight = w.cwnd;
  const double before = w.cwnd;
  w.on_ack(8 * kMss, sent + kRtt + 5'000'000, sent, sent + kRtt + 5'000'000, sent + kRtt + 5'000'000);
  CHECK(w.ssthresh == before);
  CHECK(w.cwnd == before);

  // A connection that begins while a queue stands has that queue in its least RTT: the
  // same 10 ms over the path's RTT in every round ends no slow start.
  TcpWindow late;
  late.start(kWindow, 10 * kMss, kRtt);
  late.cwnd = 32 * kMss;
  for (int round = 0; round < 3; ++round) {
    const Nanos at = round * (kRtt + 10'000'000);
    late.inflight = late.cwnd;
    late.on_ack(8 * kMss, at + kRtt + 10'000'000, at, at + kRtt + 10'000'000, at + kRtt + 10'000'000);
  }
  CHECK(std::isinf(late.ssthresh));
  CHECK(late.cwnd > 32 * kMss);

  TcpWindow low;  // below 16 segments HyStart waits
  low.start(kWindow, 10 * kMss, kRtt);
  low.inflight = 10 * kMss;
  low.on_ack(4 * kMss, kRtt, 0, kRtt, kRtt);  // 14 segments
  low.inflight = low.cwnd;
  low.on_ack(kMss, 3 * kRtt, kRtt, 3 * kRtt, 3 * kRtt);  // 40 ms late, but at 14 segments
  CHECK(low.cwnd == 15 * kMss);
  CHECK(std::isinf(low.ssthresh));
}

TEST_CASE("HyStart's ACK train ends slow start when a round's ACKs keep coming past the least RTT",
          "[unit][sim][sim-parts]") {
  // The round's ACK batches come back `gap` apart, each spread over the millisecond before
  // it (as a busy link sends a piece), from t0 on, their RTT `queue` above the path's (3 ms:
  // below the delay test's 4 ms). A round lasts until the ACKs of what was sent after its
  // start come back: with a queue, longer than the least RTT.
  const auto round = [](TcpWindow& w, Nanos t0, Nanos gap, int batches, Nanos queue) {
    w.inflight = w.cwnd;
    for (int i = 0; i < batches; ++i) {
      const Nanos back = t0 + i * gap;
      w.on_ack(kMss / 2, back, back - kRtt - queue, back, back - 1'000'000);
    }
  };
  TcpWindow w;
  w.start(kWindow, 10 * kMss, kRtt);
  w.cwnd = 64 * kMss;
  round(w, kRtt, 1'000'000, 20, 0);  // no queue: the round ends as its train reaches 20 ms
  CHECK(std::isinf(w.ssthresh));
  CHECK(w.delay_min == static_cast<double>(kRtt));
  TcpWindow longer = w;  // a 3 ms queue: the next round's ACKs run on past the least RTT
  round(longer, 3 * kRtt, 1'000'000, 23, 3'000'000);
  CHECK_FALSE(std::isinf(longer.ssthresh));
  CHECK(longer.round_min < longer.delay_min + 4e6);  // not the delay test's doing
  TcpWindow sparse = w;  // the same round with ACKs 4 ms apart (gaps beyond 2 ms): no train
  round(sparse, 3 * kRtt, 4'000'000, 6, 3'000'000);
  CHECK(std::isinf(sparse.ssthresh));
}

TEST_CASE("a loss cuts the window by CUBIC's beta once per round trip", "[unit][sim][sim-parts]") {
  TcpWindow w;
  w.start(kWindow, 10 * kMss, kRtt);
  w.cwnd = 100 * kMss;
  CHECK(w.on_loss(1'000'000));
  CHECK(w.cwnd == Approx(70 * kMss));
  CHECK(w.ssthresh == w.cwnd);
  CHECK(w.recovery_until == 1'000'000 + kRtt);
  CHECK_FALSE(w.on_loss(1'000'000 + kRtt - 1));  // the same loss event
  CHECK(w.cwnd == Approx(70 * kMss));
  CHECK(w.on_loss(1'000'000 + kRtt));
  CHECK(w.cwnd == Approx(49 * kMss));

  TcpWindow tiny;  // never below two segments
  tiny.start(kWindow, 2 * kMss, kRtt);
  tiny.on_loss(0);
  CHECK(tiny.cwnd == 2 * kMss);
}

TEST_CASE("congestion avoidance grows half a segment per round trip while the window is full",
          "[unit][sim][sim-parts]") {
  TcpWindow w;
  w.start(kWindow, 10 * kMss, kRtt);
  w.cwnd = 100 * kMss;
  w.ssthresh = 100 * kMss;
  w.inflight = 100 * kMss;
  w.on_ack(100 * kMss, kRtt, 0, kRtt, kRtt);  // a whole window ACKed
  CHECK(w.cwnd == Approx(100 * kMss + kRenoFriendly * kMss));
  CHECK(kRenoFriendly == Approx(0.5294).epsilon(1e-3));

  TcpWindow part;  // not full (more than a segment below): no growth
  part.start(kWindow, 10 * kMss, kRtt);
  part.cwnd = 100 * kMss;
  part.ssthresh = 100 * kMss;
  part.inflight = 50 * kMss;
  part.on_ack(10 * kMss, kRtt, 0, kRtt, kRtt);
  CHECK(part.cwnd == 100 * kMss);
}

TEST_CASE("after a loss CUBIC's window returns to its maximum in K seconds, then probes beyond",
          "[unit][sim][sim-parts]") {
  // A full window ACKed every 100 ms round trip: from 100 segments cut to 70, K =
  // cbrt(30 / 0.4) = 4.22 s; at K the window is back at W_max (TCP-friendly growth alone:
  // 70 + 0.53 x 42 = 92); then convex, W_max + 0.4 (t - K)^3.
  constexpr Nanos rtt = 100'000'000;
  TcpWindow w;
  w.start(kWindow * 100, 10 * kMss, rtt);
  w.cwnd = 100 * kMss;
  w.delay_min = static_cast<double>(rtt);
  REQUIRE(w.on_loss(0));
  CHECK(w.w_max == Approx(100 * kMss));
  Nanos t = 0;
  const auto rounds = [&](double seconds) {
    for (const Nanos end = t + static_cast<Nanos>(seconds * 1e9); t < end;) {
      t += rtt;
      w.inflight = w.cwnd;
      w.on_ack(w.cwnd, t, t - rtt, t, t - rtt / 2);
    }
  };
  const double k = std::cbrt(30 / kCubicC);
  rounds(k - 0.1);  // (t counts one least RTT ahead, as Linux's)
  CHECK(w.cwnd / kMss == Approx(100).epsilon(0.03));
  rounds(6);
  const double cubic = 100 + kCubicC * std::pow(6.0, 3);
  CHECK(w.cwnd / kMss == Approx(cubic).epsilon(0.1));
  CHECK(w.cwnd / kMss > 100 + 0.53 * 100);  // beyond what TCP-friendly growth gives

  // Fast convergence: a loss below the last maximum remembers less than the window.
  const double before = w.cwnd;
  w.w_max = 2 * before;
  REQUIRE(w.on_loss(t + rtt));
  CHECK(w.w_max == Approx(before * (1 + kCubicBeta) / 2));
}

TEST_CASE("the SRTT is smoothed by 1/8 and the pacing rate follows Linux", "[unit][sim][sim-parts]") {
  TcpWindow w;
  w.start(kWindow, 10 * kMss, kRtt);
  w.on_ack(0, 0, 0, 2 * kRtt, 2 * kRtt);
  CHECK(w.srtt == Approx(0.875 * kRtt + 0.125 * 2 * kRtt));
  w.srtt = static_cast<double>(kRtt);
  // Slow start below half the threshold: 200 %; else the ratio given.
  CHECK(w.pacing_rate(1.2) == Approx(2.0 * 10 * kMss / static_cast<double>(kRtt)));
  w.ssthresh = 15 * kMss;
  CHECK(w.pacing_rate(1.2) == Approx(1.2 * 10 * kMss / static_cast<double>(kRtt)));
  w.srtt = 0;  // never divides by less than 1 ns
  CHECK(w.pacing_rate(1.0) == Approx(10 * kMss));
}

TEST_CASE("a shared flow's slow start doubles per RTT and starts over after an idle RTO", "[unit][sim][sim-parts]") {
  SlowStartWindow s;
  CHECK(s.begin(0, kRtt, 10 * kMss, kWindow, true) == 10 * kMss);
  CHECK(SlowStartWindow::next(10 * kMss, kWindow) == 20 * kMss);
  CHECK(SlowStartWindow::next(kWindow - 1, kWindow) == kWindow);
  s.end(80 * kMss, 1'000'000'000);
  // Within the RTO (200 ms floor): it keeps what it reached.
  CHECK(s.begin(1'150'000'000, kRtt, 10 * kMss, kWindow, true) == 80 * kMss);
  // Idle longer: over again, unless the scenario keeps windows after idle.
  CHECK(s.begin(1'300'000'000, kRtt, 10 * kMss, kWindow, false) == 80 * kMss);
  CHECK(s.begin(1'300'000'000, kRtt, 10 * kMss, kWindow, true) == 10 * kMss);
  CHECK(s.begin(1'300'000'000, kRtt, 10 * kMss, 4 * kMss, true) == 4 * kMss);
}
