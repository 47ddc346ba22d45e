// The arbiter's policies on a virtual clock, driven by the fluid reference network.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

#include "wanlab/arbiter/arbiter.hpp"
#include "wanlab/arbiter/fluid.hpp"

using namespace wanlab::arbiter;
using wanlab::Nanos;
using wanlab::kNever;

namespace {

constexpr Nanos kMs = 1'000'000;
constexpr Nanos kSec = 1'000'000'000;
const LinkId kLink{0, 1};
constexpr double kRate = 1e9;            // 1 Gbit/s
constexpr std::uint64_t kBytes = 12'500'000;  // 100 ms at 1 Gbit/s
constexpr Nanos kTransfer = 100 * kMs;

Arbiter make(const std::string& policy, Nanos rtt = 0, ArbiterOptions o = {}) {
  o.drained_fraction = 1.0;  // the fluid network counts bytes exactly
  o.handover_lead = 0;
  Arbiter a(make_policy(policy), o);
  a.add_link(kLink, kRate, rtt);
  return a;
}

// D pipelines, each with one transfer of kBytes ready at 0 on the link.
std::vector<FluidTransfer> pipelines(int d, Nanos ready = 0) {
  std::vector<FluidTransfer> out;
  for (int p = 0; p < d; ++p) {
    FluidTransfer t;
    t.spec.link = kLink;
    t.spec.bytes = kBytes;
    t.spec.pipeline = p;
    t.ready = ready;
    out.push_back(t);
  }
  return out;
}

// No two windows of the link overlap in time.
void require_disjoint(const std::vector<WindowRecord>& windows) {
  auto w = windows;
  std::sort(w.begin(), w.end(), [](const auto& a, const auto& b) { return a.start < b.start; });
  for (std::size_t i = 1; i < w.size(); ++i) {
    INFO("window " << i << " starts at " << w[i].start << ", the previous ends at " << w[i - 1].end);
    REQUIRE(w[i].start >= w[i - 1].end);
  }
}

}  // namespace

TEST_CASE("policies are registered by name and unknown names are refused with the list", "[arbiter]") {
  REQUIRE(policy_names() == std::vector<std::string>{"fair", "atlas", "priority"});
  for (const auto& n : policy_names()) REQUIRE(make_policy(n)->name() == n);
  REQUIRE_FALSE(make_policy("fair")->exclusive());
  REQUIRE(make_policy("atlas")->exclusive());
  try {
    (void)make_policy("cassini");
    FAIL("accepted an unknown policy");
  } catch (const std::invalid_argument& e) {
    REQUIRE(std::string(e.what()) == "unknown policy \"cassini\" (known: fair, atlas, priority)");
  }
}

TEST_CASE("fair: D transfers of S bytes on rate B all complete at D*S/B", "[arbiter]") {
  for (int d : {1, 2, 4, 8}) {
    auto arb = make("fair");
    const auto r = run_fluid(arb, pipelines(d), 0);
    for (auto t : r.delivered) REQUIRE(std::abs(t - d * kTransfer) <= 10);
  }
}

TEST_CASE("atlas: the j-th of D transfers completes at (j+1)*S/B, in pipeline order", "[arbiter]") {
  for (int d : {1, 2, 4, 8}) {
    auto arb = make("atlas");
    const auto r = run_fluid(arb, pipelines(d), 0);
    for (int j = 0; j < d; ++j) REQUIRE(std::abs(r.delivered[static_cast<std::size_t>(j)] - (j + 1) * kTransfer) <= 10);
    REQUIRE(arb.windows().size() == static_cast<std::size_t>(d));
    require_disjoint(arb.windows());
    // Mean completion: (D+1)/2 * S/B instead of D * S/B, the same last one.
  }
}

TEST_CASE("atlas: windows are planned as bytes at the link rate plus an RTT of slack", "[arbiter]") {
  auto arb = make("atlas", 40 * kMs);
  const auto r = run_fluid(arb, pipelines(3), 20 * kMs);
  const auto& w = arb.windows();
  REQUIRE(w.size() == 3);
  for (const auto& x : w) REQUIRE(x.planned_end - x.start == kTransfer + 40 * kMs);
  // The link passes to the next transfer when the bytes are on it, not when they arrive.
  REQUIRE(w[1].start == w[0].end);
  REQUIRE(w[0].end == kTransfer);
  REQUIRE(r.delivered[2] == 3 * kTransfer + 20 * kMs);
  require_disjoint(w);
}

