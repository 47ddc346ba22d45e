// Flow gating in the userspace engine, pure parts: reading a frame's flow key, classifying
// it against declared flows (addresses, source-port masks, any-destination matches), and
// the gates (order kept across close and open, overflow drops, removal releases).
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "wanlab/common/flows.hpp"
#include "wanlab/shaping/flow_gate.hpp"

using namespace wanlab;
using namespace wanlab::shaping;

namespace {

constexpr std::uint32_t ip(int a, int b, int c, int d) {
  return static_cast<std::uint32_t>(a) << 24 | static_cast<std::uint32_t>(b) << 16 | static_cast<std::uint32_t>(c) << 8 |
         static_cast<std::uint32_t>(d);
}
const std::uint32_t kA = ip(198, 18, 0, 2), kA2 = ip(198, 18, 0, 3), kB = ip(198, 18, 4, 2), kC = ip(198, 18, 8, 2);

// An Ethernet + IPv4 frame; `options` bytes of IP options; 64 bytes of payload after the
// source and destination ports.
std::vector<std::uint8_t> frame(std::uint32_t s, std::uint32_t d, std::uint16_t sport, std::uint8_t proto = 6,
                                std::size_t options = 0, std::uint16_t frag = 0) {
  const std::size_t ihl = 20 + options;
  std::vector<std::uint8_t> f(14 + ihl + 4 + 64, 0);
  f[12] = 0x08;
  f[13] = 0x00;
  std::uint8_t* h = f.data() + 14;
  h[0] = static_cast<std::uint8_t>(0x40 | ihl / 4);
  const auto total = static_cast<std::uint16_t>(f.size() - 14);
  h[2] = static_cast<std::uint8_t>(total >> 8);
  h[3] = static_cast<std::uint8_t>(total & 0xff);
  h[6] = static_cast<std::uint8_t>(frag >> 8);
  h[7] = static_cast<std::uint8_t>(frag & 0xff);
  h[8] = 64;
  h[9] = proto;
  for (int i = 0; i < 4; ++i) {
    h[12 + i] = static_cast<std::uint8_t>(s >> (24 - 8 * i));
    h[16 + i] = static_cast<std::uint8_t>(d >> (24 - 8 * i));
  }
  for (std::size_t i = 20; i < ihl; ++i) h[i] = 1;  // NOP options
  h[ihl] = static_cast<std::uint8_t>(sport >> 8);
  h[ihl + 1] = static_cast<std::uint8_t>(sport & 0xff);
  h[ihl + 3] = 80;
  return f;
}

FlowMatch slot_match(std::uint32_t s, std::uint32_t d, int slot) {
  return {s, d, flows::slot_port(slot), flows::kFlowPortMask};
}

}  // namespace

TEST_CASE("a frame's flow key: IPv4 TCP and UDP, options skipped, fragments and others not", "[unit][gate]") {
  auto f = frame(kA, kB, flows::source_port(1, 5));
  auto k = frame_flow_key(f.data(), static_cast<std::uint32_t>(f.size()));
  REQUIRE(k);
  CHECK(k->saddr == kA);
  CHECK(k->daddr == kB);
  CHECK(k->sport == 16384 + 64 + 5);

  f = frame(kA, kB, 40000, 17, 8);  // UDP, 8 bytes of IP options
  k = frame_flow_key(f.data(), static_cast<std::uint32_t>(f.size()));
  REQUIRE(k);
  CHECK(k->sport == 40000);

  f = frame(kA, kB, 40000, 6, 0, 0x2000);  // more fragments, offset 0: the first, with ports
  CHECK(frame_flow_key(f.data(), static_cast<std::uint32_t>(f.size())));
  f = frame(kA, kB, 40000, 6, 0, 0x0010);  // offset 128 bytes: no ports
  CHECK_FALSE(frame_flow_key(f.data(), static_cast<std::uint32_t>(f.size())));
  f = frame(kA, kB, 40000, 1);  // ICMP
  CHECK_FALSE(frame_flow_key(f.data(), static_cast<std::uint32_t>(f.size())));
  f = frame(kA, kB, 40000);
  f[13] = 0x06;  // ARP
  CHECK_FALSE(frame_flow_key(f.data(), static_cast<std::uint32_t>(f.size())));
  f = frame(kA, kB, 40000, 6, 40);  // options reach past the frame's end
  CHECK_FALSE(frame_flow_key(f.data(), 14 + 60));
  CHECK_FALSE(frame_flow_key(f.data(), 20));
}

