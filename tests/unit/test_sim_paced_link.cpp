// The paced burst model alone (sim/paced_link.hpp): a message enters its link's queue as
// its TCP connections send it, in slow start from the initial window, is delivered when
// its last piece has left, and its ACKs open the window; a full queue drops, CUBIC cuts,
// the lost bytes are sent again; streamed pieces carry the same messages through.
#include <catch2/catch.hpp>

#include <cmath>

#include "test_sim_support.hpp"
#include "wanlab/sim/paced_link.hpp"

using namespace wanlab;
using namespace wanlab::sim;

namespace {
constexpr Nanos kRtt = 20'000'000;
constexpr Nanos kDelay = 10'000'000;

SimOptions paced() {
  SimOptions o;
  o.bursts = SimOptions::Bursts::paced;
  return o;
}

const PacedBursts& model_of(const testing::BurstRig& rig) { return dynamic_cast<const PacedBursts&>(*rig.model); }

void check_drained(const testing::BurstRig& rig) {
  const auto& L = model_of(rig).link(0);
  CHECK(L.entering.empty());
  CHECK(L.pieces.empty());
  CHECK(L.server == kNone);
}
}  // namespace

TEST_CASE("a paced message takes slow start's round trips and leaves its window grown", "[unit][sim][sim-parts]") {
  testing::BurstRig rig(testing::two_dc_plan(), paced());
  const double wire = 300e3;  // 2.4 ms at the link's rate; 10 segments first
  REQUIRE(rig.send(wire));
  CHECK(rig.ctx.messages[0].paced);
  CHECK(rig.ctx.messages[0].burst);
  rig.run();
  REQUIRE(rig.delivered.size() == 1);
  CHECK(rig.released == std::vector<std::uint32_t>{0});
  // 10, 20, 40, 80, 160 segments: the last bytes enter in the fifth round trip.
  const auto at = rig.delivered.at(0);
  CHECK(at > 3 * kRtt + kDelay);
  CHECK(at < 8 * kRtt + kDelay);
  const auto& tcp = rig.connections[0].tcp;
  CHECK(tcp.cwnd > 100 * kMss);
  CHECK(std::isinf(tcp.ssthresh));  // an empty queue: HyStart saw no delay
  CHECK(tcp.srtt == Approx(static_cast<double>(kRtt)).epsilon(0.1));
  CHECK(rig.ctx.wire[0].first == 0);
  CHECK(rig.ctx.wire[0].last == at - kDelay);
  check_drained(rig);
}

TEST_CASE("the next message on a pair goes with the window the pair reached", "[unit][sim][sim-parts]") {
  testing::BurstRig rig(testing::two_dc_plan(), paced());
  REQUIRE(rig.send(300e3));
  const Nanos first_done = rig.run();
  const Nanos first_took = rig.delivered.at(0);
  REQUIRE(rig.send(300e3, first_done, &rig.connections[0]));
  rig.run(first_done);
  REQUIRE(rig.delivered.size() == 2);
  CHECK(rig.delivered.at(1) - first_done < 2 * kRtt + kDelay);
  CHECK(rig.delivered.at(1) - first_done < first_took);
}

TEST_CASE("many paced senders overflow the queue: CUBIC cuts, the lost bytes are sent again",
          "[unit][sim][sim-parts]") {
  testing::BurstRig rig(testing::two_dc_plan(), paced());
  // 200 connections at once: their second round (sent while each window was still below
  // HyStart's 16 segments, so nothing ends slow start first) overfills the 1.5 x BDP queue.
  const int n = 200;
  for (int i = 0; i < n; ++i) REQUIRE(rig.send(4e5));
  rig.run();
  CHECK(rig.delivered.size() == static_cast<std::size_t>(n));
  CHECK(rig.released.size() == static_cast<std::size_t>(n));
  CHECK(rig.ctx.stats.overflows > 0);
  CHECK(rig.ctx.stats.overflow_bytes > 0);
  int cut = 0;
  double resent = 0;
  for (const auto& c : rig.connections) {
    if (std::isfinite(c.tcp.ssthresh)) ++cut;
    resent += c.tcp.resent;
  }
  CHECK(cut > 0);
  CHECK(resent == Approx(rig.ctx.stats.overflow_bytes));
  // 80 MB over 1 Gbit/s take at least 640 ms.
  Nanos last = 0;
  for (const auto& [id, at] : rig.delivered) last = std::max(last, at);
  CHECK(last > 640'000'000);
  check_drained(rig);
}

TEST_CASE("streamed pieces carry paced messages past slow start to the end", "[unit][sim][sim-parts]") {
  auto o = paced();
  o.paced_stream_ns = 8'000'000;
  testing::BurstRig rig(testing::two_dc_plan(), o);
  auto plain = testing::BurstRig(testing::two_dc_plan(), paced());
  for (int i = 0; i < 8; ++i) {
    REQUIRE(rig.send(4e6));
    REQUIRE(plain.send(4e6));
  }
  rig.run();
  plain.run();
  REQUIRE(rig.delivered.size() == 8);
  REQUIRE(plain.delivered.size() == 8);
  Nanos streamed_end = 0, plain_end = 0;
  for (const auto& [id, at] : rig.delivered) streamed_end = std::max(streamed_end, at);
  for (const auto& [id, at] : plain.delivered) plain_end = std::max(plain_end, at);
  // 32 MB at 1 Gbit/s: 256 ms at least; the two ways within a few percent of each other.
  CHECK(streamed_end > 256'000'000);
  CHECK(static_cast<double>(streamed_end) == Approx(static_cast<double>(plain_end)).epsilon(0.1));
  check_drained(rig);
}

TEST_CASE("a revoked paced message stops entering and goes on when granted again", "[unit][sim][sim-parts]") {
  testing::BurstRig rig(testing::two_dc_plan(), paced());
  REQUIRE(rig.send(300e3));
  rig.ctx.net.update(0);
  rig.model->pause(0, 0);
  CHECK(rig.ctx.messages[0].paused);
  CHECK(model_of(rig).link(0).entering.empty());
  CHECK(rig.model->entered(0, 50'000'000) == 0);
  rig.run();
  CHECK(rig.delivered.empty());  // nothing moves while revoked
  const Nanos later = 100'000'000;
  rig.model->resume(0, later);
  CHECK_FALSE(rig.ctx.messages[0].paused);
  rig.run(later);
  REQUIRE(rig.delivered.size() == 1);
  CHECK(rig.delivered.at(0) > later + 3 * kRtt);
}
