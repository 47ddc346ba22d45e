// `wanlab bench` end to end: the shipped two-DC scenario (on a private copy of its lab)
// under policy fair with 1 and 2 connections plus the "DP across DCs" baseline: bench.json
// with finite ratios, bench.md, a run folder per variant and the SVG plots.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "process.hpp"
#include "temp_dir.hpp"

using namespace wanlab;
using test::run;
namespace fs = std::filesystem;

TEST_CASE("bench: two-dc-1b under fair with 1 and 2 connections and the DP-across-DCs baseline", "[bench]") {
  test::TempDir dir("bench");
  const fs::path src = WANLAB_SOURCE_DIR;
  // The shipped lab and scenario, the lab renamed so that a two-dc lab left up elsewhere is
  // neither used nor taken down.
  auto topo = nlohmann::json::parse(std::ifstream(src / "topologies/two-dc.json"));
  topo["name"] = "wlbench";
  const auto topo_file = dir.write("wlbench.json", topo.dump(2));
  auto scen = nlohmann::json::parse(std::ifstream(src / "bench/scenarios/two-dc-1b.json"));
  scen["topology"] = topo_file.string();
  const auto scen_file = dir.write("two-dc-1b.json", scen.dump(2));
  const auto out = dir.path() / "x";

  run(test::wanlab() + " down wlbench");
  const auto r = run(test::wanlab() + " bench " + scen_file.string() + " --policies fair --connections 1,2 --out " +
                     out.string() + " --quiet");
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(run(test::wanlab() + " status wlbench").code != 0);  // brought up for the bench, down again

  for (const char* f : {"bench.json", "bench.md", "plots/timelines.svg", "plots/windows.svg", "plots/timelines.gp",
                        "plots/windows.gp"}) {
    INFO(f);
    REQUIRE(fs::exists(out / f));
    CHECK(fs::file_size(out / f) > 100);
  }
  const auto bench = nlohmann::json::parse(std::ifstream(out / "bench.json"));
  CHECK(bench.at("baseline") == "fair-k1");
  CHECK(bench.at("scale") == 0.05);
  CHECK(bench.at("backend").get<std::string>().size() > 0);
  CHECK(bench.at("skipped").empty());
  std::vector<std::string> names;
  for (const auto& v : bench.at("variants")) {
    const auto name = v.at("name").get<std::string>();
    names.push_back(name);
    INFO(name);
    for (const char* f : {"summary.json", "timeline.json", "links.csv", "scenario.json"})
      CHECK(fs::exists(out / v.at("folder").get<std::string>() / f));
    CHECK(v.at("summary").at("iteration_time_s").at("mean").get<double>() > 0);
    REQUIRE(v.at("ratios").size() == 4);
    for (const auto& [k, x] : v.at("ratios").items()) {
      INFO(k << " = " << x.dump());
      REQUIRE(x.is_number());
      CHECK(std::isfinite(x.get<double>()));
      CHECK(x.get<double>() > 0);
    }
  }
  CHECK(names == std::vector<std::string>{"fair-k1", "fair-k2", "fair-k2-dp-across-dcs"});
  // The baseline against itself, and the placement override in the baseline's run.
  CHECK(bench.at("variants")[0].at("ratios").at("iteration_time_speedup").get<double>() == 1.0);
  const auto dp = nlohmann::json::parse(std::ifstream(out / "fair-k2-dp-across-dcs" / "scenario.json"));
  CHECK(dp.at("placement") == nlohmann::json::parse(R"([["use","use","euw","euw"],["use","use","euw","euw"]])"));

  std::ifstream md_file(out / "bench.md");
  const std::string md((std::istreambuf_iterator<char>(md_file)), std::istreambuf_iterator<char>());
  for (const auto& n : names) CHECK(md.find("| " + n) != std::string::npos);
  // The table on stdout too (a run the engine fell behind in is marked "(degraded)" after it).
  CHECK(r.out.find("| fair-k1 (baseline)") != std::string::npos);

  // The plots again from the folder alone.
  fs::remove(out / "plots/timelines.svg");
  const auto p = run(test::wanlab() + " bench --plots-only " + out.string());
  INFO(p.out);
  CHECK(p.code == 0);
  CHECK(fs::exists(out / "plots/timelines.svg"));
}

