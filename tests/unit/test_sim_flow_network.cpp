// The simulator's fluid network: max-min fair shares, shares given up by flows
// bottlenecked elsewhere, per-connection ceilings, rate changes, finishing order.
#include <catch2/catch.hpp>

#include "wanlab/sim/flow_network.hpp"

using namespace wanlab::sim;
using wanlab::Nanos;


namespace {

constexpr double kMbit = 1e6;
constexpr double kMB = 1e6;

// Runs the network until every flow is done; the finish time of each flow by id.
std::vector<Nanos> run_all(FlowNetwork& net, std::size_t flows, Nanos now = 0) {
  std::vector<Nanos> done(flows, -1);
  net.update(now);
  while (auto t = net.next_finish()) {
    for (const auto f : net.take_finished(*t)) done.at(f) = *t;
    net.update(*t);
  }
  return done;
}

double seconds(Nanos ns) {
  return static_cast<double>(ns) / 1e9;
}

}  // namespace

TEST_CASE("two flows on one link share it equally", "[unit][sim]") {
  FlowNetwork net;
  const auto l = net.add_link(100 * kMbit);
  const auto a = net.start({l}, 1 * kMB, 1, kUnlimited, 0);
  const auto b = net.start({l}, 1 * kMB, 1, kUnlimited, 0);
  net.update(0);
  CHECK(net.rate_bps(a) == Approx(50 * kMbit));
  CHECK(net.rate_bps(b) == Approx(50 * kMbit));
  const auto done = run_all(net, 2);
  // 2 MB at 100 Mbit/s.
  CHECK(seconds(done[0]) == Approx(0.16).epsilon(1e-9));
  CHECK(seconds(done[1]) == Approx(0.16).epsilon(1e-9));
}

TEST_CASE("a flow bottlenecked elsewhere leaves its share to the others", "[unit][sim]") {
  FlowNetwork net;
  const auto shared = net.add_link(100 * kMbit);
  const auto narrow = net.add_link(30 * kMbit);
  const auto a = net.start({shared, narrow}, 10 * kMB, 1, kUnlimited, 0);
  const auto b = net.start({shared}, 10 * kMB, 1, kUnlimited, 0);
  const auto c = net.start({shared}, 10 * kMB, 1, kUnlimited, 0);
  net.update(0);
  CHECK(net.rate_bps(a) == Approx(30 * kMbit));
  CHECK(net.rate_bps(b) == Approx(35 * kMbit));
  CHECK(net.rate_bps(c) == Approx(35 * kMbit));
}

TEST_CASE("when a flow ends the others take its share", "[unit][sim]") {
  FlowNetwork net;
  const auto l = net.add_link(100 * kMbit);
  net.start({l}, 1 * kMB, 1, kUnlimited, 0);
  net.start({l}, 3 * kMB, 1, kUnlimited, 0);
  const auto done = run_all(net, 2);
  CHECK(seconds(done[0]) == Approx(0.16).epsilon(1e-9));  // 2 x 1 MB at 50 Mbit/s each
  CHECK(seconds(done[1]) == Approx(0.32).epsilon(1e-9));  // then its last 2 MB alone
}

TEST_CASE("a per-connection ceiling caps a flow and the link goes to the others", "[unit][sim]") {
  FlowNetwork net;
  const auto l = net.add_link(100 * kMbit);
  // One long-RTT TCP connection cannot fill the pipe...
  const auto one = net.start({l}, 10 * kMB, 1, 20 * kMbit, 0);
  net.update(0);
  CHECK(net.rate_bps(one) == Approx(20 * kMbit));
  // ...a flow without a ceiling takes the rest...
  const auto other = net.start({l}, 10 * kMB, 1, kUnlimited, 0);
  net.update(0);
  CHECK(net.rate_bps(one) == Approx(20 * kMbit));
  CHECK(net.rate_bps(other) == Approx(80 * kMbit));
  // ...and a flow striped over four connections gets four shares: with six connections
  // on the link, the fair share (100/6) is below the ceiling, which then binds nobody.
  const auto striped = net.start({l}, 10 * kMB, 4, 20 * kMbit, 0);
  net.update(0);
  CHECK(net.rate_bps(one) == Approx(100 * kMbit / 6));
  CHECK(net.rate_bps(striped) == Approx(4 * 100 * kMbit / 6));
  CHECK(net.rate_bps(other) == Approx(100 * kMbit / 6));
}

