// `wanlab memory`: the shared memory model's figures per scenario file, as bench/paper.py
// and bench/paper_scale.py pick plans by them (memory_command.hpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "memory_command.hpp"
#include "test_workload_fixtures.hpp"
#include "wanlab/common/program.hpp"
#include "wanlab/workload/baselines.hpp"
#include "wanlab/workload/cost.hpp"
#include "wanlab/workload/memory.hpp"

using namespace wanlab;
using namespace wanlab::workload;
using namespace wanlab::workload::testing;
namespace fs = std::filesystem;

namespace {

// paper_scale.py's scenario: `model` with one 1F1B stage per DC of two-dc, TP 8.
nlohmann::json two_dc(const std::string& model, int pp) {
  nlohmann::json placement = nlohmann::json::array();
  for (int s = 0; s < pp; ++s) placement.push_back({s < pp / 2 ? "use" : "euw"});
  return {{"name", "m"},
          {"topology", kSource + "/topologies/two-dc.json"},
          {"model", model},
          {"parallelism", {{"pp", pp}, {"dp", 1}, {"tp", 8}}},
          {"schedule", "1f1b"},
          {"micro_batches", 16},
          {"iterations", 2},
          {"placement", placement}};
}

fs::path write(const fs::path& dir, const std::string& name, const nlohmann::json& doc) {
  const auto f = dir / name;
  std::ofstream(f) << doc.dump(2);
  return f;
}

}  // namespace

TEST_CASE("memory command: the figures are the workload model's, per stage and for the fullest",
          "[unit][cli][memory]") {
  const auto s = parse_scenario(two_dc("70b", 2), "m.json", kSource);
  const auto topo = core::load_topology(s.topology_path);
  const auto j = cli::memory_report(s, topo);
  // 70B on two stages of TP 8 with 16 micro-batches: paper_scale.py's case that is refused.
  CHECK_FALSE(j["fits"].get<bool>());
  const auto need = stage_memory(s);
  REQUIRE(j["stages"].size() == need.size());
  double most = 0;
  for (std::size_t i = 0; i < need.size(); ++i) {
    const auto& st = j["stages"][i];
    CHECK(st["needed_gib"].get<double>() == Approx(static_cast<double>(need[i].needed()) / kGiB));
    CHECK(st["activations_gib"].get<double>() == Approx(static_cast<double>(need[i].activations) / kGiB));
    CHECK(st["in_flight"] == need[i].peak_in_flight);
    CHECK(st["gpu"] == "H100");
    CHECK(st["available_gib"].get<double>() == Approx(80));
    most = std::max(most, st["needed_gib"].get<double>());
  }
  // Each stage's shape and FLOPs are the cost model's (what bench/gpu_check.sh probes).
  const auto costs = stage_costs(s.model, s.parallelism, s.micro_batch_size, stage_layers(s));
  REQUIRE(costs.size() == j["stages"].size());
  for (std::size_t i = 0; i < costs.size(); ++i) {
    const auto& st = j["stages"][i];
    CHECK(program::stage_shape_from_json(st["shape"]) == costs[i].shape);
    CHECK(st["forward_flops"].get<double>() == costs[i].forward_flops);
    CHECK(st["backward_flops"].get<double>() == costs[i].backward_flops);
  }
  CHECK(j["stages"][1]["shape"]["vocab"] == s.model.vocab);  // the LM head is on the last stage
  CHECK(j["stages"][0]["shape"]["vocab"] == 0);
  CHECK(j["needed_gib"].get<double>() == Approx(most));
  CHECK(j["needed_gib"].get<double>() > 80);
  // The same model fits on four stages, or on two with recomputation (what paper_scale.py runs).
  const auto four = parse_scenario(two_dc("70b", 4), "m.json", kSource);
  CHECK(cli::memory_report(four, topo)["fits"].get<bool>());
  auto rc_doc = two_dc("70b", 2);
  rc_doc["memory"] = {{"recompute", true}};
  CHECK(cli::memory_report(parse_scenario(rc_doc, "m.json", kSource), topo)["fits"].get<bool>());
  // Varuna's plan of a 7B scenario: GPipe with recomputation, as simulate runs it.
  const auto v = baseline_scenario(kVaruna, parse_scenario(two_dc("7b", 2), "m.json", kSource), topo);
  const auto vj = cli::memory_report(v, topo);
  CHECK(vj["schedule"] == "gpipe");
  CHECK(vj["recompute"].get<bool>());
  CHECK(vj["stages"][0]["in_flight"] == v.micro_batches);
}

TEST_CASE("memory command: exit status 0 fits, 1 does not, 2 bad input", "[unit][cli][memory]") {
  std::string tmpl = (fs::temp_directory_path() / "wanlab-memory-XXXXXX").string();
  REQUIRE(::mkdtemp(tmpl.data()));
  const fs::path dir = tmpl;
  const auto fits = write(dir, "fits.json", two_dc("7b", 2));
  const auto big = write(dir, "big.json", two_dc("70b", 2));
  auto bad_doc = two_dc("7b", 2);
  bad_doc["parallelism"]["pp"] = "two";
  const auto bad = write(dir, "bad.json", bad_doc);
  CHECK(cli::cmd_memory({{fits.string()}, std::nullopt, true}) == 0);
  CHECK(cli::cmd_memory({{fits.string(), big.string()}, std::nullopt, false}) == 1);
  CHECK(cli::cmd_memory({{bad.string()}, std::nullopt, true}) == 2);
  CHECK(cli::cmd_memory({{(dir / "missing.json").string()}, std::nullopt, true}) == 2);
  CHECK(cli::cmd_memory({{fits.string()}, std::string(kVaruna), true}) == 0);
  fs::remove_all(dir);
}
