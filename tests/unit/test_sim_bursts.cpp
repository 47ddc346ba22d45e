// The burst models behind one interface (sim/burst_model.hpp): shared takes nothing, fifo
// serves whole bursts in arrival order with drop-tail and retransmissions.
#include <catch2/catch.hpp>

#include "test_sim_support.hpp"

using namespace wanlab;
using namespace wanlab::sim;

namespace {
SimOptions with(SimOptions::Bursts b) {
  SimOptions o;
  o.bursts = b;
  o.acks = false;  // the reverse link stays out of the exact times
  return o;
}
constexpr double kLinkBytesPerNs = 1e9 / 8e9;  // 1 Gbit/s
constexpr Nanos kDelay = 10'000'000;
}  // namespace

TEST_CASE("the shared model takes no burst: every message is a shared flow", "[unit][sim][sim-parts]") {
  testing::BurstRig rig(testing::two_dc_plan(), with(SimOptions::Bursts::shared));
  CHECK_FALSE(rig.send(1e6));
  CHECK(rig.ctx.events.empty());
  CHECK_FALSE(rig.ctx.net.next_finish());
}

TEST_CASE("fifo bursts leave one after the other at the link's full rate", "[unit][sim][sim-parts]") {
  auto o = with(SimOptions::Bursts::fifo);
  o.queue_overflow = false;
  testing::BurstRig rig(testing::two_dc_plan(), o);
  REQUIRE(rig.send(1e6));
  REQUIRE(rig.send(2e6));
  rig.run();
  REQUIRE(rig.delivered.size() == 2);
  CHECK(static_cast<double>(rig.delivered.at(0)) == Approx(1e6 / kLinkBytesPerNs + kDelay).margin(2));
  CHECK(static_cast<double>(rig.delivered.at(1)) == Approx(3e6 / kLinkBytesPerNs + kDelay).margin(2));
  CHECK(rig.ctx.wire[0].first == 0);
  CHECK(rig.ctx.wire[1].first == static_cast<Nanos>(rig.delivered.at(0) - kDelay));
  CHECK(rig.ctx.stats.overflows == 0);
}

TEST_CASE("a fifo burst larger than the queue loses the rest and sends it again after an RTO",
          "[unit][sim][sim-parts]") {
  testing::BurstRig rig(testing::two_dc_plan(), with(SimOptions::Bursts::fifo));  // policy fair: not paced
  const double limit = rig.ctx.queue_limit_bytes(0);
  REQUIRE(limit > 1e6);
  const double burst = limit + 4e6;
  REQUIRE(rig.send(burst));
  rig.run();
  CHECK(rig.ctx.stats.overflows == 1);
  CHECK(rig.ctx.stats.overflow_bytes == Approx(4e6));
  // RTO: the RTT (20 ms, the queue empty when it was lost) plus 200 ms; then the lost
  // bytes at the full rate, then the one-way delay.
  const double rto = 20e6 + 200e6;
  REQUIRE(rig.delivered.size() == 1);
  CHECK(static_cast<double>(rig.delivered.at(0)) == Approx(rto + 4e6 / kLinkBytesPerNs + kDelay).margin(2));
}