TEST_CASE("atlas orders by when the receiver needs the data, then by pipeline", "[arbiter]") {
  auto arb = make("atlas");
  auto ts = pipelines(4);
  ts[0].spec.needed_at = 30;
  ts[1].spec.needed_at = 10;
  ts[2].spec.needed_at = 20;
  ts[3].spec.needed_at = 10;
  const auto r = run_fluid(arb, ts, 0);
  // order 1, 3 (same need, higher pipeline), 2, 0
  REQUIRE(r.delivered[1] == 1 * kTransfer);
  REQUIRE(r.delivered[3] == 2 * kTransfer);
  REQUIRE(r.delivered[2] == 3 * kTransfer);
  REQUIRE(r.delivered[0] == 4 * kTransfer);
}

TEST_CASE("priority: earlier stages first, then lower pipelines, whatever the need", "[arbiter]") {
  auto arb = make("priority");
  auto ts = pipelines(3);
  ts[0].spec.src_stage = 1;
  ts[1].spec.src_stage = 0;
  ts[1].spec.pipeline = 2;
  ts[2].spec.src_stage = 0;
  ts[2].spec.pipeline = 0;
  ts[2].spec.needed_at = 1'000;
  const auto r = run_fluid(arb, ts, 0);
  REQUIRE(r.delivered[2] == kTransfer);
  REQUIRE(r.delivered[1] == 2 * kTransfer);
  REQUIRE(r.delivered[0] == 3 * kTransfer);
  require_disjoint(arb.windows());
}

TEST_CASE("windows never overlap on a link under staggered arrivals and mixed sizes", "[arbiter]") {
  for (const char* policy : {"atlas", "priority"}) {
    auto arb = make(policy, 0);
    std::vector<FluidTransfer> ts;
    for (int i = 0; i < 40; ++i) {
      FluidTransfer t;
      t.spec.link = kLink;
      t.spec.bytes = 100'000 + static_cast<std::uint64_t>(i % 7) * 900'000;
      t.spec.pipeline = i % 4;
      t.spec.needed_at = (i * 37) % 11;
      t.ready = (i * 13 % 17) * kMs;
      ts.push_back(t);
    }
    const auto r = run_fluid(arb, ts, 3 * kMs);
    REQUIRE(std::all_of(r.delivered.begin(), r.delivered.end(), [](Nanos d) { return d > 0; }));
    REQUIRE(arb.windows().size() == ts.size());
    require_disjoint(arb.windows());
    REQUIRE(arb.active() == 0);
  }
}

TEST_CASE("a capacity change from a trace re-plans the open window", "[arbiter]") {
  auto arb = make("atlas");
  // Halve the rate 50 ms into the first window: its second half takes 100 ms instead of 50.
  const auto r = run_fluid(arb, pipelines(2), 0, {{50 * kMs, kLink, kRate / 2}});
  REQUIRE(std::abs(r.delivered[0] - 150 * kMs) <= 10);
  REQUIRE(std::abs(r.delivered[1] - 350 * kMs) <= 10);
  // The second window was planned at the new rate.
  REQUIRE(arb.windows()[1].planned_end - arb.windows()[1].start == 200 * kMs);

  // Directly: the open window's planned end follows the capacity.
  auto a = make("atlas");
  TransferSpec s;
  s.link = kLink;
  s.bytes = kBytes;
  const auto id = a.request(s, 0);
  a.advance(0);
  REQUIRE(a.transfer(id).planned_end == kTransfer);
  a.progress(id, kBytes / 2, 50 * kMs);
  a.set_capacity(kLink, kRate * 2, 50 * kMs);
  REQUIRE(a.transfer(id).planned_end == 50 * kMs + kTransfer / 4);
}

