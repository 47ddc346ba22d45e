// The lab's photonic rails on this kernel (docs/rails.md): a DC whose fabric is rails gets a
// rail switch (the userspace engine's RailSwitch) between every node's rail ports. Checks
// that ping and iperf3 cross a rail at the port rate, that a run on OCS rails switches
// circuits at phase boundaries and holds frames for them while the packet policy never does
// (the same bytes either way), and that down removes the switch's namespace with the rest.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "lab_namespaces.hpp"
#include "process.hpp"
#include "wanlab/lab/naming.hpp"
#include "wanlab/netlink/netlink.hpp"

using namespace wanlab;
using test::namespaces_of;
using test::run;
namespace fs = std::filesystem;

namespace {

constexpr const char* kLab = "wlrails";

fs::path tmp(const std::string& name) { return fs::temp_directory_path() / name; }

// The shipped rails lab (topologies/rails-lab.json) under this test's lab name, its port rate
// `rate` and OCS reconfiguration `latency`.
std::string write_topology(const std::string& rate, const std::string& latency = "1ms") {
  std::ifstream in(std::string(WANLAB_SOURCE_DIR) + "/topologies/rails-lab.json");
  auto doc = nlohmann::json::parse(in);
  doc["name"] = kLab;
  doc["dcs"][0]["fabric"]["port_rate"] = rate;
  doc["dcs"][0]["fabric"]["reconfiguration"] = latency;
  const auto path = tmp(std::string(kLab) + ".json");
  std::ofstream(path) << doc.dump(2);
  return path.string();
}

// The shipped rails scenario `name` on this test's lab, with rail policy `policy`.
std::string write_scenario(const std::string& name, const std::string& topology, const std::string& policy) {
  std::ifstream in(std::string(WANLAB_SOURCE_DIR) + "/bench/scenarios/rails/" + name + ".json");
  auto doc = nlohmann::json::parse(in);
  doc["topology"] = topology;
  doc["rails"]["policy"] = policy;
  doc["iterations"] = 3;
  const auto path = tmp(std::string(kLab) + "-" + policy + ".json");
  std::ofstream(path) << doc.dump(2);
  return path.string();
}

struct LabGuard {
  explicit LabGuard(const std::string& file) {
    run(test::wanlab() + " down " + kLab);
    auto r = run(test::wanlab() + " up " + file);
    INFO(r.out);
    REQUIRE(r.code == 0);
  }
  ~LabGuard() { run(test::wanlab() + " down " + kLab); }
};

std::string exec(const std::string& node, const std::string& cmd) {
  return test::wanlab() + " exec --lab " + kLab + " " + node + " -- " + cmd;
}

nlohmann::json run_scenario(const std::string& scenario, const fs::path& out) {
  fs::remove_all(out);
  auto r = run(test::wanlab() + " run " + scenario + " --keep-lab --quiet --out " + out.string());
  INFO(r.out);
  REQUIRE(r.code == 0);
  std::ifstream f(out / "summary.json");
  return nlohmann::json::parse(f);
}

}  // namespace

