// The simulated ring all-reduce alone (sim/collectives.hpp): it starts when its last rank
// enters, one flow per ring hop with all its steps' bytes, and ends 2(n-1) one-way delays
// of the slowest hop after its last hop's flow.
#include <catch2/catch.hpp>

#include "test_sim_support.hpp"
#include "wanlab/sim/collectives.hpp"

using namespace wanlab;
using namespace wanlab::sim;

namespace {
SimOptions no_acks() {
  SimOptions o;
  o.acks = false;
  return o;
}

program::Op ring_op(std::vector<int> ring, std::uint64_t bytes) {
  program::Op op;
  op.kind = program::OpKind::allreduce;
  op.bytes = bytes;
  op.ring = std::move(ring);
  return op;
}
}  // namespace

TEST_CASE("an all-reduce across two DCs: a flow per hop, then 2(n-1) one-way delays", "[unit][sim][sim-parts]") {
  const auto plan = testing::two_dc_plan();
  const auto opt = no_acks();
  SimContext ctx(plan, opt);
  Collectives all(ctx, {{0, 0}, {1, 1}});
  const auto op = ring_op({0, 1}, 10'000'000);
  const auto c0 = all.enter(0, 0, 0, op, 1'000);
  CHECK_FALSE(ctx.net.next_finish());  // waits for the other rank
  CHECK(ctx.events.empty());
  const auto c1 = all.enter(1, 0, 0, op, 5'000);
  REQUIRE(c0 == c1);
  CHECK(all[c0].entry == std::vector<Nanos>{1'000, 5'000});
  CHECK(all[c0].hops_left == 2);
  CHECK(all[c0].steps == 2);
  ctx.net.update(5'000);
  const auto f = ctx.net.next_finish();
  REQUIRE(f);
  // Each hop: 2 steps of half the buffer on the wire, alone on its direction's link (1 Gbit/s).
  const double wire = 2.0 * static_cast<double>(program::ring_chunk_bytes(op.bytes, 2)) * workload::kWireOverhead;
  CHECK(static_cast<double>(*f - 5'000) == Approx(wire * 8).margin(2));
  std::vector<FlowNetwork::FlowId> done;
  ctx.net.take_finished(*f, done);
  REQUIRE(done.size() == 2);
  for (const auto flow : done) {
    CHECK(ctx.owners.at(flow).collective);
    CHECK(ctx.owners.at(flow).payload == Approx(wire / workload::kWireOverhead));
    all.hop_done(ctx.owners.at(flow).index, *f);
  }
  REQUIRE(ctx.events.size() == 1);
  CHECK(ctx.events.next_at() == *f + 2 * 10'000'000);  // two steps of the 10 ms one-way delay
  const auto e = ctx.events.pop();
  CHECK(std::get<ev::CollectiveEnd>(e.event).collective == c0);
}

TEST_CASE("an all-reduce on one node ends when its last rank enters", "[unit][sim][sim-parts]") {
  const auto plan = testing::two_dc_plan();
  const auto opt = no_acks();
  SimContext ctx(plan, opt);
  Collectives all(ctx, {{0, 0}, {0, 0}});
  const auto op = ring_op({0, 1}, 1'000);
  all.enter(1, 2, 0, op, 7);
  CHECK(ctx.events.empty());
  const auto ci = all.enter(0, 2, 0, op, 9);
  CHECK(all[ci].iteration == 2);
  REQUIRE(ctx.events.size() == 1);
  CHECK(ctx.events.next_at() == 9);
  CHECK_FALSE(ctx.net.next_finish());
}

TEST_CASE("all-reduces are told apart by ring, iteration and sequence", "[unit][sim][sim-parts]") {
  const auto plan = testing::two_dc_plan();
  const auto opt = no_acks();
  SimContext ctx(plan, opt);
  Collectives all(ctx, {{0, 0}, {0, 0}});
  const auto op = ring_op({0, 1}, 1'000);
  const auto a = all.enter(0, 0, 0, op, 0);
  const auto b = all.enter(0, 0, 1, op, 0);  // its second all-reduce of the iteration
  const auto c = all.enter(0, 1, 0, op, 0);
  CHECK(a != b);
  CHECK(b != c);
  CHECK(all.enter(1, 0, 1, op, 0) == b);
}

TEST_CASE("an all-reduce whose ring lacks the rank is refused", "[unit][sim][sim-parts]") {
  const auto plan = testing::two_dc_plan();
  const auto opt = no_acks();
  SimContext ctx(plan, opt);
  Collectives all(ctx, {{0, 0}, {1, 1}});
  CHECK_THROWS_WITH(all.enter(1, 0, 0, ring_op({0}, 1'000), 0),
                    Catch::Contains("worker 1 runs an all-reduce whose ring lacks it"));
  CHECK_THROWS_WITH(all.enter(0, 1, 0, ring_op({0, 3}, 1'000), 0),
                    Catch::Contains("worker 3 is not TP rank 0 of a worker of the plan"));
}
