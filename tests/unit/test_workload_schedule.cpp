// Pipeline schedules and the programs built from them: the exact op order of every stage
// (GPipe, 1F1B), the pipeline messages around each forward and backward, the all-reduce,
// and the bubble fraction the virtual executor measures against (P-1)/(M+P-1).
#include <catch2/catch.hpp>

#include <string>

#include "test_workload_fixtures.hpp"
#include "wanlab/workload/execute.hpp"
#include "wanlab/workload/metrics.hpp"
#include "wanlab/workload/plan.hpp"

using namespace wanlab;
using namespace wanlab::workload;
using namespace wanlab::workload::testing;
using namespace std::chrono_literals;
using program::Op;
using program::OpKind;

namespace {

// "F0 F1 B0 ..."
std::string order(Schedule schedule, int pp, int stage, int m) {
  std::string out;
  for (auto [kind, mb] : pipeline_order(schedule, pp, stage, m))
    out += (out.empty() ? "" : " ") + std::string(kind == OpKind::forward ? "F" : "B") + std::to_string(mb);
  return out;
}

// "recv a0 w0, F0, send a0 w4, ..., allreduce [2 3], opt": a = activation tag, g = gradient tag.
std::string render(const std::vector<Op>& ops) {
  std::string out;
  for (const auto& op : ops) {
    if (!out.empty()) out += ", ";
    const std::string tag = (op.tag == activation_tag(op.microbatch) ? "a"
                             : op.tag == gradient_tag(op.microbatch) ? "g"
                                                                     : "?") +
                            std::to_string(op.microbatch);
    switch (op.kind) {
      case OpKind::forward:
        out += "F" + std::to_string(op.microbatch);
        break;
      case OpKind::backward:
        out += "B" + std::to_string(op.microbatch);
        break;
      case OpKind::optimizer:
        out += "opt";
        break;
      case OpKind::send:
        out += "send " + tag + " w" + std::to_string(op.peer);
        break;
      case OpKind::recv:
        out += "recv " + tag + " w" + std::to_string(op.peer);
        break;
      case OpKind::allreduce: {
        out += "allreduce [";
        for (std::size_t i = 0; i < op.ring.size(); ++i) out += (i ? " " : "") + std::to_string(op.ring[i]);
        out += "]";
        break;
      }
    }
  }
  return out;
}

core::Topology one_dc() {
  return lab(nlohmann::json::array({{{"name", "a"}, {"nodes", 4}, {"gpus_per_node", 8}}}));
}

}  // namespace

TEST_CASE("GPipe: all forwards, then all backwards", "[unit][workload][schedule]") {
  for (int stage = 0; stage < 4; ++stage) CHECK(order(Schedule::gpipe, 4, stage, 4) == "F0 F1 F2 F3 B0 B1 B2 B3");
}