TEST_CASE("classification by source, destination and source-port mask", "[unit][gate]") {
  const std::vector<GatedFlow> declared{
      {7, {slot_match(kA, kB, 0)}},
      {3, {slot_match(kA, kB, 1), slot_match(kA2, kB, 1)}},
      {9, {slot_match(kA, 0, 2)}},               // any destination
      {4, {{kC, kB, 5201, 0xffff}}},             // an exact port
      {5, {slot_match(kA, kB, 0)}},              // the same as flow 7, declared later
      {6, {{kC, kB, 0x0001, 0xfff0}}},           // a port with bits outside its mask: never
  };
  const FlowClassifier c(declared);
  CHECK(c.classify({kA, kB, flows::source_port(0, 0)}) == 0);
  CHECK(c.classify({kA, kB, flows::source_port(0, 63)}) == 0);
  CHECK(c.classify({kA, kB, flows::source_port(1, 2)}) == 1);
  CHECK(c.classify({kA2, kB, flows::source_port(1, 0)}) == 1);
  CHECK(c.classify({kA, kB, flows::source_port(2, 4)}) == 2);
  CHECK(c.classify({kA, kC, flows::source_port(2, 4)}) == 2);
  CHECK(c.classify({kC, kB, 5201}) == 3);
  // Not matching: another source, destination, slot or port; the reverse direction.
  CHECK(c.classify({kA2, kB, flows::source_port(0, 0)}) == FlowClassifier::kNone);
  CHECK(c.classify({kA, kC, flows::source_port(0, 0)}) == FlowClassifier::kNone);
  CHECK(c.classify({kA, kB, flows::source_port(3, 0)}) == FlowClassifier::kNone);
  CHECK(c.classify({kA, kB, 40000}) == FlowClassifier::kNone);
  CHECK(c.classify({kC, kB, 5202}) == FlowClassifier::kNone);
  CHECK(c.classify({kB, kA, flows::source_port(0, 0)}) == FlowClassifier::kNone);
  CHECK(c.classify({kC, kB, 0x0001}) == FlowClassifier::kNone);
  CHECK(c.classify({kC, kB, 0x0000}) == FlowClassifier::kNone);
  CHECK(FlowClassifier{}.classify({kA, kB, 16384}) == FlowClassifier::kNone);

  // A specific destination and an any-destination match for the same traffic: the flow
  // declared first wins either way round.
  const FlowClassifier wild_first({{1, {slot_match(kA, 0, 0)}}, {2, {slot_match(kA, kB, 0)}}});
  CHECK(wild_first.classify({kA, kB, 16384}) == 0);
  const FlowClassifier exact_first({{1, {slot_match(kA, kB, 0)}}, {2, {slot_match(kA, 0, 0)}}});
  CHECK(exact_first.classify({kA, kB, 16384}) == 0);
  CHECK(exact_first.classify({kA, kC, 16384}) == 1);

  // Many flows (one per slot and destination) fill the tables: each still found.
  std::vector<GatedFlow> many;
  for (int s = 0; s < 200; ++s)
    for (std::uint32_t d : {kB, kC}) many.push_back({static_cast<int>(many.size()), {slot_match(kA, d, s)}});
  const FlowClassifier big(many);
  for (int s = 0; s < 200; ++s) {
    CHECK(big.classify({kA, kB, flows::source_port(s, 7)}) == 2 * s);
    CHECK(big.classify({kA, kC, flows::source_port(s, 7)}) == 2 * s + 1);
  }
  CHECK(big.classify({kA2, kB, flows::source_port(0, 7)}) == FlowClassifier::kNone);
}

