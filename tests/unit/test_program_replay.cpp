// A scenario's `programs`: worker programs from a file (import-trace's import.json) replayed
// in place of the model's, and the one error a malformed programs file gets.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <functional>

#include "temp_dir.hpp"
#include "wanlab/evidence/card.hpp"
#include "wanlab/evidence/trace_import.hpp"
#include "wanlab/sim/rescale.hpp"
#include "wanlab/sim/simulator.hpp"
#include "wanlab/workload/gpu.hpp"
#include "wanlab/workload/metrics.hpp"
#include "wanlab/workload/plan.hpp"
#include "wanlab/workload/program_file.hpp"
#include "wanlab/workload/scenario.hpp"

using namespace wanlab;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kSource = WANLAB_SOURCE_DIR;

std::string config_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const core::ConfigError& e) {
    std::string out;
    for (const auto& d : e.diagnostics()) out += (out.empty() ? "" : "\n") + d.to_string();
    return out;
  }
  return "(no error)";
}

// The shipped two-stage trace, imported as `wanlab import-trace` does it.
evidence::ImportedJob shipped_job() {
  const std::string d = kSource + "/traces/pytorch/two-stage-gloo/";
  evidence::ImportOptions o;
  o.effective_flops = workload::effective_flops("H100", workload::Dtype::bf16, 0.4);
  o.message_bytes = 32 * 512 * 4;
  return evidence::import_pytorch_traces({d + "rank0.json", d + "rank1.json"}, o);
}

json scenario_doc(const fs::path& programs) {
  return {{"name", "replay"},
          {"topology", kSource + "/topologies/two-dc.json"},
          {"programs", programs.string()},
          {"iterations", 4},
          {"warmup", 1}};
}

// Two workers: 0 computes, sends 1000 bytes to 1 (tag 0); 1 receives them and computes.
json two_programs() {
  const json fwd = {{"kind", "forward"}, {"flops", 1e12}};
  const json send_op = {{"kind", "send"}, {"peer", 1}, {"bytes", 1000}, {"tag", 0}};
  const json recv_op = {{"kind", "recv"}, {"peer", 0}, {"bytes", 1000}, {"tag", 0}};
  json p0 = {{"worker", 0}, {"ops", json::array({fwd, send_op})}};
  json p1 = {{"worker", 1}, {"ops", json::array({recv_op, fwd})}};
  return {{"programs", json::array({p0, p1})}};
}

}  // namespace

TEST_CASE("programs: a scenario replays import-trace's programs in the simulator as import-trace does",
          "[evidence][programs]") {
  const test::TempDir tmp("programs");
  const auto job = shipped_job();
  const auto file = tmp.write("import.json", job.to_json().dump(2));
  auto doc = scenario_doc(file);
  doc["placement"] = json::array({json::array({"use"}), json::array({"use"})});
  const auto s = workload::parse_scenario(doc, "replay.json", tmp.path());
  REQUIRE(s.programs.size() == 2);
  CHECK(s.parallelism == workload::Parallelism{2, 1, 1});
  REQUIRE(s.programs_effective_flops);
  CHECK(*s.programs_effective_flops == Approx(job.effective_flops));

  const auto topo = core::load_topology(s.topology_path);
  const auto plan = workload::build_plan(s, topo);
  REQUIRE(plan.programs.size() == 2);
  CHECK(plan.programs[0].ops == job.programs[0].ops);  // scale 1: as imported
  CHECK(plan.workers[0].dc == plan.workers[1].dc);
  const auto summary = workload::summarize(plan, sim::simulate(plan).by_worker());
  const double predicted = summary["iteration_time_s"]["mean"].get<double>();
  INFO(fmt::format("predicted {:.4f} s, measured {:.4f} s", predicted, job.measured_iteration_mean_s));
  CHECK(std::abs(predicted / job.measured_iteration_mean_s - 1) < 0.10);

  // The same as import-trace's own replay plan.
  const auto direct = evidence::replay_plan(job, topo, {"use", "use"}, job.effective_flops, 4, 1);
  const auto direct_summary = workload::summarize(direct, sim::simulate(direct).by_worker());
  CHECK(direct_summary["iteration_time_s"]["mean"].get<double>() == Approx(predicted).epsilon(1e-9));

  // Without a placement rank r runs in DC r mod 2: across the WAN, slower.
  const auto wan = workload::build_plan(workload::parse_scenario(scenario_doc(file), "replay.json", tmp.path()), topo);
  CHECK(wan.workers[0].dc != wan.workers[1].dc);
  CHECK(workload::summarize(wan, sim::simulate(wan).by_worker())["iteration_time_s"]["mean"].get<double>() > predicted);

  // The canonical form names the programs and no model, and reads back the same.
  const auto canon = workload::to_json(s);
  CHECK(canon.at("programs") == file.string());
  CHECK_FALSE(canon.contains("model"));
  const auto again = workload::parse_scenario(canon, "canon.json", tmp.path());
  CHECK(again.programs == s.programs);
  CHECK(again.placement == s.placement);
}