TEST_CASE("an outage holds the window without revoking it, and it goes on after", "[arbiter]") {
  ArbiterOptions o;
  o.idle_timeout = 100 * kMs;
  auto arb = make("atlas", 0, o);
  const auto r = run_fluid(arb, pipelines(2), 0, {{50 * kMs, kLink, 0}, {1 * kSec, kLink, kRate}});
  REQUIRE(std::abs(r.delivered[0] - (kSec + 50 * kMs)) <= 10);
  REQUIRE(std::abs(r.delivered[1] - (kSec + 150 * kMs)) <= 10);
  REQUIRE(std::none_of(arb.windows().begin(), arb.windows().end(), [](const auto& w) { return w.revoked; }));
}

TEST_CASE("a flow that never sends loses its window after the timeout; the next gets the link", "[arbiter]") {
  ArbiterOptions o;
  o.idle_timeout = 200 * kMs;
  auto arb = make("atlas", 0, o);
  auto ts = pipelines(3);
  ts[0].silent_until = kNever;
  const auto r = run_fluid(arb, ts, 0, {}, 10 * kSec);
  REQUIRE(r.delivered[0] == -1);
  REQUIRE(std::abs(r.delivered[1] - (200 * kMs + kTransfer)) <= 10);
  REQUIRE(std::abs(r.delivered[2] - (200 * kMs + 2 * kTransfer)) <= 10);
  const auto& w = arb.windows();
  REQUIRE(w.front().revoked);
  REQUIRE(w.front().end == 200 * kMs);
  require_disjoint(w);
  // The silent one got the link back whenever it was free, and lost it again each time.
  REQUIRE(arb.transfer(r.ids[0]).revocations >= 2);
}

TEST_CASE("a late starter that then sends finishes in a later window", "[arbiter]") {
  ArbiterOptions o;
  o.idle_timeout = 50 * kMs;
  auto arb = make("atlas", 0, o);
  auto ts = pipelines(2);
  ts[0].silent_until = 120 * kMs;
  const auto r = run_fluid(arb, ts, 0);
  // Revoked at 50 ms; pipeline 1 owns 50..150 ms; pipeline 0 gets it back at 150 ms.
  REQUIRE(r.delivered[1] == 150 * kMs);
  REQUIRE(r.delivered[0] == 250 * kMs);
}

