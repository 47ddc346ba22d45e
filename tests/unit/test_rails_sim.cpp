// Photonic rails in the simulator (sim/rails.hpp, docs/rails.md): packet rails are each
// GPU's port on its rail, OCS circuits pass only their phase's traffic, reconfiguration
// costs its latency on the simulated clock, and bad rail policies get one error each.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "process.hpp"
#include "test_workload_fixtures.hpp"
#include "wanlab/core/fabric_cost.hpp"
#include "wanlab/core/diagnostics.hpp"
#include "wanlab/sim/simulator.hpp"
#include "wanlab/workload/plan.hpp"

using namespace wanlab;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

// One DC "a" of `nodes` nodes x 2 GPUs with `fabric` (null: the plain LAN at `lan_rate`).
core::Topology rails_lab(int nodes, const json& fabric, const std::string& lan_rate = "") {
  json dc{{"name", "a"}, {"nodes", nodes}, {"gpus_per_node", 2}};
  if (!fabric.is_null()) dc["fabric"] = fabric;
  json doc{{"name", "r"}, {"dcs", json::array({dc})}};
  if (!lan_rate.empty()) doc["lan"] = {{"rate", lan_rate}};
  return core::parse_topology(doc, "r.json", {});
}

json ocs(const std::string& latency) {
  return {{"type", "rails"}, {"switching", "ocs"}, {"port_rate", "10Gbit"}, {"reconfiguration", latency}};
}

// PP 2 x DP 2 x TP 2 on 4 nodes: stage 0 on nodes 0 and 1, stage 1 on nodes 2 and 3.
workload::Scenario pp_dp(int pp = 2, int dp = 2) {
  auto s = workload::testing::scenario(pp, dp, 2, 4);
  s.iterations = 2;
  s.warmup = 0;
  return s;
}

sim::SimResult run(const workload::Scenario& s, const core::Topology& t) {
  return sim::simulate(workload::build_plan(s, t));
}

std::vector<core::Diagnostic> config_errors(const workload::Scenario& s, const core::Topology& t) {
  try {
    run(s, t);
  } catch (const core::ConfigError& e) {
    return e.diagnostics();
  }
  FAIL("expected a ConfigError");
  return {};
}

}  // namespace

TEST_CASE("rails: packet rails are each GPU's port, as a node LAN of GPUs x the port rate", "[rails][sim]") {
  const auto s = pp_dp();
  const auto lan = run(s, rails_lab(4, nullptr, "20Gbit"));
  const auto rails = run(s, rails_lab(4, {{"type", "rails"}, {"switching", "packet"}, {"port_rate", "10Gbit"}}));
  CHECK(rails.end_ns() == lan.end_ns());
  REQUIRE(rails.rails.size() == 1);
  CHECK_FALSE(rails.rails[0].circuits);
  CHECK(rails.rails[0].reconfigurations == 0);
  CHECK(lan.rails.empty());
  // Slower ports, longer run: the rails carry the traffic.
  const auto slow = run(s, rails_lab(4, {{"type", "rails"}, {"switching", "packet"}, {"port_rate", "1Gbit"}}));
  CHECK(slow.end_ns() > rails.end_ns());
}

TEST_CASE("rails: the packet policy runs OCS rails as electrical ones", "[rails][sim]") {
  auto s = pp_dp();
  s.rails = workload::RailsSpec{"packet", {}};
  const auto packet = run(s, rails_lab(4, {{"type", "rails"}, {"switching", "packet"}, {"port_rate", "10Gbit"}}));
  const auto as_packet = run(s, rails_lab(4, ocs("10ms")));
  CHECK(as_packet.end_ns() == packet.end_ns());
  CHECK(as_packet.rails[0].policy == "packet");
  CHECK(as_packet.rails[0].reconfigurations == 0);
}

TEST_CASE("rails: phase switches circuits at phase boundaries, each switch taking its latency", "[rails][sim]") {
  const auto s = pp_dp();
  const auto packet = run(s, rails_lab(4, {{"type", "rails"}, {"switching", "packet"}, {"port_rate", "10Gbit"}}));
  const auto fast = run(s, rails_lab(4, ocs("10us")));
  const auto slow = run(s, rails_lab(4, ocs("5ms")));
  REQUIRE(fast.rails.size() == 1);
  const auto& st = slow.rails[0];
  CHECK(st.policy == "phase");
  CHECK(st.circuits);
  CHECK(st.phases == std::vector<std::string>{"pp-forward", "pp-backward", "dp-allreduce"});
  CHECK(st.reconfigurations > 0);
  CHECK(st.reconfiguring_ns == st.reconfigurations * 5'000'000LL);
  CHECK(st.held > 0);
  CHECK(fast.end_ns() >= packet.end_ns());
  CHECK(slow.end_ns() > fast.end_ns());
  // Every switch beyond what overlaps compute shows on the clock: at least one per
  // iteration (to the all-reduce's ring and back) is never hidden.
  CHECK(slow.end_ns() - fast.end_ns() >= 2 * 5'000'000LL);
}