TEST_CASE("bench --repeat with a prefill load: every round runs on the lab's fresh agents", "[bench][prefill]") {
  // The agents of a run exit after it; a next run that came before they had gone once took
  // them for its own and failed when they left ("the agent of node ... went away").
  test::TempDir dir("bench-prefill");
  const auto topo_file = dir.write(
      "wlbpf.json",
      nlohmann::json{{"name", "wlbpf"},
                     {"dcs",
                      {{{"name", "use"}, {"nodes", 2}, {"gpus_per_node", 4}},
                       {{"name", "euw"}, {"nodes", 2}, {"gpus_per_node", 4}}}},
                     {"wan", {{{"between", {"use", "euw"}}, {"rtt", "20ms"}, {"rate", "200Mbit"}}}}}
          .dump(2));
  const nlohmann::json small = {{"layers", 4}, {"hidden", 2048}, {"heads", 16}, {"seq_len", 2048}, {"vocab", 32000}};
  const auto scen_file = dir.write(
      "wlbpf-scenario.json",
      nlohmann::json{{"name", "wlbpf"},
                     {"topology", topo_file.string()},
                     {"model", small},
                     {"parallelism", {{"pp", 2}, {"dp", 2}, {"tp", 4}}},
                     {"schedule", "1f1b"},
                     {"micro_batches", 4},
                     {"iterations", 3},
                     {"warmup", 1},
                     {"connections", 2},
                     {"scale", 0.1},
                     {"prefill",
                      {{"model", small},
                       {"rate_per_s", 1000},
                       {"prompt_tokens", 1024},
                       {"deadline_s", 1},
                       {"loadgen", "use-0"},
                       {"decode", {"use-1", "euw-1"}},
                       {"scale", 0.01}}}}
          .dump(2));
  const auto out = dir.path() / "x";
  run(test::wanlab() + " down wlbpf");
  const auto r = run(test::wanlab() + " bench " + scen_file.string() +
                     " --policies fair --connections 2 --no-placement-baseline --repeat 2 --out " + out.string() +
                     " --quiet");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const auto bench = nlohmann::json::parse(std::ifstream(out / "bench.json"));
  CHECK(bench.at("skipped").empty());
  REQUIRE(bench.at("variants").size() == 2);
  CHECK(bench.at("variants")[0].at("name") == "fair-k2-training-only");
  const auto& with = bench.at("variants")[1];
  CHECK(with.at("name") == "fair-k2");
  for (const auto& v : bench.at("variants")) CHECK(v.at("repeat").at("iteration_time_s").at("runs") == 2);
  // Each run's steal, and every attempt's (at most three: --max-steal's default, 5 %, runs
  // one again when a cloud VM's hypervisor took more).
  for (const auto& v : bench.at("variants"))
    for (const auto& run_entry : v.at("runs")) {
      const auto& attempts = run_entry.at("attempts");
      REQUIRE(!attempts.empty());
      CHECK(attempts.size() <= 3);
      for (const auto& f : attempts) CHECK((f.get<double>() >= 0 && f.get<double>() < 1));
      CHECK(run_entry.at("steal_fraction") == attempts.back());
      for (std::size_t k = 0; k + 1 < attempts.size(); ++k) CHECK(attempts[k].get<double>() > 0.05);
    }
  // The slowdown over the rounds, each against its twin.
  const auto& slowdown = with.at("repeat").at("training_slowdown");
  CHECK(slowdown.at("pairs") == 2);
  CHECK(slowdown.at("ci95").size() == 2);
  CHECK(std::isfinite(slowdown.at("mean").get<double>()));
}
