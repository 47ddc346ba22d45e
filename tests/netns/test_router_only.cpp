// A router-only lab wired as docker-compose wires one, with namespaces in place of
// containers: a switch namespace holding one bridge per DC, a controller namespace with one
// veth on each bridge at the DC gateway's address (interfaces named against the DC order,
// as a container runtime may), and a namespace per node at the node's address. `wanlab up
// --router-only` runs in the controller's namespace and `wanlab node-setup` in each node's;
// ping and iperf3 cross the WAN; `down` gives the ports back as they were.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "iperf.hpp"
#include "process.hpp"
#include "quiet_host.hpp"
#include "wanlab/netlink/netlink.hpp"

using namespace wanlab;
using namespace std::chrono_literals;
using test::run;

namespace {

const std::string kLab = "wlt-ro";
// Not "<lab>.": a router-only lab owns no namespace, and `down` removes those with its prefix.
const std::string kSwitch = "wlro-sw", kCtl = "wlro-ctl", kUse = "wlro-use-0", kEuw = "wlro-euw-0";

std::string sh(const std::string& cmd) {
  const auto r = run(cmd);
  INFO(cmd << "\n" << r.out);
  REQUIRE(r.code == 0);
  return r.out;
}

std::string in(const std::string& ns, const std::string& cmd) { return "ip netns exec " + ns + " " + cmd; }

struct Wiring {
  std::string topology;
  Wiring() {
    remove();
    for (const auto& ns : {kSwitch, kCtl, kUse, kEuw}) sh("ip netns add " + ns);
    for (const auto& ns : {kSwitch, kCtl, kUse, kEuw}) sh("ip -n " + ns + " link set lo up");
    for (const std::string dc : {"use", "euw"}) {
      sh("ip -n " + kSwitch + " link add br-" + dc + " type bridge");
      sh("ip -n " + kSwitch + " link set br-" + dc + " up");
    }
    // The controller's interface toward euw is eth0, toward use eth1.
    plug(kCtl, "eth1", "use", "198.18.0.1/22", "c-use");
    plug(kCtl, "eth0", "euw", "198.18.4.1/22", "c-euw");
    plug(kUse, "eth0", "use", "198.18.0.2/22", "n-use-0");
    plug(kEuw, "eth0", "euw", "198.18.4.2/22", "n-euw-0");
    // Forwarding on where the lab finds the ports, as in a container of a forwarding host.
    sh(in(kCtl, "sysctl -qw net.ipv4.conf.eth1.forwarding=1 net.ipv4.conf.eth0.forwarding=1"));
    topology = (std::filesystem::temp_directory_path() / (kLab + ".json")).string();
    nlohmann::json doc = {{"name", kLab},
                          {"dcs", {{{"name", "use"}, {"nodes", 1}}, {{"name", "euw"}, {"nodes", 1}}}},
                          {"wan", {{{"between", {"use", "euw"}}, {"rtt", "20ms"}, {"rate", "100Mbit"}}}}};
    std::ofstream(topology) << doc.dump(2);
  }
  ~Wiring() { remove(); }
  static void plug(const std::string& ns, const std::string& ifname, const std::string& dc, const std::string& addr,
                   const std::string& port) {
    sh("ip -n " + ns + " link add " + ifname + " type veth peer name " + port + " netns " + kSwitch);
    sh("ip -n " + kSwitch + " link set " + port + " master br-" + dc + " up");
    sh("ip -n " + ns + " addr add " + addr + " dev " + ifname);
    sh("ip -n " + ns + " link set " + ifname + " up");
  }
  static void remove() {
    run(test::wanlab() + " down " + kLab);
    for (const auto& ns : {kSwitch, kCtl, kUse, kEuw})
      if (netlink::Netns::open(ns)) run("(ip netns pids " + ns + " | xargs -r kill -9; ip netns del " + ns + ")");
  }
};

std::string forwarding(const std::string& ifname) {
  return sh(in(kCtl, "cat /proc/sys/net/ipv4/conf/" + ifname + "/forwarding"));
}

}  // namespace