TEST_CASE("rails: static keeps the DP ring's circuits, exactly packet rails for a DP-only run", "[rails][sim]") {
  auto s = pp_dp(1, 4);
  s.rails = workload::RailsSpec{"static", {}};
  const auto st = run(s, rails_lab(4, ocs("25ms")));
  const auto packet =
      run(pp_dp(1, 4), rails_lab(4, {{"type", "rails"}, {"switching", "packet"}, {"port_rate", "10Gbit"}}));
  CHECK(st.end_ns() == packet.end_ns());
  CHECK(st.rails[0].reconfigurations == 0);
  CHECK(st.rails[0].held == 0);
  CHECK(st.rails[0].phases == std::vector<std::string>{"dp-allreduce"});
}

TEST_CASE("rails: static with pipeline sends across the rails is one error", "[rails][sim]") {
  auto s = pp_dp();
  s.rails = workload::RailsSpec{"static", {}};
  const auto ds = config_errors(s, rails_lab(4, ocs("10ms")));
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].file == "t-scenario.json");
  CHECK(ds[0].path == "/rails/policy");
  CHECK_THAT(ds[0].reason, Contains("pp-forward, pp-backward") && Contains("use phase or packet"));
}

TEST_CASE("rails: a policy naming a phase the program lacks is one error", "[rails][sim]") {
  auto s = pp_dp(1, 4);  // no pipeline
  s.rails = workload::RailsSpec{"phase", {"dp-allreduce", "pp-forward"}};
  const auto ds = config_errors(s, rails_lab(4, ocs("10ms")));
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].path == "/rails/phases/1");
  CHECK_THAT(ds[0].reason, Contains("no pp-forward traffic") && Contains("dp-allreduce"));
}

TEST_CASE("rails: a phase list leaving out a phase the rails carry is one error", "[rails][sim]") {
  auto s = pp_dp();
  s.rails = workload::RailsSpec{"phase", {"pp-forward", "pp-backward"}};
  const auto ds = config_errors(s, rails_lab(4, ocs("10ms")));
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].path == "/rails/phases");
  CHECK_THAT(ds[0].reason, Contains("dp-allreduce"));
}

TEST_CASE("rails: a circuit policy on a topology without OCS rails is one error", "[rails][sim]") {
  auto s = pp_dp();
  s.rails = workload::RailsSpec{"phase", {}};
  const auto ds = config_errors(s, rails_lab(4, {{"type", "rails"}, {"switching", "packet"}, {"port_rate", "10Gbit"}}));
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].path == "/rails/policy");
}

TEST_CASE("rails: the scenario's rails field parses and refuses bad policies", "[rails][scenario]") {
  json doc{{"name", "s"},        {"topology", workload::testing::kSource + "/topologies/two-dc.json"},
           {"model", "1.3b"},    {"parallelism", {{"pp", 1}, {"dp", 1}, {"tp", 1}}},
           {"micro_batches", 1}, {"iterations", 1},
           {"schedule", "1f1b"}};
  const auto parse = [&](const json& rails) {
    auto d = doc;
    d["rails"] = rails;
    return workload::parse_scenario(d, "s.json", {});
  };
  const auto ok = parse({{"policy", "phase"}, {"phases", {"dp-allreduce"}}});
  REQUIRE(ok.rails);
  CHECK(ok.rails->policy == "phase");
  CHECK(ok.rails->phases == std::vector<std::string>{"dp-allreduce"});
  CHECK(workload::parse_scenario(workload::to_json(ok), "s.json", {}).rails == ok.rails);
  const auto errors = [&](const json& rails) {
    try {
      parse(rails);
    } catch (const core::ConfigError& e) {
      return e.diagnostics();
    }
    return std::vector<core::Diagnostic>{};
  };
  auto ds = errors({{"policy", "optical"}});
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].path == "/rails/policy");
  ds = errors({{"policy", "static"}, {"phases", {"dp-allreduce"}}});
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].path == "/rails/phases");
  ds = errors({{"phases", {"dp-allreduce", "dp-allreduce"}}});
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].path == "/rails/phases/1");
  ds = errors({{"phases", {"tp"}}});
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].path == "/rails/phases/0");
}

