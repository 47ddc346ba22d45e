// The simulator's typed event queue (sim/event_queue.hpp): time order, first in first out
// at one instant, payloads kept by type.
#include <catch2/catch.hpp>

#include <random>
#include <set>
#include <tuple>

#include "wanlab/sim/event_queue.hpp"

using namespace wanlab::sim;
using wanlab::Nanos;

TEST_CASE("the event queue hands events out in time order, ties in push order", "[unit][sim][sim-parts]") {
  EventQueue q;
  REQUIRE(q.empty());
  q.push(30, ev::Wake{1});
  q.push(10, ev::Deliver{7});
  q.push(30, ev::Tick{});
  q.push(10, ev::PacedCut{2, 5});
  q.push(20, ev::Capacity{3, 4});
  REQUIRE(q.size() == 5);
  CHECK(q.next_at() == 10);

  auto e = q.pop();
  CHECK(e.at == 10);
  REQUIRE(std::holds_alternative<ev::Deliver>(e.event));
  CHECK(std::get<ev::Deliver>(e.event).message == 7);
  e = q.pop();
  CHECK(e.at == 10);
  REQUIRE(std::holds_alternative<ev::PacedCut>(e.event));
  CHECK(std::get<ev::PacedCut>(e.event).link == 2);
  CHECK(std::get<ev::PacedCut>(e.event).gen == 5);
  e = q.pop();
  CHECK(e.at == 20);
  REQUIRE(std::holds_alternative<ev::Capacity>(e.event));
  CHECK(std::get<ev::Capacity>(e.event).trace == 3);
  CHECK(std::get<ev::Capacity>(e.event).step == 4);
  e = q.pop();
  CHECK(e.at == 30);
  CHECK(std::get<ev::Wake>(e.event).group == 1);  // pushed before the tick
  e = q.pop();
  CHECK(std::holds_alternative<ev::Tick>(e.event));
  CHECK(q.empty());
}

TEST_CASE("events pushed while others are handled keep the order of their instant", "[unit][sim][sim-parts]") {
  EventQueue q;
  for (std::uint32_t i = 0; i < 100; ++i) q.push(5, ev::Wake{i});
  std::uint32_t next = 0;
  while (!q.empty()) {
    const auto e = q.pop();
    const auto g = std::get<ev::Wake>(e.event).group;
    CHECK(g == next++);
    if (g < 100) q.push(5, ev::Wake{g + 100});  // the same instant: after all those before
  }
  CHECK(next == 200);
}

TEST_CASE("the 4-ary event heap agrees with an ordered set over random pushes and pops", "[unit][sim][sim-parts]") {
  // Times drawn from a few values, so many events share an instant: their push order decides.
  EventQueue q;
  std::set<std::tuple<Nanos, std::uint64_t, std::uint32_t>> ref;  // (at, push order, payload)
  std::mt19937_64 rng(7);
  std::uint64_t pushed = 0;
  Nanos now = 0;
  for (int step = 0; step < 20000; ++step) {
    if (ref.empty() || rng() % 3 != 0) {
      const Nanos at = now + static_cast<Nanos>(rng() % 8);
      const auto id = static_cast<std::uint32_t>(pushed);
      q.push(at, ev::Deliver{id});
      ref.emplace(at, pushed++, id);
    } else {
      REQUIRE(q.next_at() == std::get<0>(*ref.begin()));
      const auto e = q.pop();
      CHECK(e.at == std::get<0>(*ref.begin()));
      CHECK(std::get<ev::Deliver>(e.event).message == std::get<2>(*ref.begin()));
      now = e.at;
      ref.erase(ref.begin());
    }
    REQUIRE(q.size() == ref.size());
  }
  while (!ref.empty()) {
    const auto e = q.pop();
    CHECK(std::get<ev::Deliver>(e.event).message == std::get<2>(*ref.begin()));
    ref.erase(ref.begin());
  }
  CHECK(q.empty());
}