TEST_CASE("a closed gate holds its flow's packets in order and hands them back when it opens", "[unit][gate]") {
  FlowGates g({{10, {slot_match(kA, kB, 0)}}, {11, {slot_match(kA, kB, 1)}}}, 4);
  REQUIRE(g.size() == 2);
  CHECK(g.index_of(11) == 1);
  CHECK(g.index_of(12) == FlowClassifier::kNone);
  auto f0 = frame(kA, kB, flows::source_port(0, 0));
  CHECK(g.classify_frame(f0.data(), static_cast<std::uint32_t>(f0.size())) == 0);

  std::vector<std::uint32_t> out;
  auto take = [&](std::uint32_t h, std::uint32_t) {
    out.push_back(h);
    return true;
  };
  std::uint32_t dropped = 0;
  CHECK(g.admit(0, 1, 100, dropped) == FlowGates::Verdict::held);
  CHECK(g.admit(0, 2, 100, dropped) == FlowGates::Verdict::held);
  CHECK(g.admit(1, 50, 100, dropped) == FlowGates::Verdict::held);
  CHECK(g.held_packets() == 3);
  g.set_open(0, true, 1000);
  g.feed(take, 1010);
  CHECK(out == std::vector<std::uint32_t>{1, 2});
  {
    std::vector<FlowCounters> c;
    g.counters(c);
    CHECK(c[0].admitted_bytes == 200);  // held packets count as they enter the link
    CHECK(c[0].first_admitted_ns == 1010);
    CHECK(c[0].last_admitted_ns == 1010);
    CHECK(c[1].admitted_bytes == 0);
  }
  CHECK(g.admit(0, 3, 100, dropped) == FlowGates::Verdict::pass);  // open: straight on, behind them
  g.set_open(0, false, 2000);
  g.feed(take, 0);
  CHECK(g.admit(0, 4, 100, dropped) == FlowGates::Verdict::held);
  g.set_open(0, false, 2100);
  g.feed(take, 0);  // closing a closed gate changes nothing
  CHECK(g.admit(0, 5, 100, dropped) == FlowGates::Verdict::held);
  out.clear();
  g.set_open(0, true, 3000);
  g.feed(take, 0);
  CHECK(out == std::vector<std::uint32_t>{4, 5});
  out.clear();
  g.set_open(0, true, 3500);
  g.feed(take, 0);  // opening an open gate neither releases nor restamps
  CHECK(out.empty());

  std::vector<FlowCounters> c;
  g.counters(c);
  REQUIRE(c.size() == 2);
  CHECK(c[0].id == 10);
  CHECK(c[0].open);
  CHECK(c[0].opened_ns == 3000);
  CHECK(!c[0].first_out_ns);
  CHECK(c[0].held_packets == 0);
  CHECK(c[1].id == 11);
  CHECK_FALSE(c[1].open);
  CHECK(!c[1].opened_ns);
  CHECK(c[1].held_packets == 1);

  // Sent packets: counted with their times; the first since the gate opened is kept.
  g.sent(0, 1500, 3100);
  g.sent(0, 1000, 3200);
  g.counters(c);
  CHECK(c[0].packets == 2);
  CHECK(c[0].bytes == 2500);
  CHECK(c[0].first_out_ns == 3100);
  CHECK(c[0].last_out_ns == 3200);
  g.set_open(0, false, 4000);
  g.feed(take, 0);
  g.set_open(0, true, 5000);
  g.feed(take, 0);
  g.counters(c);
  CHECK(!c[0].first_out_ns);  // none since it opened again
  CHECK(c[0].last_out_ns == 3200);
}

