// An imported job through a real lab: `wanlab import-trace` turns the shipped PyTorch
// profiler trace (traces/pytorch/two-stage-gloo) into programs, a scenario's `programs` key
// replays them with agents over the emulated network, and the lab's iteration time is
// checked against the trace's measured one (both ranks in one DC, where it was measured)
// and against the simulator's prediction for the same scenario (across a WAN link).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "process.hpp"

using namespace wanlab;
using test::run;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

fs::path tmp(const std::string& name) { return fs::temp_directory_path() / name; }

json read_json(const fs::path& p) {
  std::ifstream f(p);
  return json::parse(f);
}

fs::path write_json(const std::string& name, const json& doc) {
  const auto p = tmp(name);
  std::ofstream(p) << doc.dump(2);
  return p;
}

double lab_iteration(const fs::path& scenario, const fs::path& out) {
  fs::remove_all(out);
  const auto r = run(test::wanlab() + " run " + scenario.string() + " --out " + out.string() + " --quiet");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const auto s = read_json(out / "summary.json");
  CHECK(fs::exists(out / "card.yaml"));
  return s.at("iteration_time_s").at("mean").get<double>();
}

}  // namespace

TEST_CASE("an imported PyTorch job replays through a lab: as measured in one DC, as simulated across the WAN",
          "[evidence][programs][lab]") {
  const std::string src = WANLAB_SOURCE_DIR;
  const auto topo = write_json("evrep.json", {{"name", "evrep"},
                                              {"dcs",
                                               {{{"name", "use"}, {"nodes", 1}, {"gpus_per_node", 2}},
                                                {{"name", "euw"}, {"nodes", 1}, {"gpus_per_node", 2}}}},
                                              {"wan", {{{"between", {"use", "euw"}}, {"rtt", "20ms"}, {"rate", "200Mbit"}}}}});
  const auto imp = tmp("evrep-import");
  fs::remove_all(imp);
  const auto r = run(test::wanlab() + " import-trace " + src + "/traces/pytorch/two-stage-gloo/rank0.json " + src +
                     "/traces/pytorch/two-stage-gloo/rank1.json --topology " + topo.string() +
                     " --message-bytes 65536 --no-simulate --out " + imp.string());
  INFO(r.out);
  REQUIRE(r.code == 0);
  const double measured = read_json(imp / "import.json").at("measured_iteration_s").at("mean").get<double>();
  REQUIRE(measured > 0);

  json scen = {{"name", "evrep"},
               {"topology", topo.string()},
               {"programs", (imp / "import.json").string()},
               {"iterations", 5},
               {"warmup", 1}};
  // Both ranks in one DC, as the job ran: the lab's iteration is the trace's.
  auto local = scen;
  local["placement"] = json::array({json::array({"use"}), json::array({"use"})});
  const double lab_local = lab_iteration(write_json("evrep-local.json", local), tmp("evrep-local-out"));
  INFO("measured " << measured << " s, lab (one DC) " << lab_local << " s");
  CHECK(std::abs(lab_local / measured - 1) < 0.25);

  // Rank r in DC r mod 2: every message crosses the 20 ms link; the lab agrees with the simulator.
  const auto wan = write_json("evrep-wan.json", scen);
  const double lab_wan = lab_iteration(wan, tmp("evrep-wan-out"));
  const auto sim_out = tmp("evrep-wan-sim");
  fs::remove_all(sim_out);
  const auto s = run(test::wanlab() + " simulate " + wan.string() +
                     " --policies fair --connections 1 --no-placement-baseline --quiet --out " + sim_out.string());
  INFO(s.out);
  REQUIRE(s.code == 0);
  double sim_wan = 0;
  for (const auto& e : fs::recursive_directory_iterator(sim_out))
    if (e.path().filename() == "summary.json") sim_wan = read_json(e.path()).at("iteration_time_s").at("mean").get<double>();
  INFO("lab (across the WAN) " << lab_wan << " s, simulated " << sim_wan << " s");
  REQUIRE(sim_wan > 0);
  CHECK(lab_wan > lab_local + 0.02);  // at least a round trip more
  CHECK(std::abs(lab_wan / sim_wan - 1) < 0.15);
  for (const auto& p : {imp, tmp("evrep-local-out"), tmp("evrep-wan-out"), sim_out}) fs::remove_all(p);
}