TEST_CASE("programs: bytes scale with the scenario, compute runs at the file's FLOP/s or the GPU's",
          "[evidence][programs]") {
  const test::TempDir tmp("programs-scale");
  const auto file = tmp.write("p.json", two_programs().dump());
  auto doc = scenario_doc(file);
  doc["scale"] = 0.5;
  const auto s = workload::parse_scenario(doc, "s.json", tmp.path());
  const auto plan = workload::build_plan(s, core::load_topology(s.topology_path));
  CHECK(plan.programs[0].ops[1].bytes == 500);
  CHECK(plan.programs[1].ops[0].bytes == 500);
  // No gpu.mfu in the scenario: the GPU table's default.
  CHECK(plan.effective_flops[0] == Approx(workload::effective_flops("H100", workload::Dtype::bf16, std::nullopt)));
  CHECK(plan.wan_bytes_per_iteration.size() == 1);
  auto with_rate = two_programs();
  with_rate["effective_flops"] = 1e12;
  const auto f2 = tmp.write("q.json", with_rate.dump());
  const auto s2 = workload::parse_scenario(scenario_doc(f2), "s.json", tmp.path());
  CHECK(workload::build_plan(s2, core::load_topology(s2.topology_path)).effective_flops[1] == 1e12);
}

TEST_CASE("programs: a malformed programs file or scenario is one error with the file, the JSON path and the reason",
          "[evidence][programs]") {
  const test::TempDir tmp("programs-bad");
  const auto error = [&](const json& programs, json doc_extra = json::object()) {
    const auto file = tmp.write("bad.json", programs.dump());
    auto doc = scenario_doc(file);
    for (const auto& [k, v] : doc_extra.items()) doc[k] = v;
    return config_error([&] {
      const auto s = workload::parse_scenario(doc, "s.json", tmp.path());
      (void)workload::build_plan(s, core::load_topology(s.topology_path));
    });
  };
  const std::string f = (tmp.path() / "bad.json").string();
  auto p = two_programs();
  p["programs"][0]["ops"][0]["kind"] = "broadcast";
  CHECK(error(p) == fmt::format("s.json: /programs: {}: /programs/0/ops/0/kind: unknown op kind \"broadcast\"; known: "
                                "forward, backward, optimizer, send, recv, allreduce",
                                f));
  p = two_programs();
  p["programs"][1]["ops"][0]["tag"] = 3;
  const auto unmatched = error(p);
  CHECK(unmatched.find(f + ": /programs/0/ops/1: worker 0 sends worker 1 tag 0, which worker 1 never receives") !=
        std::string::npos);
  CHECK(unmatched.find(f + ": /programs/1/ops/0: worker 1 waits for tag 3 from worker 0") != std::string::npos);
  p = two_programs();
  p["programs"][1]["ops"][0]["bytes"] = 999;
  CHECK(error(p) == fmt::format("s.json: /programs: {}: /programs/1/ops/0/bytes: 999: its send (/programs/0/ops/1) "
                                "carries 1000 bytes",
                                f));
  p = two_programs();
  p["programs"][0]["ops"][1]["peer"] = 5;
  CHECK(error(p).find(f + ": /programs/0/ops/1/peer: 5: not another of the 2 workers (0..1)") != std::string::npos);
  p = two_programs();
  p["programs"][0]["ops"].push_back({{"kind", "allreduce"}, {"bytes", 8}, {"ring", {0, 1}}});
  CHECK(error(p) == fmt::format("s.json: /programs: {}: /programs/0/ops/2: worker 0 runs 1 all-reduces over ring "
                                "[0, 1], worker 1 runs 0: every member runs each of them",
                                f));
  p = two_programs();
  p["programs"][1]["worker"] = 0;
  CHECK(error(p) == fmt::format("s.json: /programs: {}: /programs/1/worker: 0: program 1 must be worker 1 (programs in "
                                "worker order)",
                                f));
  CHECK(error(json{{"ranks", 2}}) == fmt::format("s.json: /programs: {}: /programs: missing: the worker programs, one "
                                                 "per GPU (as `wanlab import-trace` writes them in import.json)",
                                                 f));
  // The scenario: a parallelism other than the programs', and more workers than GPUs.
  CHECK(error(two_programs(), {{"parallelism", {{"pp", 1}, {"dp", 2}, {"tp", 1}}}}) ==
        "s.json: /parallelism: pp 1, dp 2, tp 1: the programs are 2 workers, replayed as pp 2, dp 1, tp 1; leave "
        "parallelism out");
  json many = {{"programs", json::array()}};
  for (int w = 0; w < 40; ++w) {
    json op = {{"kind", "forward"}, {"flops", 1}};
    many["programs"].push_back({{"worker", w}, {"ops", json::array({op})}});
  }
  CHECK(error(many) == fmt::format("s.json: /programs: {}: 40 workers, but topology two-dc has 32 GPUs", f));
  CHECK(error(two_programs(), {{"placement", {{"use"}, {"mars"}}}}).find("s.json: /placement/1/0: unknown DC \"mars\"") !=
        std::string::npos);
}