TEST_CASE("rails: summary.json's rails: reconfigurations, switching time and the bill", "[rails][sim]") {
  auto s = pp_dp();
  s.rails = workload::RailsSpec{"phase", {}};
  const auto topo = rails_lab(4, ocs("1ms"));
  const auto plan = workload::build_plan(s, topo);
  const auto r = sim::simulate(plan);
  REQUIRE(r.rails.size() == 1);
  const auto& st = r.rails[0];
  REQUIRE(st.reconfigurations > 0);
  const auto j = sim::rails_json(topo, plan, r);
  REQUIRE(j.is_array());
  REQUIRE(j.size() == 1);
  const auto& d = j[0];
  CHECK(d["dc"] == "a");
  CHECK(d["fabric"] == core::to_string(topo.dcs[0].fabric));
  CHECK(d["policy"] == "phase");
  CHECK(d["circuits"] == true);
  CHECK(d["reconfigurations"] == st.reconfigurations);
  CHECK(d["reconfigurations_per_iteration"].get<double>() == Approx(st.reconfigurations / 2.0));  // 2 iterations
  CHECK(d["reconfiguring_s"].get<double>() == Approx(static_cast<double>(st.reconfiguring_ns) / 1e9));
  CHECK(d["reconfiguring_s"].get<double>() >= st.reconfigurations * 1e-3 * (1 - 1e-9));  // 1 ms a switch at least
  CHECK(d["reconfiguring_fraction"].get<double>() ==
        Approx(d["reconfiguring_s"].get<double>() / (static_cast<double>(r.end_ns()) / 1e9)));
  CHECK(d["held_transfers"] == st.held);
  const auto bill = core::rails_bill(topo.dcs[0]);
  CHECK(d["bill"]["endpoints"] == 8);  // 4 nodes x 2 GPUs
  CHECK(d["bill"]["packet"]["power_w"].get<double>() == Approx(bill.packet.power_w));
  CHECK(d["bill"]["ocs"]["cost_usd"].get<double>() == Approx(bill.ocs.cost_usd));
  CHECK(d["bill"]["power_ratio"].get<double>() == Approx(bill.power_ratio()));
  CHECK(bill.power_ratio() > 0);  // (at 10 Gbit/s ports the OCS saves no power: mirrors do not scale down)

  // No rails: nothing (summary.json keeps no "rails").
  const auto lan = rails_lab(4, nullptr, "20Gbit");
  const auto lan_plan = workload::build_plan(pp_dp(), lan);
  CHECK(sim::rails_json(lan, lan_plan, sim::simulate(lan_plan)).is_null());
}

TEST_CASE("rails: simulate --rails-policy and --rails-latency, into summary.json and bench.md", "[rails][cli]") {
  const std::string scenario = std::string(WANLAB_SOURCE_DIR) + "/bench/scenarios/rails/rails-13b.json";
  const auto out = std::filesystem::temp_directory_path() / ("wanlab-test-rails-" + std::to_string(::getpid()));
  std::filesystem::remove_all(out);
  const std::string base = test::wanlab() + " simulate " + scenario +
                           " --policies fair --connections 1 --no-placement-baseline --no-sensitivity --quiet";
  // One error each, naming the flag.
  auto r = test::run(base + " --rails-policy mirrors --out " + (out / "bad").string());
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Contains("--rails-policy: 'mirrors' is not a rail policy: "));
  r = test::run(base + " --rails-latency=-1ms --out " + (out / "bad").string());
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Contains("--rails-latency: '-1ms' is negative"));
  r = test::run(base + " --rails-latency 2s --out " + (out / "bad").string());
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Contains("--rails-latency: 2s is longer than 1s"));
  r = test::run(test::wanlab() + " simulate " + WANLAB_SOURCE_DIR + "/bench/scenarios/two-dc-1b.json --rails-policy phase --out " +
                (out / "bad").string());
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Contains("--rails-policy: topology two-dc") && Contains("has no DC with OCS rails"));
  CHECK_FALSE(std::filesystem::exists(out / "bad"));

  // phase at 10 us against packet rails: the first switches circuits, the second never.
  const auto summary_rails = [&](const std::string& flags, const std::string& name) {
    const auto folder = out / name;
    const auto run = test::run(base + " " + flags + " --out " + folder.string());
    INFO(run.out);
    REQUIRE(run.code == 0);
    std::ifstream md(folder / "bench.md");
    const std::string text((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
    CHECK_THAT(text, Contains("| power packet / OCS (kW) |"));
    return json::parse(std::ifstream(folder / "fair-k1" / "summary.json")).at("rails").at(0);
  };
  const auto phase = summary_rails("--rails-policy phase --rails-latency 10us", "phase");
  const auto packet = summary_rails("--rails-policy packet", "packet");
  CHECK(phase["policy"] == "phase");
  CHECK(phase["reconfigurations"].get<int>() > 0);
  CHECK(phase["reconfiguring_s"].get<double>() ==
        Approx(phase["reconfigurations"].get<double>() * 10e-6).epsilon(1e-6));
  CHECK(packet["policy"] == "packet");
  CHECK(packet["reconfigurations"] == 0);
  CHECK(packet["bill"]["power_ratio"] == phase["bill"]["power_ratio"]);
  std::filesystem::remove_all(out);
}
