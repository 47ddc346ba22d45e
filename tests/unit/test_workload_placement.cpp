// Placement: the Atlas rule (a stage's replicas in one DC, a replica's TP GPUs in one node,
// largest DC first), refusals with their reasons, and the per-replica override.
#include <catch2/catch.hpp>

#include "test_workload_fixtures.hpp"
#include "wanlab/workload/placement.hpp"
#include "wanlab/workload/plan.hpp"

using namespace wanlab;
using namespace wanlab::workload;
using namespace wanlab::workload::testing;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

std::vector<core::Diagnostic> refusal(const Scenario& s, const core::Topology& topo) {
  try {
    place_workers(s, topo);
  } catch (const core::ConfigError& e) {
    return e.diagnostics();
  }
  FAIL("expected a ConfigError");
  return {};
}

}  // namespace

TEST_CASE("worker ids are stage-major, then replica, then TP rank", "[unit][workload][placement]") {
  const Parallelism par{3, 2, 4};
  CHECK(worker_id(par, 0, 0, 0) == 0);
  CHECK(worker_id(par, 0, 0, 3) == 3);
  CHECK(worker_id(par, 0, 1, 0) == 4);
  CHECK(worker_id(par, 1, 0, 0) == 8);
  CHECK(worker_id(par, 2, 1, 3) == 23);
}

TEST_CASE("Atlas rule: each stage fills one DC of the three-DC lab", "[unit][workload][placement]") {
  const auto topo = shipped_topology("three-dc.json");  // 3 DCs x 4 nodes x 8 GPUs
  const auto workers = place_workers(scenario(3, 4, 8, 8), topo);
  REQUIRE(workers.size() == 96);
  for (const auto& w : workers) {
    INFO(w.worker);
    CHECK(w.worker == worker_id({3, 4, 8}, w.stage, w.dp_rank, w.tp_rank));
    CHECK(w.dc == static_cast<std::size_t>(w.stage));  // equal DCs: topology order
    CHECK(w.node == w.dp_rank);
    CHECK(w.gpu == w.tp_rank);
  }
}

TEST_CASE("Atlas rule: largest DC first, consecutive stages, replicas inside nodes", "[unit][workload][placement]") {
  const auto topo = lab(json::array({{{"name", "a"}, {"nodes", 1}, {"gpus_per_node", 8}},
                                     {{"name", "b"}, {"nodes", 2}, {"gpus_per_node", 8}},
                                     {{"name", "c"}, {"nodes", 3}, {"gpus_per_node", 8}}}));
  // 4 stages of 2 replicas x tp 4: c (24 GPUs) takes stages 0-2, b stage 3.
  const auto workers = place_workers(scenario(4, 2, 4, 8), topo);
  const auto at = [&](int stage, int r, int t) {
    return workers[static_cast<std::size_t>(worker_id({4, 2, 4}, stage, r, t))];
  };
  CHECK(at(0, 0, 0).dc == 2);
  CHECK(at(0, 0, 0).node == 0);
  CHECK(at(0, 1, 0).node == 0);
  CHECK(at(0, 1, 0).gpu == 4);  // the second replica takes the node's other half
  CHECK(at(1, 0, 3).node == 1);
  CHECK(at(1, 0, 3).gpu == 3);
  CHECK(at(2, 1, 3).dc == 2);
  CHECK(at(2, 1, 3).node == 2);
  CHECK(at(2, 1, 3).gpu == 7);
  CHECK(at(3, 0, 0).dc == 1);
  CHECK(at(3, 1, 0).dc == 1);
  CHECK(at(3, 1, 0).node == 0);
}

TEST_CASE("Atlas rule refuses a stage that fits in no DC, saying why", "[unit][workload][placement]") {
  const auto topo = shipped_topology("two-dc.json");  // 2 DCs x 2 nodes x 8 GPUs
  auto ds = refusal(scenario(3, 2, 8, 8), topo);
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].file == "t-scenario.json");
  CHECK(ds[0].path == "/parallelism");
  CHECK(ds[0].reason == "stage 2 needs 16 GPUs in one DC (dp 2 x tp 8); the DCs left have use: 0, euw: 0");

  ds = refusal(scenario(1, 1, 16, 8), topo);
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].path == "/parallelism/tp");
  CHECK_THAT(ds[0].reason, Contains("tp 16 does not fit in one node") && Contains("8 GPUs"));

  // 12 free GPUs, but two nodes of 6 hold only two replicas of tp 4.
  const auto small = lab(json::array({{{"name", "a"}, {"nodes", 2}, {"gpus_per_node", 6}}}));
  ds = refusal(scenario(1, 3, 4, 8), small);
  REQUIRE(ds.size() == 1);
  CHECK_THAT(ds[0].reason, Contains("stage 0 needs 12 GPUs in one DC (dp 3 x tp 4); the DCs left have a: 12") &&
                               Contains("a has 12 free GPUs, but not 3 nodes with 4 free each"));
}

TEST_CASE("placement override: a DC per stage and replica", "[unit][workload][placement]") {
  const auto topo = shipped_topology("two-dc.json");
  auto s = scenario(2, 2, 8, 4);
  s.placement = {{"use", "euw"}, {"euw", "use"}};
  const auto workers = place_workers(s, topo);
  const auto at = [&](int stage, int r) {
    return workers[static_cast<std::size_t>(worker_id({2, 2, 8}, stage, r, 0))];
  };
  CHECK(at(0, 0).dc == 0);
  CHECK(at(0, 0).node == 0);
  CHECK(at(0, 1).dc == 1);
  CHECK(at(0, 1).node == 0);
  CHECK(at(1, 0).dc == 1);
  CHECK(at(1, 0).node == 1);
  CHECK(at(1, 1).dc == 0);
  CHECK(at(1, 1).node == 1);

  // Now the all-reduce of every stage crosses the WAN too: 2 ranks, 2 steps of half the
  // buffer each way per TP rank.
  const auto plan = build_plan(s, topo);
  std::uint64_t allreduce = 0;
  for (const auto& p : plan.programs)
    for (const auto& op : p.ops)
      if (op.kind == program::OpKind::allreduce) allreduce += 2 * program::ring_chunk_bytes(op.bytes, 2);
  std::uint64_t pipeline = 0;
  for (const auto& p : plan.programs)
    for (const auto& op : p.ops)
      if (op.kind == program::OpKind::send) pipeline += op.bytes;
  CHECK(plan.wan_bytes_total() == allreduce + pipeline);  // every transfer crosses the WAN here
}

TEST_CASE("placement override refusals name the entry", "[unit][workload][placement]") {
  const auto topo = shipped_topology("two-dc.json");
  auto s = scenario(2, 2, 8, 4);
  s.placement = {{"use", "eu"}, {"use", "use"}};
  auto ds = refusal(s, topo);
  REQUIRE(ds.size() == 2);
  CHECK(ds[0].path == "/placement/0/1");
  CHECK_THAT(ds[0].reason, Contains("unknown DC \"eu\" (did you mean \"euw\"?)") && Contains("use, euw"));
  CHECK(ds[1].path == "/placement/1/1");  // the third replica of tp 8 in use's two nodes
  CHECK_THAT(ds[1].reason, Contains("no node of DC \"use\" has 8 free GPUs left for stage 1, DP replica 1") &&
                               Contains("puts 24 GPUs in use, which has 2 nodes of 8 GPUs"));

  s.placement = {{"use", "use"}};
  ds = refusal(s, topo);
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].path == "/placement");
}