TEST_CASE("import: a trace that is not JSON is one error with the file, byte, line and column", "[evidence][programs]") {
  const test::TempDir tmp("programs-notjson");
  const auto f = tmp.write("rank0.json", "{\"traceEvents\": [\n  {\"name\": \"x\",\n   \"ph\": X}\n]}\n");
  std::string e;
  try {
    (void)evidence::import_pytorch_traces({f}, {});
  } catch (const evidence::EvidenceError& x) {
    e = x.what();
  }
  INFO(e);
  CHECK(e.starts_with(f.string() + ": byte "));
  CHECK(e.find(": not JSON: ") != std::string::npos);
  CHECK(e.find("line 3, column ") != std::string::npos);
}

TEST_CASE("programs: an imported job keeps its worker count (simulate --gpus refuses it)", "[evidence][programs]") {
  const test::TempDir tmp("programs-gpus");
  const auto file = tmp.write("p.json", two_programs().dump());
  auto s = workload::parse_scenario(scenario_doc(file), "s.json", tmp.path());
  const auto topo = core::load_topology(s.topology_path);
  std::string e;
  try {
    (void)sim::rescale_gpus(s, topo, 4);
  } catch (const std::invalid_argument& x) {
    e = x.what();
  }
  CHECK(e == fmt::format("the scenario replays the 2 workers of {} (`programs`): an imported job keeps its own worker "
                         "count",
                         file.string()));
  s.parallelism.dp = 2;  // as a rescale would leave it
  CHECK(config_error([&] { (void)workload::build_plan(s, topo); }) ==
        "s.json: /parallelism: pp 2, dp 2, tp 1: the programs are 2 workers, replayed as pp 2, dp 1, tp 1");
}