TEST_CASE("1F1B: Megatron's non-interleaved schedule, P = 4, M = 8", "[unit][workload][schedule]") {
  // Warm-up of P - stage - 1 forwards, then one forward and one backward at a time, then
  // the remaining backwards.
  CHECK(order(Schedule::one_f_one_b, 4, 0, 8) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  CHECK(order(Schedule::one_f_one_b, 4, 1, 8) == "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
  CHECK(order(Schedule::one_f_one_b, 4, 2, 8) == "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  CHECK(order(Schedule::one_f_one_b, 4, 3, 8) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  // Fewer micro-batches than stages: the warm-up is cut to M.
  CHECK(order(Schedule::one_f_one_b, 4, 0, 2) == "F0 F1 B0 B1");
  CHECK(order(Schedule::one_f_one_b, 4, 2, 2) == "F0 F1 B0 B1");
  CHECK(order(Schedule::one_f_one_b, 4, 3, 2) == "F0 B0 F1 B1");
  CHECK_THROWS_AS(pipeline_order(Schedule::gpipe, 2, 2, 4), std::invalid_argument);
}

TEST_CASE("programs: pipeline messages, all-reduce and optimizer", "[unit][workload][schedule]") {
  const auto plan = build_plan(scenario(3, 2, 1, 2), one_dc());
  REQUIRE(plan.programs.size() == 6);
  // Worker ids: (stage, replica) -> 2 stage + replica.
  CHECK(render(plan.programs[0].ops) ==
        "F0, send a0 w2, F1, send a1 w2, recv g0 w2, B0, recv g1 w2, B1, "
        "allreduce [0 1], opt");
  CHECK(render(plan.programs[2].ops) ==
        "recv a0 w0, F0, send a0 w4, recv a1 w0, F1, send a1 w4, recv g0 w4, B0, "
        "send g0 w0, recv g1 w4, B1, send g1 w0, allreduce [2 3], opt");
  // The last stage has no send after a forward: its backward follows at once.
  CHECK(render(plan.programs[5].ops) ==
        "recv a0 w3, F0, B0, send g0 w3, recv a1 w3, F1, B1, send g1 w3, "
        "allreduce [4 5], opt");

  const auto& s1 = plan.programs[2];
  CHECK(s1.stage == 1);
  CHECK(s1.dp_rank == 0);
  CHECK(s1.shape == plan.stages[1].shape);
  // 1 sample x 32 tokens x hidden 128 x 2 bytes.
  CHECK(plan.pipeline_message_bytes == 8192);
  CHECK(s1.ops[0].bytes == 8192);
  CHECK(s1.ops[1].flops == plan.stages[1].forward_flops);
  CHECK(s1.ops[7].flops == plan.stages[1].backward_flops);
  CHECK(s1.ops[12].bytes == plan.stages[1].gradient_bytes_per_gpu);
  CHECK(s1.ops[13].flops == plan.stages[1].optimizer_flops);
  CHECK(plan.wan_bytes_per_iteration.empty());  // one DC
  // No gpu.mfu: the GPU table's measured default for H100 (workload/gpu.hpp).
  for (double f : plan.effective_flops) CHECK(f == 0.59 * 989e12);
}

TEST_CASE("programs with TP: each rank talks to its peer rank, bytes split and scaled", "[unit][workload][schedule]") {
  auto s = scenario(2, 1, 4, 2, Schedule::gpipe);
  s.scale = 0.3;
  const auto plan = build_plan(s, one_dc());
  // 8192 / 4 = 2048 per rank, x 0.3 = 614.4 -> 614.
  CHECK(plan.pipeline_message_bytes == 614);
  CHECK(render(plan.programs[1].ops) == "F0, send a0 w5, F1, send a1 w5, recv g0 w5, B0, recv g1 w5, B1, opt");
  CHECK(render(plan.programs[7].ops) == "recv a0 w3, F0, recv a1 w3, F1, B0, send g0 w3, B1, send g1 w3, opt");
  CHECK(scaled_bytes(s, 1) == 1);  // never 0
}

TEST_CASE("WAN bytes per iteration follow the stage boundaries", "[unit][workload][schedule]") {
  const auto topo = shipped_topology("three-dc.json");
  const auto plan = build_plan(scenario(3, 4, 8, 8), topo);
  // Each of the 32 (replica, TP rank) pipelines sends 8 activations forward and 8 gradients
  // back over each boundary: 32 x 8 x 8192/8 bytes per direction per boundary.
  const std::uint64_t per_direction = 32ULL * 8 * 1024;
  REQUIRE(plan.wan_bytes_per_iteration.size() == 4);
  CHECK(plan.wan_bytes_per_iteration[0] == Plan::LinkBytes{0, 1, per_direction});
  CHECK(plan.wan_bytes_per_iteration[1] == Plan::LinkBytes{1, 0, per_direction});
  CHECK(plan.wan_bytes_per_iteration[2] == Plan::LinkBytes{1, 2, per_direction});
  CHECK(plan.wan_bytes_per_iteration[3] == Plan::LinkBytes{2, 1, per_direction});
  CHECK(plan.wan_bytes_total() == 4 * per_direction);
}

TEST_CASE("bubble fraction with free communication is (P-1)/(M+P-1)", "[unit][workload][schedule]") {
  // Equal stages: a forward takes 1 ms and a backward 2 ms everywhere; the optimizer is free.
  const ComputeTime compute = [](int, const Op& op) -> Duration {
    return op.kind == OpKind::forward ? 1ms : op.kind == OpKind::backward ? 2ms : 0ms;
  };
  const CommTime comm = [](int, int, std::uint64_t) -> Duration { return 0ms; };
  for (auto schedule : {Schedule::gpipe, Schedule::one_f_one_b}) {
    for (auto [p, m] : {std::pair{4, 8}, {2, 4}, {3, 3}, {1, 4}, {4, 2}, {8, 16}}) {
      INFO(to_string(schedule) << " P=" << p << " M=" << m);
      auto s = scenario(p, 1, 1, m, schedule);
      const auto plan = build_plan(s, one_dc());
      const auto reports = execute(plan.programs, s.iterations, compute, comm);
      const auto summary = summarize(plan, reports);
      const double expected = static_cast<double>(p - 1) / (m + p - 1);
      CHECK(summary["bubble_fraction"].get<double>() == Approx(expected).margin(1e-9));
      // Every iteration, the first included, takes (M + P - 1) x 3 ms.
      for (const auto& t : summary["iteration_time_s"]["per_iteration"])
        CHECK(t.get<double>() == Approx((m + p - 1) * 3e-3).margin(1e-12));
    }
  }
}
