// Figures of the shipped scenarios, printed on demand (hidden from the default run):
//   wanlab_unit_tests "[figures]"
// Per stage: layers, parameters, forward/backward time per micro-batch at the effective
// FLOP/s; the bytes of one stage-boundary message; WAN bytes per iteration; and an estimate
// of the iteration time with every transfer alone on its link (no contention, no TCP).
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <iostream>

#include "test_workload_fixtures.hpp"
#include "wanlab/workload/execute.hpp"
#include "wanlab/workload/metrics.hpp"
#include "wanlab/workload/plan.hpp"

using namespace wanlab;
using namespace wanlab::workload;
namespace fs = std::filesystem;

TEST_CASE("figures of the shipped scenarios", "[.][figures]") {
  for (const auto& entry : fs::directory_iterator(fs::path(testing::kSource) / "bench" / "scenarios")) {
    if (entry.path().extension() != ".json") continue;
    const auto s = load_scenario(entry.path());
    const auto topo = core::load_topology(s.topology_path);
    const auto plan = build_plan(s, topo);
    const double flops = plan.effective_flops.front();
    std::cout << fmt::format("\n{} ({} on {}, pp {} dp {} tp {}, {} x {} micro-batches, scale {})\n", s.name,
                             s.model.preset, topo.name, s.parallelism.pp, s.parallelism.dp, s.parallelism.tp,
                             s.micro_batches, s.micro_batch_size, s.scale);
    std::cout << fmt::format("  effective {:.1f} TFLOP/s per GPU (mfu {})\n", flops / 1e12,
                             s.mfu ? fmt::format("{}", *s.mfu) : std::string("GPU table"));
    for (const auto& c : plan.stages) {
      const auto& dc = topo.dcs[plan.workers[static_cast<std::size_t>(worker_id(s.parallelism, c.stage, 0, 0))].dc];
      std::cout << fmt::format(
          "  stage {} in {}: {} layers, {:.3f} B params ({:.3f} B per GPU), forward {:.2f} ms, backward {:.2f} ms, "
          "optimizer {:.3f} ms, all-reduce buffer {:.1f} MB (scaled {:.2f} MB)\n",
          c.stage, dc.name, c.layers, static_cast<double>(c.parameters) / 1e9,
          static_cast<double>(c.parameters_per_gpu) / 1e9, c.forward_flops / flops * 1e3,
          c.backward_flops / flops * 1e3, c.optimizer_flops / flops * 1e3,
          static_cast<double>(c.gradient_bytes_per_gpu) / 1e6,
          static_cast<double>(scaled_bytes(c.gradient_bytes_per_gpu, run_lan_scale(s))) / 1e6);
    }
    const auto act = activation_bytes(s.model, s.micro_batch_size);
    std::cout << fmt::format("  activations per micro-batch {:.2f} MB; per TP rank {:.2f} MB, scaled {:.3f} MB\n",
                             static_cast<double>(act) / 1e6, static_cast<double>(act) / s.parallelism.tp / 1e6,
                             static_cast<double>(plan.pipeline_message_bytes) / 1e6);
    for (const auto& l : plan.wan_bytes_per_iteration) {
      const auto* link = topo.find_link(l.src, l.dst);
      const double rate = static_cast<double>(link->params.rate.bps) * s.scale;
      std::cout << fmt::format(
          "  WAN {} -> {}: {:.1f} MB per iteration (scaled), link {:.0f} Mbit/s scaled: "
          "{:.2f} s of transfer\n",
          topo.dcs[l.src].name, topo.dcs[l.dst].name, static_cast<double>(l.bytes) / 1e6, rate / 1e6,
          static_cast<double>(l.bytes) * 8 / rate);
    }
    std::cout << fmt::format("  WAN total {:.1f} MB per iteration\n",
                             static_cast<double>(plan.wan_bytes_total()) / 1e6);
    const auto reports = execute(plan.programs, s.iterations, modeled_compute(plan), uncontended_comm(plan));
    const auto summary = summarize(plan, reports);
    std::cout << fmt::format("  uncontended estimate: iteration {:.3f} s, bubble {:.3f}, GPU utilization {:.3f}\n",
                             summary["iteration_time_s"]["mean"].get<double>(),
                             summary["bubble_fraction"].get<double>(),
                             summary["gpu_utilization"]["mean"].get<double>());
  }
}
