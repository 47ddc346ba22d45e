// `wanlab analyze` on simulated runs of a shipped bench (fair and atlas): its phases add up
// to the measured step time, and the comparison names the phase behind the difference.
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

workload::Plan shipped_plan(const std::string& policy, int connections) {
  auto s = workload::load_scenario(kSource + "/bench/scenarios/two-dc-1b.json");
  s.policy = policy;
  s.connections = connections;
  return workload::build_plan(s, core::load_topology(s.topology_path));
}

// What `wanlab simulate` writes for one variant: summary.json, timeline.json (full), card.yaml.
void simulate_into(const workload::Plan& plan, const fs::path& dir) {
  const auto r = sim::simulate(plan);
  // summary.json's training part and the links' rates as run (run::make_summary adds the
  // same `wan` entries, with the bytes the links carried).
  auto summary = workload::summarize(plan, r.by_worker());
  summary["policy"] = plan.scenario.policy;
  summary["backend"] = "simulate";
  summary["wan"] = json::array();
  for (const auto& l : plan.topology.links)
    summary["wan"].push_back({{"src", plan.topology.dcs[l.src].name},
                              {"dst", plan.topology.dcs[l.dst].name},
                              {"rate_bps", static_cast<double>(l.params.rate.bps) * plan.scenario.scale}});
  fs::create_directories(dir);
  std::ofstream(dir / "summary.json") << summary.dump(2);
  std::ofstream(dir / "timeline.json") << workload::chrome_trace(plan, r.reports()).dump();
  evidence::CardInputs in;
  in.command = "simulate";
  in.plan = &plan;
  in.topology = &plan.topology;
  in.summary = summary;
  in.framework = "wanlab simulator";
  in.invocation = {{"build/controller/wanlab", "simulate", "bench/scenarios/two-dc-1b.json"}, kSource};
  in.variant = dir.filename().string();
  evidence::write_card(dir, in);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const evidence::EvidenceError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("analyze: simulated fair and atlas runs of a shipped bench add up and are explained by phase",
          "[evidence][analyze]") {
  test::TempDir dir("evidence-analyze");
  simulate_into(shipped_plan("fair", 1), dir.path() / "fair-k1");
  simulate_into(shipped_plan("atlas", 1), dir.path() / "atlas-k1");
  std::ofstream(dir.path() / "bench.json") << R"({"baseline": "fair-k1"})";

  const auto folders = evidence::find_run_folders(dir.path());
  REQUIRE(folders.size() == 2);
  CHECK(folders[0].filename() == "fair-k1");  // the bench's baseline first
  std::vector<json> runs;
  for (const auto& f : folders) runs.push_back(evidence::analyze_run(f));
  for (const auto& r : runs) {
    INFO(r["name"]);
    CHECK(r["check"]["phase_sum_error"].get<double>() < 0.01);
    CHECK(r["check"]["critical_path_error"].get<double>() < 0.01);
    CHECK(r["gpus"] == 32);
    CHECK(r["per_stage"].size() == 2);
    CHECK(r["per_gpu"].size() == 32);
    CHECK(r["mean"]["compute_s"].get<double>() > 0);
    REQUIRE(r["wan_links"].size() == 2);  // activations one way, gradients the other
    for (const auto& l : r["wan_links"]) {
      CHECK(l["transfers"].get<int>() > 0);
      CHECK(l["rate_gbit_s"].get<double>() > 0);
      CHECK(l["transfer_gbit_s"]["p50"].get<double>() > 0);
      CHECK(l["busy_gbit_s"].get<double>() > 0);
    }
    CHECK(!r["critical_path"]["hops"].empty());
    CHECK(r["card"]["commit"] == std::string(commit()));
  }
  const auto cmp = evidence::compare_runs(runs);
  REQUIRE(cmp["runs"].size() == 2);
  const auto& atlas = cmp["runs"][1];
  // The phase deltas add up to the step-time difference.
  double sum = 0;
  for (const char* p : {"compute_s", "exposed_pipeline_s", "exposed_allreduce_s", "idle_s"}) sum += atlas["delta"][p].get<double>();
  CHECK(sum == Approx(atlas["delta_step_s"].get<double>()).margin(0.01 * runs[0]["step_time_s"].get<double>()));
  CHECK(!atlas["explained_by"].get<std::string>().empty());
  CHECK(atlas["explanation"].get<std::string>().find("atlas-k1 is") == 0);
  json report = {{"runs", runs}, {"comparisons", json::array({cmp})}};
  const auto md = evidence::analysis_markdown(report);
  CHECK(md.find("## Comparison") != std::string::npos);
  CHECK(md.find("Critical path") != std::string::npos);
}

TEST_CASE("analyze: a broken timeline gets one error with file and JSON path", "[evidence][analyze]") {
  const json summary = {{"iteration_time_s", {{"per_iteration", {0.5, 0.5}}, {"warmup", 1}, {"mean", 0.5}}}};
  json timeline = {{"traceEvents", json::array({{{"ph", "X"}, {"cat", "forward"}, {"ts", 0}, {"args", {{"worker", 0}}}}})}};
  CHECK(error_of([&] { evidence::analyze_documents(summary, timeline, json::object(), "runs/a"); }) ==
        "runs/a/timeline.json: /traceEvents/0/dur: missing");
  CHECK(error_of([&] { evidence::analyze_documents(json::object(), timeline, json::object(), "runs/a"); }) ==
        "runs/a/summary.json: /iteration_time_s: missing");
  const json late = {{"iteration_time_s", {{"per_iteration", {0.5}}, {"warmup", 1}, {"mean", 0.5}}}};
  CHECK(error_of([&] { evidence::analyze_documents(late, timeline, json::object(), "runs/a"); }) ==
        "runs/a/summary.json: /iteration_time_s/warmup: 1 leaves no measured iteration of 1");
}