TEST_CASE("a full closed gate drops the oldest packet it holds and counts it", "[unit][gate]") {
  FlowGates g({{1, {slot_match(kA, kB, 0)}}, {2, {slot_match(kA, kB, 1)}}}, 3);
  std::uint32_t dropped = 99;
  for (std::uint32_t h = 0; h < 3; ++h) CHECK(g.admit(0, h, 1514, dropped) == FlowGates::Verdict::held);
  CHECK(dropped == 99);
  CHECK(g.admit(0, 3, 1514, dropped) == FlowGates::Verdict::held_dropping_oldest);
  CHECK(dropped == 0);
  CHECK(g.admit(0, 4, 1514, dropped) == FlowGates::Verdict::held_dropping_oldest);
  CHECK(dropped == 1);
  CHECK(g.admit(1, 50, 1514, dropped) == FlowGates::Verdict::held);  // another flow's gate has its own room
  std::vector<FlowCounters> c;
  g.counters(c);
  CHECK(c[0].dropped == 2);
  CHECK(c[0].held_packets == 3);
  CHECK(c[1].dropped == 0);
  CHECK(g.held_packets() == 4);
  std::vector<std::uint32_t> out;
  auto take = [&](std::uint32_t h, std::uint32_t) {
    out.push_back(h);
    return true;
  };
  g.set_open(0, true, 1);
  g.feed(take, 0);
  CHECK(out == std::vector<std::uint32_t>{2, 3, 4});  // the latest, in order
  g.set_open(0, false, 2);
  g.feed(take, 0);
  // The ring, wrapped around by now, keeps order through more overflows.
  for (std::uint32_t h = 10; h < 17; ++h) g.admit(0, h, 1514, dropped);
  CHECK(dropped == 13);
  out.clear();
  g.set_open(0, true, 3);
  g.feed(take, 0);
  CHECK(out == std::vector<std::uint32_t>{14, 15, 16});
  g.counters(c);
  CHECK(c[0].dropped == 6);
  CHECK(c[0].held_packets == 0);
}

TEST_CASE("an open gate hands its held packets over as the link has room, new ones behind them", "[unit][gate]") {
  FlowGates g({{1, {slot_match(kA, kB, 0)}}, {2, {slot_match(kA, kB, 1)}}}, 8);
  std::uint32_t dropped = 0;
  for (std::uint32_t h = 0; h < 4; ++h) g.admit(0, h, 100, dropped);
  for (std::uint32_t h = 10; h < 14; ++h) g.admit(1, h, 100, dropped);
  CHECK_FALSE(g.draining());
  std::vector<std::uint32_t> out;
  std::size_t room = 3;
  auto link = [&](std::uint32_t h, std::uint32_t) {
    if (room == 0) return false;
    --room;
    out.push_back(h);
    return true;
  };
  g.feed(link, 0);  // closed gates hand nothing over
  CHECK(out.empty());
  g.set_open(0, true, 100);
  CHECK(g.draining());
  g.feed(link, 0);
  CHECK(out == std::vector<std::uint32_t>{0, 1, 2});
  // Still handing over: the flow's next packet waits behind the held one.
  CHECK(g.admit(0, 4, 100, dropped) == FlowGates::Verdict::held);
  std::vector<FlowCounters> c;
  g.counters(c);
  CHECK(c[0].held_packets == 2);
  room = 1;
  g.feed(link, 0);
  CHECK(out == std::vector<std::uint32_t>{0, 1, 2, 3});
  room = 5;
  g.feed(link, 0);
  CHECK(out == std::vector<std::uint32_t>{0, 1, 2, 3, 4});
  CHECK_FALSE(g.draining());
  CHECK(g.admit(0, 5, 100, dropped) == FlowGates::Verdict::pass);  // all handed over: straight on

  // Two gates draining take turns at being first; closing one mid-way keeps what it holds.
  g.set_open(0, false, 200);
  for (std::uint32_t h = 20; h < 23; ++h) g.admit(0, h, 100, dropped);
  g.set_open(0, true, 300);
  g.set_open(1, true, 300);
  out.clear();
  room = 2;
  g.feed(link, 0);
  room = 2;
  g.feed(link, 0);
  CHECK(out.size() == 4);
  const std::size_t from_first = static_cast<std::size_t>(std::count_if(out.begin(), out.end(), [](std::uint32_t h) { return h >= 20; }));
  CHECK(from_first >= 1);
  CHECK(from_first <= 3);
  g.set_open(1, false, 400);
  g.counters(c);
  const auto held1 = c[1].held_packets;
  CHECK(held1 > 0);
  room = 100;
  out.clear();
  g.feed(link, 0);
  for (auto h : out) CHECK(h >= 20);  // only the open gate's
  CHECK_FALSE(g.draining());
  g.counters(c);
  CHECK(c[1].held_packets == held1);
  g.set_open(1, true, 500);
  g.feed(link, 0);
  CHECK(out.back() == 13);
  CHECK_FALSE(g.draining());
}