TEST_CASE("a rate change re-plans the flows at the time it happens", "[unit][sim]") {
  FlowNetwork net;
  const auto l = net.add_link(100 * kMbit);
  const auto f = net.start({l}, 2 * kMB, 1, kUnlimited, 0);
  net.update(0);
  REQUIRE(net.next_finish() == 160'000'000);
  // After 80 ms (1 MB), the link drops to 10 Mbit/s: the last MB takes 800 ms.
  net.set_rate(l, 10 * kMbit, 80'000'000);
  net.update(80'000'000);
  CHECK(net.sent(f, 80'000'000) == Approx(1 * kMB));
  CHECK(net.next_finish() == 880'000'000);
  // An outage stops it; the rate coming back resumes it.
  net.set_rate(l, 0, 480'000'000);
  net.update(480'000'000);
  CHECK(!net.next_finish());
  CHECK(net.sent(f, 900'000'000) == Approx(1.5 * kMB));
  net.set_rate(l, 100 * kMbit, 1'000'000'000);
  net.update(1'000'000'000);
  CHECK(net.next_finish() == 1'040'000'000);
}

TEST_CASE("flows on separate links do not affect each other; no link and no ceiling is instant", "[unit][sim]") {
  FlowNetwork net;
  const auto a = net.add_link(100 * kMbit);
  const auto b = net.add_link(10 * kMbit);
  net.start({a}, 1 * kMB, 1, kUnlimited, 0);
  net.start({b}, 1 * kMB, 1, kUnlimited, 0);
  net.start({}, 1 * kMB, 1, kUnlimited, 0);
  const auto done = run_all(net, 3);
  CHECK(seconds(done[0]) == Approx(0.08).epsilon(1e-9));
  CHECK(seconds(done[1]) == Approx(0.8).epsilon(1e-9));
  CHECK(done[2] == 0);
  CHECK(net.active_flows() == 0);
}

TEST_CASE("a ceiling change moves a flow without losing its bytes", "[unit][sim]") {
  FlowNetwork net;
  const auto l = net.add_link(100 * kMbit);
  const auto f = net.start({l}, 2 * kMB, 1, 10 * kMbit, 0);
  net.update(0);
  net.set_ceiling(f, 0, 800'000'000);  // 1 MB sent, then paused
  net.update(800'000'000);
  CHECK(net.sent(f, 900'000'000) == Approx(1 * kMB));
  CHECK(!net.next_finish());
  net.set_ceiling(f, kUnlimited, 1'000'000'000);
  net.update(1'000'000'000);
  CHECK(net.next_finish() == 1'080'000'000);
}

TEST_CASE("bad flows are refused", "[unit][sim]") {
  FlowNetwork net;
  const auto l = net.add_link(1 * kMbit);
  CHECK_THROWS_AS(net.start({l}, -1, 1, kUnlimited, 0), std::invalid_argument);
  CHECK_THROWS_AS(net.start({l}, 1, 0, kUnlimited, 0), std::invalid_argument);
  CHECK_THROWS_AS(net.start({l + 7}, 1, 1, kUnlimited, 0), std::invalid_argument);
  CHECK_THROWS_AS(net.add_link(-5), std::invalid_argument);
}

TEST_CASE("bundles that come and go on a shared link: the ones left share it max-min",
          "[unit][sim]") {
  // Eight paths (bundles) cross one shared link, each with its own access link; they finish
  // one by one, then half of them start again beside a path that crosses the shared link
  // twice. After every change the active flows must hold the max-min shares.
  FlowNetwork net;
  const auto shared = net.add_link(80 * kMbit);
  std::vector<FlowNetwork::LinkId> access;
  for (int i = 0; i < 8; ++i) access.push_back(net.add_link(1000 * kMbit));
  std::vector<FlowNetwork::FlowId> flows;
  Nanos now = 0;
  // Round 1: flows of 1, 2, ..., 8 MB: they finish one after another, smallest first.
  for (int i = 0; i < 8; ++i)
    flows.push_back(net.start({access[static_cast<std::size_t>(i)], shared}, (i + 1) * kMB, 1, kUnlimited, now));
  net.update(now);
  for (const auto f : flows) CHECK(net.rate_bps(f) == Approx(10 * kMbit));
  int finished = 0;
  while (auto t = net.next_finish()) {
    now = *t;
    finished += static_cast<int>(net.take_finished(now).size());
    net.update(now);
    const auto left = 8 - finished;
    for (std::size_t i = 0; i < flows.size(); ++i)
      if (net.rate_bps(flows[i]) > 0) CHECK(net.rate_bps(flows[i]) == Approx(80 * kMbit / left));
  }
  CHECK(finished == 8);
  CHECK(net.active_flows() == 0);
  // Round 2 on the same bundles, in reverse order of paths, plus one flow whose path crosses
  // the shared link twice (it counts twice there, as two flows of one connection would).
  std::vector<FlowNetwork::FlowId> again;
  for (int i = 7; i >= 0; i -= 2)
    again.push_back(net.start({access[static_cast<std::size_t>(i)], shared}, 1 * kMB, 1, kUnlimited, now));
  const auto twice = net.start({shared, access[0], shared}, 1 * kMB, 1, kUnlimited, now);
  net.update(now);
  for (const auto f : again) CHECK(net.rate_bps(f) == Approx(80 * kMbit / 6));
  CHECK(net.rate_bps(twice) == Approx(80 * kMbit / 6));
  const auto done = run_all(net, static_cast<std::size_t>(twice) + 1, now);
  for (const auto f : again) CHECK(done[f] > now);
  CHECK(done[twice] > now);
  CHECK(net.active_flows() == 0);
}

TEST_CASE("a released flow's id is handed out again, and nothing of the old flow reaches the new one",
          "[unit][sim]") {
  FlowNetwork net;
  const auto l = net.add_link(100 * kMbit);
  // The first flow moves to another bundle on the way (a ceiling change), so its first
  // bundle still holds a stale entry for its id when it ends.
  const auto a = net.start({l}, 1 * kMB, 1, kUnlimited, 0);
  net.update(0);
  net.set_ceiling(a, 40 * kMbit, 0);
  CHECK_THROWS_AS(net.release(a), std::invalid_argument);  // still active
  auto done = run_all(net, 1);
  CHECK(done[a] == 200'000'000);
  net.release(a);
  CHECK_THROWS_AS(net.release(a), std::invalid_argument);  // twice
  // The new flow gets the id back, in the old flow's first bundle (same path, no ceiling).
  const auto b = net.start({l}, 1 * kMB, 1, kUnlimited, 300'000'000);
  REQUIRE(b == a);
  const auto c = net.start({l}, 3 * kMB, 1, kUnlimited, 300'000'000);
  REQUIRE(c != a);
  net.update(300'000'000);
  CHECK(net.rate_bps(b) == Approx(50 * kMbit));
  done = run_all(net, 2, 300'000'000);
  CHECK(done[b] == 300'000'000 + 160'000'000);  // 1 MB at half the link
  CHECK(done[c] == 300'000'000 + 320'000'000);  // then the rest alone
  CHECK(net.bytes(b) == 1 * kMB);
}

TEST_CASE("a flow that follows another on its bundle at the same instant keeps the rates without a filling; "
          "one that ends beside it gives its share back",
          "[unit][sim]") {
  FlowNetwork net;
  const auto l = net.add_link(100 * kMbit);
  // Two bundles on the link (different ceilings, both above the link's rate).
  const auto a1 = net.start({l}, 1 * kMB, 1, kUnlimited, 0);
  const auto b1 = net.start({l}, 1 * kMB, 1, 1e12, 0);
  net.update(0);
  REQUIRE(net.next_finish() == 160'000'000);
  auto done = net.take_finished(160'000'000);
  REQUIRE(done == std::vector<FlowNetwork::FlowId>{a1, b1});
  // a1's successor starts as a1 and b1 end: a1's bundle has its weight back, b1's is empty,
  // so the link is the successor's alone.
  const auto fillings = net.stats().updates;
  const auto a2 = net.start({l}, 1 * kMB, 1, kUnlimited, 160'000'000);
  net.update(160'000'000);
  CHECK(net.stats().updates > fillings);
  CHECK(net.rate_bps(a2) == Approx(100 * kMbit));
  // Its successor, again at the same instant with the same weight: nothing to fill.
  REQUIRE(net.next_finish() == 240'000'000);
  REQUIRE(net.take_finished(240'000'000) == std::vector<FlowNetwork::FlowId>{a2});
  const auto before = net.stats();
  const auto a3 = net.start({l}, 2 * kMB, 1, kUnlimited, 240'000'000);
  net.update(240'000'000);
  CHECK(net.stats().updates == before.updates);
  CHECK(net.stats().unchanged == before.unchanged + 1);
  CHECK(net.rate_bps(a3) == Approx(100 * kMbit));
  CHECK(net.next_finish() == 400'000'000);
  // A change of ceiling on the same instant as a follower does fill.
  REQUIRE(net.take_finished(400'000'000) == std::vector<FlowNetwork::FlowId>{a3});
  const auto a4 = net.start({l}, 1 * kMB, 1, kUnlimited, 400'000'000);
  const auto b2 = net.start({l}, 1 * kMB, 1, kUnlimited, 400'000'000);
  net.set_ceiling(b2, 20 * kMbit, 400'000'000);
  net.update(400'000'000);
  CHECK(net.rate_bps(a4) == Approx(80 * kMbit));
  CHECK(net.rate_bps(b2) == Approx(20 * kMbit));
}

TEST_CASE("a bundle of its own: one flow at a time at the caller's ceiling, its bytes and ceiling changed on the way",
          "[unit][sim]") {
  FlowNetwork net;
  const auto l = net.add_link(100 * kMbit);
  const auto own = net.add_bundle({l});
  // 1 MB at most 40 Mbit/s beside a 1 MB flow without a ceiling: 40 and 60 Mbit/s.
  const auto a = net.start_in(own, 1 * kMB, 1, 40 * kMbit, 0);
  const auto b = net.start({l}, 1 * kMB, 1, kUnlimited, 0);
  net.update(0);
  CHECK(net.rate_bps(a) == Approx(40 * kMbit));
  CHECK(net.rate_bps(b) == Approx(60 * kMbit));
  // Another ceiling while the bundle has a flow: refused.
  CHECK_THROWS_AS(net.start_in(own, 1 * kMB, 1, 10 * kMbit, 0), std::invalid_argument);
  // At 100 ms (a has moved 0.5 MB): a is to move 0.6 MB in all, and its bundle's ceiling
  // goes to 20 Mbit/s: 0.1 MB left at 20 Mbit/s, 40 ms.
  net.set_bytes(a, 0.6 * kMB, 100'000'000);
  net.set_bundle_ceiling(own, 20 * kMbit, 100'000'000);
  net.update(100'000'000);
  CHECK(net.rate_bps(a) == Approx(20 * kMbit));
  CHECK(net.rate_bps(b) == Approx(80 * kMbit));
  auto done = run_all(net, 2, 100'000'000);
  CHECK(done[a] == 140'000'000);
  CHECK(net.bytes(a) == Approx(0.6 * kMB));
  // b: 0.75 MB by 100 ms, 0.4 MB more by 140 ms: all done by then? 0.75 + 0.4 > 1, so at
  // 100 ms + 0.25 MB / 80 Mbit/s = 125 ms.
  CHECK(done[b] == 125'000'000);
  // Bytes below what the flow moved already: it is done now.
  const auto c = net.start_in(own, 1 * kMB, 1, kUnlimited, 200'000'000);
  net.update(200'000'000);
  net.set_bytes(c, 0, 240'000'000);  // it moved 0.5 MB by then
  net.update(240'000'000);
  REQUIRE(net.next_finish() == 240'000'000);
  CHECK(net.take_finished(240'000'000) == std::vector<FlowNetwork::FlowId>{c});
  CHECK(net.bytes(c) == Approx(0.5 * kMB));
}

TEST_CASE("a link's new rate reaches a flow that starts on a bundle emptied at that instant", "[unit][sim]") {
  // The bundle's last filling saw weight 1; its flow ends, the link's rate halves and a
  // flow of the same weight starts on it, all at one instant: it must get the new rate.
  FlowNetwork net;
  const auto l = net.add_link(100 * kMbit);
  net.start({l}, 1 * kMB, 1, kUnlimited, 0);
  net.update(0);
  REQUIRE(net.next_finish() == 80'000'000);
  net.take_finished(80'000'000);
  net.set_rate(l, 50 * kMbit, 80'000'000);
  const auto b = net.start({l}, 1 * kMB, 1, kUnlimited, 80'000'000);
  net.update(80'000'000);
  CHECK(net.rate_bps(b) == Approx(50 * kMbit));
  CHECK(net.next_finish() == 80'000'000 + 160'000'000);
}