TEST_CASE("a router-only lab in namespaces wired as docker-compose wires containers", "[netns][router-only]") {
  const bool netem = netlink::netem_available();
  const std::string backend = GENERATE(as<std::string>{}, "userspace", "kernel");
  if (backend == "kernel" && !netem) {
    WARN("kernel backend not tried: this kernel has no netem qdisc");
    return;
  }
  Wiring w;
  const auto log = std::filesystem::temp_directory_path() / (kLab + ".log");
  sh(in(kCtl, test::wanlab() + " up " + w.topology + " --router-only --foreground --backend " + backend + " >" +
                  log.string() + " 2>&1 &"));
  nlohmann::json s;
  for (int i = 0; i < 100; ++i) {
    const auto r = run(test::wanlab() + " status " + kLab + " --json");
    if (r.code == 0) {
      s = nlohmann::json::parse(r.out);
      if (s["controller"]["running"] == true) break;
    }
    std::this_thread::sleep_for(100ms);
  }
  INFO(sh("cat " + log.string()));
  REQUIRE(s["controller"]["running"] == true);
  CHECK(s["mode"] == "router-only");
  CHECK(s["backend"] == backend);
  CHECK(s["router"]["ports"] == nlohmann::json::array({"eth1", "eth0"}));  // found by address
  CHECK(forwarding("eth1") == (backend == "kernel" ? "1\n" : "0\n"));
  if (backend == "kernel") CHECK_THAT(sh(in(kCtl, "tc qdisc show dev eth0")), Catch::Contains("netem"));

  const auto setup = sh(in(kUse, test::wanlab() + " node-setup --backend " + backend + " " + w.topology + " use-0"));
  CHECK_THAT(setup, Catch::Contains("routes to 198.18.4.0/22 via 198.18.0.1"));
  // Offloads go off only where netem's qdiscs need MTU-sized packets.
  CHECK_THAT(setup, Catch::Contains(backend == "kernel" ? "offloads off" : "offloads on"));
  sh(in(kEuw, test::wanlab() + " node-setup --backend " + backend + " " + w.topology + " euw-0"));
  const auto routes = sh("ip -n " + kUse + " route");
  CHECK_THAT(routes, Catch::Contains("198.18.4.0/22 via 198.18.0.1 dev eth0"));
  CHECK_THAT(routes, !Catch::Contains("default"));
  CHECK_THAT(sh("ip -n " + kUse + " link show eth0"), Catch::Contains("02:57:4c:12:00:02"));
  // node-setup twice (a restarted container) changes nothing and succeeds.
  sh(in(kUse, test::wanlab() + " node-setup --backend " + backend + " " + w.topology + " use-0"));
  // A node name the lab does not have is refused, naming the lab's nodes.
  const auto bad = run(in(kUse, test::wanlab() + " node-setup " + w.topology + " usw-0"));
  CHECK(bad.code == 2);
  CHECK_THAT(bad.out, Catch::Contains("no node 'usw-0'") && Catch::Contains("use-0, euw-0"));

  // The nodes' own tolerances (tests/kernel/kernel_lab.hpp): never early, mean within 2 ms.
  test::measure_on_quiet_host("router-only ping (" + backend + ")", [&] {
    const auto ping = sh(in(kUse, "ping -n -q -c 20 -i 0.1 -W 2 198.18.4.2"));
    std::smatch m;
    REQUIRE(std::regex_search(ping, m, std::regex(R"(= ([0-9.]+)/([0-9.]+)/([0-9.]+)/)")));
    const double min = std::stod(m[1]), avg = std::stod(m[2]);
    std::fprintf(stderr, "  router-only %s: ping use-0 -> euw-0 min %.3f avg %.3f ms (configured 20 ms)\n",
                 backend.c_str(), min, avg);
    CHECK(min >= 20 - 0.05);  // never early: the link's doing, whatever the host
    test::Expect e;
    e(avg <= 20 + 2, "ping avg " + std::to_string(avg) + " ms, expected at most 22");
    return e;
  });

  test::measure_on_quiet_host("router-only iperf3 (" + backend + ")", [&] {
    run(in(kEuw, "iperf3 -s -1 -J -D -p 5201"));
    std::this_thread::sleep_for(300ms);
    const auto r = test::parse_iperf(run(in(kUse, "iperf3 -J --get-server-output -C cubic -c 198.18.4.2 -t 6")));
    INFO(r.error);
    REQUIRE(r.code == 0);
    test::Expect e;
    if (!e(r.interval_bps.size() >= 5, std::to_string(r.interval_bps.size()) + " intervals, expected 5")) return e;
    double sum = 0;
    for (std::size_t i = 1; i < r.interval_bps.size(); ++i) sum += r.interval_bps[i];
    const double goodput = sum / static_cast<double>(r.interval_bps.size() - 1);
    const double expected = 100e6 * 1448.0 / 1514.0;
    std::fprintf(stderr, "  router-only %s: iperf3 use-0 -> euw-0 %.1f Mbit/s (expected %.1f)\n", backend.c_str(),
                 goodput / 1e6, expected / 1e6);
    e(std::abs(goodput - expected) / expected < 0.05,
      "goodput " + std::to_string(goodput / 1e6) + " Mbit/s, expected " + std::to_string(expected / 1e6) + " within 5 %");
    return e;
  });

  // down: the controller goes, the ports are as they were.
  sh(test::wanlab() + " down " + kLab);
  for (int i = 0; i < 50 && !sh("ip netns pids " + kCtl).empty(); ++i) std::this_thread::sleep_for(100ms);
  CHECK(sh("ip netns pids " + kCtl).empty());
  CHECK(forwarding("eth1") == "1\n");
  CHECK(forwarding("eth0") == "1\n");
  CHECK_THAT(sh(in(kCtl, "tc qdisc show dev eth0")), !Catch::Contains("htb") && !Catch::Contains("netem"));
  CHECK(run(test::wanlab() + " status " + kLab).code != 0);
}
