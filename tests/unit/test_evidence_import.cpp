// The import of a real PyTorch profiler trace (traces/pytorch/two-stage-gloo), replayed in
// the simulator, and what happens to malformed traces and contents wanlab does not carry.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <functional>
#include <fstream>

#include "temp_dir.hpp"
#include "wanlab/common/version.hpp"
#include "wanlab/evidence/analyze.hpp"
#include "wanlab/evidence/card.hpp"
#include "wanlab/evidence/trace_import.hpp"
#include "wanlab/sim/simulator.hpp"
#include "wanlab/workload/gpu.hpp"
#include "wanlab/workload/metrics.hpp"
#include "wanlab/workload/plan.hpp"
#include "wanlab/workload/scenario.hpp"

using namespace wanlab;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kSource = WANLAB_SOURCE_DIR;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const evidence::EvidenceError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("import: the two-stage PyTorch pipeline's profiler trace replays within 10 % of its measured time",
          "[evidence][import]") {
  const std::string d = kSource + "/traces/pytorch/two-stage-gloo/";
  const double eff = workload::effective_flops("H100", workload::Dtype::bf16, 0.4);
  evidence::ImportOptions o;
  o.effective_flops = eff;
  o.message_bytes = 32 * 512 * 4;  // the script's activations: batch 32 x hidden 512 floats
  const auto job = evidence::import_pytorch_traces({d + "rank0.json", d + "rank1.json"}, o);
  REQUIRE(job.programs.size() == 2);
  CHECK(job.iterations == 3);
  int sends = 0, recvs = 0;
  for (const auto& op : job.programs[0].ops) {
    sends += op.kind == program::OpKind::send;
    recvs += op.kind == program::OpKind::recv;
  }
  CHECK(sends == 4);  // GPipe, 4 micro-batches: activations out, gradients back
  CHECK(recvs == 4);
  CHECK(job.measured_iteration_mean_s > 0);

  const auto topo = core::load_topology(kSource + "/topologies/two-dc.json");
  const auto plan = evidence::replay_plan(job, topo, {topo.dcs[0].name, topo.dcs[0].name}, eff, job.iterations + 1, 1);
  const auto r = sim::simulate(plan);
  const auto summary = workload::summarize(plan, r.by_worker());
  const double predicted = summary["iteration_time_s"]["mean"].get<double>();
  INFO(fmt::format("predicted {:.4f} s, measured {:.4f} s", predicted, job.measured_iteration_mean_s));
  CHECK(std::abs(predicted / job.measured_iteration_mean_s - 1) < 0.10);

  // Across the WAN the same job takes longer: its messages now cross an 85 ms link.
  const auto wan = evidence::replay_plan(job, topo, {topo.dcs[0].name, topo.dcs[1].name}, eff, job.iterations + 1, 1);
  const auto rw = sim::simulate(wan);
  CHECK(workload::summarize(wan, rw.by_worker())["iteration_time_s"]["mean"].get<double>() > predicted);
}

TEST_CASE("import: malformed traces and unsupported contents", "[evidence][import]") {
  evidence::ImportOptions o;
  o.message_bytes = 1024;
  const auto ev = [](const std::string& name, double ts, double dur) {
    return json{{"name", name}, {"ph", "X"}, {"ts", ts}, {"dur", dur}, {"pid", 1}, {"tid", 1}};
  };
  json r0 = {{"traceEvents", json::array({ev("ProfilerStep#0", 0, 100), ev("aten::mm", 1, 10), ev("c10d::send", 20, 2),
                                         ev("c10d::broadcast_", 40, 5), ev("aten::mm", 50, 10),
                                         json{{"name", "x"}, {"ph", "i"}, {"ts", 3}}})}};
  json r1 = {{"traceEvents", json::array({ev("ProfilerStep#0", 0, 100), ev("c10d::recv_", 5, 30), ev("aten::mm", 40, 10),
                                         ev("c10d::broadcast_", 60, 5), ev("aten::mm", 1, 1) /* other thread below */})}};
  r1["traceEvents"][4]["tid"] = 7;
  const auto job = evidence::import_pytorch_documents({r0, r1}, {"r0.json", "r1.json"}, o);
  std::string all;
  for (const auto& u : job.unsupported) all += u + "\n";
  CHECK(all.find("r0.json: 1 events of phase 'i'") != std::string::npos);
  CHECK(all.find("r0.json: 1 x 'c10d::broadcast_'") != std::string::npos);
  CHECK(all.find("r1.json: 1 events on thread 1/7") != std::string::npos);
  REQUIRE(job.programs[0].ops.size() == 3);  // compute, send, compute (the broadcast's time in it)
  CHECK(job.programs[0].ops[1].kind == program::OpKind::send);
  CHECK(job.programs[1].ops[1].kind == program::OpKind::recv);

  auto broken = r0;
  broken["traceEvents"][2].erase("dur");
  CHECK(error_of([&] { evidence::import_pytorch_documents({broken, r1}, {"r0.json", "r1.json"}, o); }) ==
        "r0.json: /traceEvents/2/dur: missing or not a number (µs)");
  CHECK(error_of([&] { evidence::import_pytorch_documents({json{{"events", 1}}}, {"r0.json"}, o); }) ==
        "r0.json: /traceEvents: missing: not a Chrome trace (Kineto) nor an event list");
  CHECK(error_of([&] { evidence::import_pytorch_documents({r0, r0}, {"r0.json", "r1.json"}, o); }) ==
        "r0.json and r1.json: rank 0 sends 1 messages an iteration to rank 1, which receives 0");
  evidence::ImportOptions no_size;
  CHECK(error_of([&] { evidence::import_pytorch_documents({r0, r1}, {"r0.json", "r1.json"}, no_size); })
            .starts_with("r0.json: /traceEvents/2: the trace does not give this message's size"));
}