TEST_CASE("declaring flows again keeps what flows still declared hold and releases the rest", "[unit][gate]") {
  FlowGates old({{1, {slot_match(kA, kB, 0)}}, {2, {slot_match(kA, kB, 1)}}}, 2);
  std::vector<std::uint32_t> out;
  auto collect = [&](std::uint32_t h, std::uint32_t) { out.push_back(h); };
  auto take = [&](std::uint32_t h, std::uint32_t) {
    out.push_back(h);
    return true;
  };
  old.set_open(0, true, 10);
  old.feed(take, 0);
  old.sent(0, 100, 20);
  old.set_open(0, false, 30);
  old.feed(take, 0);
  std::uint32_t dropped = 0;
  for (std::uint32_t h : {0, 1}) old.admit(0, h, 100, dropped);
  CHECK(old.admit(0, 2, 100, dropped) == FlowGates::Verdict::held_dropping_oldest);
  CHECK(dropped == 0);
  for (std::uint32_t h : {5, 6}) old.admit(1, h, 100, dropped);

  // Flow 1 stays (now with a larger capacity), flow 2 goes, flow 3 is new.
  FlowGates next({{3, {slot_match(kA, kB, 2)}}, {1, {slot_match(kA, kB, 0)}}}, 8);
  next.adopt(old, collect);
  CHECK(out == std::vector<std::uint32_t>{5, 6});  // flow 2's, released in order
  CHECK(old.held_packets() == 0);
  std::vector<FlowCounters> c;
  next.counters(c);
  REQUIRE(c.size() == 2);
  CHECK(c[0].id == 3);
  CHECK(c[0].held_packets == 0);
  CHECK(c[1].id == 1);
  CHECK_FALSE(c[1].open);
  CHECK(c[1].held_packets == 2);
  CHECK(c[1].packets == 1);
  CHECK(c[1].dropped == 1);
  CHECK(c[1].opened_ns == 10);
  CHECK(next.admit(1, 3, 100, dropped) == FlowGates::Verdict::held);  // behind the adopted ones
  out.clear();
  next.set_open(1, true, 40);
  next.feed(take, 0);
  CHECK(out == std::vector<std::uint32_t>{1, 2, 3});

  // No flows at all: everything held is handed back.
  next.admit(0, 7, 100, dropped);
  next.admit(0, 8, 100, dropped);
  out.clear();
  next.release_all(collect);
  CHECK(out == std::vector<std::uint32_t>{7, 8});
  CHECK(next.held_packets() == 0);

  // An open gate stays open only until the flows are declared again.
  FlowGates a({{1, {}}}, 1);
  a.set_open(0, true, 1);
  a.feed(take, 0);
  FlowGates b({{1, {}}}, 1);
  b.adopt(a, collect);
  std::vector<FlowCounters> cb;
  b.counters(cb);
  CHECK_FALSE(cb[0].open);
}

TEST_CASE("declared flow ids are unique and non-negative", "[unit][gate]") {
  CHECK_THROWS_AS(FlowGates({{1, {}}, {1, {}}}, 4), std::invalid_argument);
  CHECK_THROWS_AS(FlowGates({{-1, {}}}, 4), std::invalid_argument);
  FlowGates g({{0, {}}}, 0);  // a capacity of 0 still holds one packet
  std::uint32_t dropped = 0;
  CHECK(g.admit(0, 1, 1, dropped) == FlowGates::Verdict::held);
  CHECK(g.hold_capacity() == 1);
}

TEST_CASE("a frame stamped before its gate opened, handled after, passes at the opening", "[unit][gate]") {
  // The engine reads a batch of frames after a command opened the gate; one of them the
  // kernel stamped just before: it did not enter the link before the window.
  FlowGates g({{10, {slot_match(kA, kB, 0)}}}, 4);
  g.set_open(0, true, 1000);
  std::uint32_t dropped = 0;
  REQUIRE(g.admit(0, 1, 100, dropped) == FlowGates::Verdict::pass);
  g.entered(0, 100, 990);
  std::vector<FlowCounters> c;
  g.counters(c);
  CHECK(c[0].first_admitted_ns == 1000);
  CHECK(c[0].last_admitted_ns == 1000);
  g.entered(0, 100, 1200);
  g.counters(c);
  CHECK(c[0].first_admitted_ns == 1000);
  CHECK(c[0].last_admitted_ns == 1200);
  CHECK(c[0].admitted_bytes == 200);
}