TEST_CASE("events tell the caller what to switch", "[arbiter]") {
  auto arb = make("atlas");
  TransferSpec s;
  s.link = kLink;
  s.bytes = 1000;
  const auto a = arb.request(s, 0);
  const auto b = arb.request(s, 0);
  REQUIRE(arb.take_events().empty());
  arb.advance(0);
  auto ev = arb.take_events();
  REQUIRE(ev.size() == 1);
  REQUIRE(ev[0].kind == Event::Kind::grant);
  REQUIRE(ev[0].id == a);
  arb.progress(a, 1000, 10'000);  // 1000 B into the link over 10 us: sent (8 us at 1 Gbit/s)
  arb.complete(a, 20'000);
  ev = arb.take_events();
  REQUIRE(ev.size() == 3);
  REQUIRE(ev[0].kind == Event::Kind::close);
  REQUIRE(ev[1].kind == Event::Kind::grant);
  REQUIRE(ev[1].id == b);
  REQUIRE(ev[2].kind == Event::Kind::done);
  REQUIRE_THROWS_AS(arb.request({LinkId{5, 6}, 10}, 0), std::invalid_argument);
  REQUIRE_THROWS_AS(arb.request({kLink, 0}, 0), std::invalid_argument);
  REQUIRE_THROWS_AS(arb.progress(999, 1, 0), std::invalid_argument);
}

TEST_CASE("transfers shorter than an RTT share the link side by side, in order, while their shares fit",
          "[arbiter]") {
  // 1 MB at 1 Gbit/s is 8 ms, under the 40 ms RTT: it can use at most 1 MB per RTT,
  // 200 Mbit/s, so five fit the link at once.
  auto arb = make("atlas", 40 * kMs);
  std::vector<FluidTransfer> ts;
  for (int p = 0; p < 12; ++p) {
    FluidTransfer t;
    t.spec.link = kLink;
    t.spec.bytes = 1'000'000;
    t.spec.pipeline = p;
    ts.push_back(t);
  }
  // A large one behind them gets the link alone.
  FluidTransfer big;
  big.spec.link = kLink;
  big.spec.bytes = kBytes;
  big.spec.pipeline = 20;
  ts.push_back(big);
  (void)run_fluid(arb, ts, 20 * kMs);
  const auto& w = arb.windows();
  REQUIRE(w.size() == ts.size());
  // At every window start, the windows open then have shares that fit the link.
  for (const auto& x : w) {
    double share = 0;
    int open = 0;
    for (const auto& y : w) {
      if (y.start <= x.start && y.end > x.start) {
        ++open;
        share += std::min(kRate, static_cast<double>(y.spec.bytes) * 8e9 / static_cast<double>(40 * kMs));
      }
    }
    REQUIRE(share <= kRate * (1 + 1e-9));
    REQUIRE(open <= 5);
    if (x.spec.bytes == kBytes) REQUIRE(open == 1);
  }
  // Order kept: pipelines start in order.
  for (std::size_t i = 1; i < 12; ++i) REQUIRE(arb.transfer(i + 1).granted >= arb.transfer(i).granted);
  // Strictly one at a time when packing is off.
  ArbiterOptions o;
  o.pack_small_transfers = false;
  auto strict = make("atlas", 40 * kMs, o);
  (void)run_fluid(strict, ts, 20 * kMs);
  require_disjoint(strict.windows());

  // Two of 0.9 RTT (36 ms, 900 Mbit/s each) do not fit together: they would put 1.8x the
  // link's rate into its queue. One at a time.
  auto near = make("atlas", 40 * kMs);
  for (auto& t : ts) t.spec.bytes = 4'500'000;
  ts.resize(4);
  (void)run_fluid(near, ts, 20 * kMs);
  REQUIRE(near.windows().size() == 4);
  require_disjoint(near.windows());
}

TEST_CASE("a window hands the link over when the link has sent its bytes, not when they entered its queue",
          "[arbiter]") {
  // 1 Gbit/s: 1.25 MB is 10 ms on the link. A sender puts all of it into the link's queue
  // within 1 ms (held packets let in at once): the next window must wait until the link
  // has sent it, less the handover lead (2 ms).
  ArbiterOptions o;
  o.drained_fraction = 1.0;
  o.handover_lead = 2 * kMs;
  Arbiter arb(make_policy("atlas"), o);
  arb.add_link(kLink, kRate, 5 * kMs);  // longer than an RTT: one window at a time
  TransferSpec s;
  s.link = kLink;
  s.bytes = 1'250'000;
  const auto a = arb.request(s, 0);
  const auto b = arb.request(s, 0);
  arb.advance(0);
  REQUIRE(arb.owners(kLink) == std::vector<TransferId>{a});
  arb.progress(a, 1'250'000, 1 * kMs);
  REQUIRE(arb.queued_bytes(kLink, 1 * kMs) == Approx(1'250'000 - 125'000));
  REQUIRE(arb.owners(kLink) == std::vector<TransferId>{a});
  // Sent by 10 ms; handed over 2 ms before: at 8 ms, which next_deadline() names.
  REQUIRE(arb.next_deadline().value() == 8 * kMs);
  arb.advance(7 * kMs);
  REQUIRE(arb.owners(kLink) == std::vector<TransferId>{a});
  arb.advance(8 * kMs);
  REQUIRE(arb.owners(kLink) == std::vector<TransferId>{b});
  REQUIRE(arb.transfer(a).drained == 8 * kMs);
  REQUIRE(arb.queued_bytes(kLink, 10 * kMs) == Approx(0).margin(1));

  // A sender at the link rate (reports every 5 ms, 625 kB each) leaves no queue: the
  // window ends at the report that reaches the target, as before.
  Arbiter paced(make_policy("atlas"), o);
  paced.add_link(kLink, kRate, 5 * kMs);
  const auto c = paced.request(s, 0);
  (void)paced.request(s, 0);
  paced.advance(0);
  paced.progress(c, 625'000, 5 * kMs);
  REQUIRE(paced.queued_bytes(kLink, 5 * kMs) == Approx(0).margin(1));
  REQUIRE(paced.transfer(c).state == State::granted);
  paced.progress(c, 1'250'000, 10 * kMs);
  REQUIRE(paced.transfer(c).state == State::drained);
  REQUIRE(paced.transfer(c).drained == 10 * kMs);
}

TEST_CASE("window-limited transfers share the link side by side until it is full", "[arbiter]") {
  // 1 Gbit/s, 40 ms RTT, windows of 1 MB: one connection moves at most 200 Mbit/s. Large
  // transfers (100 ms at the link rate, above one RTT).
  ArbiterOptions o;
  o.tcp_window_bytes = 1'000'000;
  auto arb = make("atlas", 40 * kMs, o);
  TransferSpec s;
  s.link = kLink;
  s.bytes = kBytes;
  s.connections = 2;  // 400 Mbit/s each
  std::vector<TransferId> ids;
  for (int p = 0; p < 4; ++p) {
    s.pipeline = p;
    ids.push_back(arb.request(s, 0));
  }
  arb.advance(0);
  // In order until the link is full: 400 + 400 leave 200 unused, so the third starts too
  // (the link is never left partly idle while transfers wait); the fourth waits.
  REQUIRE(arb.owners(kLink) == std::vector<TransferId>{ids[0], ids[1], ids[2]});
  REQUIRE(arb.transfer(ids[3]).state == State::pending);
  arb.complete(ids[0], 50 * kMs);
  REQUIRE(arb.transfer(ids[3]).state == State::granted);

  // Enough connections to fill the link: one at a time, as without windows.
  auto wide = make("atlas", 40 * kMs, o);
  s.connections = 5;  // 1 Gbit/s
  const auto a = wide.request(s, 0);
  const auto b = wide.request(s, 0);
  wide.advance(0);
  REQUIRE(wide.owners(kLink) == std::vector<TransferId>{a});
  // A transfer that says nothing of its connections is not window-limited.
  auto plain = make("atlas", 40 * kMs, o);
  s.connections = 0;
  const auto c = plain.request(s, 0);
  (void)plain.request(s, 0);
  plain.advance(0);
  REQUIRE(plain.owners(kLink) == std::vector<TransferId>{c});
  (void)b;
}

TEST_CASE("the next in line is the one the policy would grant next", "[arbiter]") {
  auto arb = make("atlas");
  TransferSpec s;
  s.link = kLink;
  s.bytes = kBytes;
  REQUIRE_FALSE(arb.next_in_line(kLink));
  const auto a = arb.request(s, 0);
  s.needed_at = 5;
  const auto b = arb.request(s, 0);
  s.needed_at = 1;
  const auto c = arb.request(s, 0);
  arb.advance(0);
  REQUIRE(arb.transfer(a).state == State::granted);
  REQUIRE(arb.next_in_line(kLink) == c);
  arb.complete(a, 10);
  REQUIRE(arb.next_in_line(kLink) == b);
}

TEST_CASE("the next window opens when what is left of the current one would take the handover lead",
          "[arbiter]") {
  ArbiterOptions o;
  o.handover_lead = 10 * kMs;
  Arbiter arb(make_policy("atlas"), o);
  arb.add_link(kLink, kRate, 0);
  const auto r = run_fluid(arb, pipelines(2), 0, {}, 3'600'000'000'000, kMs);
  // Pipeline 1 starts 10 ms before pipeline 0 is through (at the first 1 ms sample that
  // shows it), then the two share the link for those 10 ms (in the lab, the link's FIFO
  // queue serves them in order); the link never idles.
  REQUIRE(std::abs(arb.transfer(r.ids[1]).granted - (kTransfer - 10 * kMs)) <= kMs);
  REQUIRE(std::abs(r.delivered[1] - 2 * kTransfer) <= 10);
}

TEST_CASE("a window that stalls after some progress passes the link on without revoking", "[arbiter]") {
  ArbiterOptions o;
  o.stall_after = 30 * kMs;
  o.idle_timeout = 10 * kSec;
  Arbiter arb(make_policy("atlas"), o);
  arb.add_link(kLink, kRate, 10 * kMs);
  TransferSpec s;
  s.link = kLink;
  s.bytes = kBytes;
  const auto a = arb.request(s, 0);
  const auto b = arb.request(s, 0);
  arb.advance(0);
  arb.progress(a, kBytes / 4, 5 * kMs);
  arb.advance(30 * kMs);
  REQUIRE(arb.transfer(a).state == State::granted);  // 25 ms without progress: not yet
  REQUIRE(arb.next_deadline() == 35 * kMs);
  arb.advance(35 * kMs);
  REQUIRE(arb.transfer(a).state == State::drained);  // closed, not revoked: it may finish
  REQUIRE(arb.transfer(b).state == State::granted);
  REQUIRE_FALSE(arb.windows().front().revoked);
}

TEST_CASE("atlas grants many waiting transfers, asked for in any order, in its order; a revoked one last",
          "[arbiter]") {
  ArbiterOptions o;
  o.pack_small_transfers = false;
  auto arb = make("atlas", 0, o);
  // 200 transfers asked for in a scrambled order: needs from a permutation, two pipelines
  // per need (ties go to the lower pipeline).
  std::vector<TransferId> ids;
  std::map<TransferId, std::pair<Nanos, int>> key;
  for (int i = 0; i < 200; ++i) {
    TransferSpec s;
    s.link = kLink;
    s.bytes = kBytes;
    s.needed_at = (i * 37) % 100;
    s.pipeline = 199 - i;
    const auto id = arb.request(s, 0);
    ids.push_back(id);
    key[id] = {s.needed_at, s.pipeline};
  }
  auto expected = ids;
  std::sort(expected.begin(), expected.end(), [&](TransferId a, TransferId b) { return key[a] < key[b]; });
  arb.advance(0);
  // The first owner never sends: it loses the window at the idle timeout and goes behind
  // every other one.
  REQUIRE(arb.owners(kLink) == std::vector<TransferId>{expected.front()});
  Nanos now = o.idle_timeout;
  arb.advance(now);
  REQUIRE(arb.transfer(expected.front()).state == State::revoked_pending);
  std::vector<TransferId> granted;
  for (std::size_t k = 0; k < ids.size(); ++k) {
    const auto owners = arb.owners(kLink);
    REQUIRE(owners.size() == 1);
    granted.push_back(owners.front());
    REQUIRE(arb.next_deadline().has_value());
    now += kTransfer;
    arb.progress(owners.front(), kBytes, now);
    arb.complete(owners.front(), now);
    arb.advance(now);
  }
  std::rotate(expected.begin(), expected.begin() + 1, expected.end());
  REQUIRE(granted == expected);
  REQUIRE(!arb.next_deadline().has_value());
}

TEST_CASE("the next deadline follows every change: a grant, progress, a capacity change", "[arbiter]") {
  ArbiterOptions o;
  o.idle_timeout = 200 * kMs;
  o.stall_after = 50 * kMs;
  auto arb = make("atlas", 0, o);
  REQUIRE(!arb.next_deadline().has_value());
  TransferSpec s;
  s.link = kLink;
  s.bytes = kBytes;
  const auto id = arb.request(s, 0);
  REQUIRE(!arb.next_deadline().has_value());  // asked, not yet granted
  arb.advance(0);
  REQUIRE(arb.next_deadline() == 100 * kMs);  // the planned end, before the idle timeout
  arb.progress(id, kBytes / 4, 10 * kMs);
  REQUIRE(arb.next_deadline() == 60 * kMs);  // stalled if nothing comes for 50 ms
  arb.progress(id, kBytes / 2, 40 * kMs);
  REQUIRE(arb.next_deadline() == 90 * kMs);
  arb.set_capacity(kLink, 0, 45 * kMs);      // an outage: no timeouts, no planned end
  REQUIRE(!arb.next_deadline().has_value());
  arb.set_capacity(kLink, kRate, 50 * kMs);  // back: the rest re-planned from now
  REQUIRE(arb.next_deadline() == 100 * kMs);
}
