// The simulated workers' table (sim/workers.hpp): TP groups, their ops by slot, every send
// matched to the recv it feeds, needed_at from the compute before a recv.
#include <catch2/catch.hpp>

#include "test_sim_support.hpp"
#include "wanlab/sim/workers.hpp"

using namespace wanlab;
using namespace wanlab::sim;

TEST_CASE("the workers' table matches every send to its receiver's recv", "[unit][sim][sim-parts]") {
  auto topo = workload::testing::lab({{{"name", "a"}, {"nodes", 2}, {"gpus_per_node", 2}},
                                      {{"name", "b"}, {"nodes", 2}, {"gpus_per_node", 2}}});
  auto s = workload::testing::scenario(2, 2, 2, 3);
  s.iterations = 2;
  s.warmup = 1;
  const auto plan = workload::build_plan(s, topo);
  const SimOptions opt;
  SimContext ctx(plan, opt);
  Workers w(ctx);
  REQUIRE(w.groups.size() == plan.workers.size() / 2);
  std::size_t sends = 0;
  for (std::uint32_t g = 0; g < w.groups.size(); ++g) {
    const auto& gr = w.groups[g];
    CHECK(gr.worker == static_cast<int>(g) * 2);
    CHECK(gr.prog == &plan.programs[static_cast<std::size_t>(gr.worker)]);
    CHECK(gr.report.worker == gr.worker);
    for (std::size_t i = 0; i < gr.nops; ++i) {
      const auto slot = gr.slot_base + static_cast<std::uint32_t>(i);
      CHECK(w.slot_owner[slot] == g);
      const auto& op = w.ops[slot];
      CHECK(op.kind == gr.prog->ops[i].kind);
      if (op.kind != program::OpKind::send) continue;
      ++sends;
      REQUIRE(op.target != kNone);
      const auto dst = w.slot_owner[op.target];
      CHECK(w.groups[dst].worker == op.peer);
      const auto& recv = w.groups[dst].prog->ops[op.target - w.groups[dst].slot_base];
      CHECK(recv.kind == program::OpKind::recv);
      CHECK(recv.peer == gr.worker);
      CHECK(recv.tag == gr.prog->ops[i].tag);
      CHECK(op.gradient == (recv.tag % 2 != 0));
      CHECK(w.needed_at(op.target) >= 0);
    }
  }
  CHECK(sends > 0);
  CHECK(w.arrival_key(1, 0) != w.arrival_key(0, 1));
  CHECK(w.arrival_key(0, 2) != w.arrival_key(1, 0));
}

TEST_CASE("the workers' table refuses a send nobody receives", "[unit][sim][sim-parts]") {
  auto plan = testing::two_dc_plan();
  for (auto& op : plan.programs[1].ops)
    if (op.kind == program::OpKind::recv) op.tag += 100;
  const SimOptions opt;
  SimContext ctx(plan, opt);
  CHECK_THROWS_WITH(Workers(ctx), Catch::Contains("which never receives it"));
}