TEST_CASE("a rails lab: ping and iperf3 cross a rail at its port rate; down leaves nothing", "[netns][rails]") {
  {
    LabGuard lab(write_topology("500Mbit"));
    const auto names = namespaces_of(kLab);
    CHECK(std::find(names.begin(), names.end(), lab::ns_rails(kLab, "dc")) != names.end());
    // Node 0's port on rail 1 to node 2's (the switch answers ARP for the rail's addresses).
    auto r = run(exec("dc-0", "ping -c 5 -i 0.2 -W 2 198.19.17.3"));
    INFO(r.out);
    CHECK(r.code == 0);
    CHECK(r.out.find(" 0% packet loss") != std::string::npos);
    // Outside a run the rails pass every frame at the port rate: 500 Mbit/s, less TCP/IP's
    // share of a 1500-byte frame.
    REQUIRE(run(exec("dc-1", "iperf3 -s -D -1 -B 198.19.16.2")).code == 0);
    run("sleep 0.3");
    r = run(exec("dc-0", "iperf3 -J -c 198.19.16.2 -t 3"));
    INFO(r.out);
    REQUIRE(r.code == 0);
    const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
    const double bps = j["end"]["sum_received"]["bits_per_second"].get<double>();
    CHECK(bps > 0.85 * 500e6 * 1448 / 1514);
    CHECK(bps < 1.02 * 500e6 * 1448 / 1514);
    // An address no port has: nothing answers.
    CHECK(run(exec("dc-0", "ping -c 1 -W 1 198.19.16.200")).code != 0);
    // The OCS latency changes in place; status shows it; bad values are refused, one line each.
    r = run(test::wanlab() + " rails set dc --lab " + kLab + " --reconfiguration 10ms");
    INFO(r.out);
    CHECK(r.code == 0);
    CHECK(r.out.find("rails (ocs, 2 x 500Mbit, 10ms)") != std::string::npos);
    r = run(test::wanlab() + " status " + kLab + " --json");
    REQUIRE(r.code == 0);
    const auto st = nlohmann::json::parse(r.out);
    CHECK(st["dcs"][0]["rails"]["fabric"] == "rails (ocs, 2 x 500Mbit, 10ms)");
    for (const auto& bad : {"--reconfiguration 2s", "--reconfiguration soon", ""}) {
      r = run(test::wanlab() + " rails set dc --lab " + kLab + " " + bad);
      INFO(bad << ": " << r.out);
      CHECK(r.code == 2);
    }
    r = run(test::wanlab() + " rails set nodc --lab " + kLab + " --reconfiguration 1ms");
    CHECK(r.code == 2);
    CHECK(r.out.find("no DC 'nodc'") != std::string::npos);
  }
  CHECK(namespaces_of(kLab).empty());
}

TEST_CASE("a run on OCS rails switches circuits at phase boundaries; packet rails never hold",
          "[netns][rails][run]") {
  // 10 ms a reconfiguration: the switching shows on the clock (+10.7 % in
  // bench/results/2026-12-01-rails-lab.md; 1 ms is within the lab's run-to-run spread).
  const auto topo = write_topology("100Gbit", "10ms");
  LabGuard lab(topo);
  const auto phase = run_scenario(write_scenario("rails-lab-phase", topo, "phase"), tmp("wlrails-phase"));
  const auto packet = run_scenario(write_scenario("rails-lab-phase", topo, "packet"), tmp("wlrails-packet"));
  REQUIRE(phase.at("rails").size() == 1);
  REQUIRE(packet.at("rails").size() == 1);
  const auto& rp = phase.at("rails")[0];
  const auto& rk = packet.at("rails")[0];
  INFO(phase.at("rails").dump() << "\n" << packet.at("rails").dump());
  CHECK(rp.at("circuits") == true);
  CHECK(rp.at("phases") == nlohmann::json::array({"pp-forward", "pp-backward", "dp-allreduce"}));
  // At least the simulator's own count: an iteration's phases (forward, backward and the
  // all-reduce's ring) each need their circuits.
  CHECK(rp.at("reconfigurations_per_iteration").get<double>() >= 3);
  CHECK(rp.at("reconfiguring_s").get<double>() ==
        Approx(rp.at("reconfigurations").get<double>() * 10e-3));  // 10 ms each
  CHECK(rp.at("held_frames").get<std::uint64_t>() > 0);
  CHECK(rp.at("no_circuit") == 0);
  CHECK(rp.at("held_dropped") == 0);
  CHECK(rk.at("circuits") == false);
  CHECK(rk.at("reconfigurations") == 0);
  CHECK(rk.at("held_frames") == 0);
  // The same bytes cross the rails either way (TCP headers and retransmits aside: within 2 %).
  const double bp = rp.at("bytes").get<double>(), bk = rk.at("bytes").get<double>();
  CHECK(bp > 0);
  CHECK(bp == Approx(bk).epsilon(0.02));
  // Waiting for circuits costs time: at 10 ms a switch, more than the lab's spread (2-4 %).
  CHECK(phase.at("iteration_time_s").at("mean").get<double>() >
        1.02 * packet.at("iteration_time_s").at("mean").get<double>());
}
