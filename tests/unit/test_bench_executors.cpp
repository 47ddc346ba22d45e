// `wanlab bench --mode` with several executors: the mode list and crosscheck.json across
// lab, simulate and ns3.
#include <catch2/catch.hpp>

#include "bench_report.hpp"

using namespace wanlab::cli;
using nlohmann::json;

namespace {
json bench_of(const std::map<std::string, double>& times) {
  json variants = json::array();
  for (const auto& [name, t] : times) {
    const auto dash = name.find("-k");
    variants.push_back({{"name", name},
                        {"policy", name.substr(0, dash)},
                        {"connections", std::stoi(name.substr(dash + 2))},
                        {"placement", bench::kAtlasRule},
                        {"summary", {{"iteration_time_s", {{"mean", t}}}}}});
  }
  return {{"scenario", "s"}, {"variants", variants}, {"skipped", json::array()}};
}
}  // namespace

TEST_CASE("bench --mode: executors in a fixed order, both is lab and simulate", "[bench]") {
  CHECK(bench::parse_modes("lab") == std::vector<std::string>{"lab"});
  CHECK(bench::parse_modes("both") == std::vector<std::string>{"lab", "simulate"});
  CHECK(bench::parse_modes("ns3,simulate") == std::vector<std::string>{"simulate", "ns3"});
  CHECK(bench::parse_modes("simulate,ns3,lab,ns3") == std::vector<std::string>{"lab", "simulate", "ns3"});
  CHECK_THROWS_WITH(bench::parse_modes("simulate,ns2"), Catch::Contains("unknown executor 'ns2'"));
  CHECK_THROWS(bench::parse_modes(""));
  CHECK_THROWS(bench::parse_modes("simulate,"));
}

TEST_CASE("bench --mode simulate,ns3: errors against ns-3, the lab where ns-3 did not run", "[bench]") {
  std::map<std::string, json> benches;
  benches["simulate"] = bench_of({{"fair-k1", 1.1}, {"atlas-k1", 0.9}, {"fair-k4", 2.0}});
  benches["ns3"] = bench_of({{"fair-k1", 1.0}, {"atlas-k1", 1.0}});
  benches["lab"] = bench_of({{"fair-k4", 2.5}});
  const auto c = bench::crosscheck_executors(benches);
  CHECK(c["executors"] == json({"lab", "simulate", "ns3"}));
  std::map<std::string, json> rows;
  for (const auto& v : c["variants"]) rows[v["name"].get<std::string>()] = v;
  CHECK(rows["fair-k1"]["reference"] == "ns3");
  CHECK(rows["fair-k1"]["error"]["simulate"].get<double>() == Approx(0.1));
  CHECK(rows["atlas-k1"]["error"]["simulate"].get<double>() == Approx(-0.1));
  CHECK(rows["fair-k4"]["reference"] == "lab");
  CHECK(rows["fair-k4"]["error"]["simulate"].get<double>() == Approx(-0.2));
  CHECK(c["by_executor"]["simulate"]["ratios"]["atlas-k1/fair-k1"].get<double>() == Approx(0.9 / 1.1));
  CHECK(c["by_executor"]["ns3"]["ratios"]["atlas-k1/fair-k1"].get<double>() == Approx(1.0));
  CHECK(c["by_executor"]["simulate"]["max_abs_error"].get<double>() == Approx(0.2));
  const auto md = bench::crosscheck_executors_markdown(c);
  CHECK(md.find("| atlas-k1/fair-k1 | n/a | 0.818 | 1.000 |") != std::string::npos);
  CHECK(md.find("(reference)") != std::string::npos);
}
