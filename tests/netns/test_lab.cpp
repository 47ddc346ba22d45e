// Whole labs on this kernel: bring-up through the real CLI and controller daemon, ping
// and iperf3 across DCs, in-place link changes under traffic, teardown that leaves
// nothing (also after SIGKILL), and the CLI's promises (idempotence, two labs at once).
#include <catch2/catch.hpp>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "lab_namespaces.hpp"
#include "process.hpp"
#include "quiet_host.hpp"
#include "wanlab/lab/naming.hpp"
#include "wanlab/netlink/netlink.hpp"
#include "wanlab/netlink/node_entry.hpp"
#include "wanlab/netlink/rps.hpp"
#include "wanlab/shaping/link_model.hpp"

using namespace wanlab;
using namespace std::chrono_literals;
using test::namespaces_of;
using test::run;

namespace {

std::string write_topology(const std::string& lab, const std::string& rate, int nodes = 1) {
  const auto path = std::filesystem::temp_directory_path() / (lab + ".json");
  nlohmann::json doc = {
      {"name", lab},
      {"dcs", {{{"name", "use"}, {"nodes", nodes}}, {{"name", "euw"}, {"nodes", nodes}}}},
      {"wan", {{{"between", {"use", "euw"}}, {"rtt", "20ms"}, {"rate", rate}}}}};
  std::ofstream(path) << doc.dump(2);
  return path.string();
}

// Brings a lab up for one test and always takes it down.
struct LabGuard {
  std::string lab;
  explicit LabGuard(std::string name, const std::string& file) : lab(std::move(name)) {
    run(test::wanlab() + " down " + lab);
    auto r = run(test::wanlab() + " up " + file);
    INFO(r.out);
    REQUIRE(r.code == 0);
  }
  ~LabGuard() { run(test::wanlab() + " down " + lab); }
};

std::string exec(const std::string& lab, const std::string& node, const std::string& cmd) {
  return test::wanlab() + " exec --lab " + lab + " " + node + " -- " + cmd;
}

// iperf3 client run with JSON output: goodput per interval as the receiver (server) saw
// it, and in total. Sender-side intervals count bytes written into the socket buffer,
// not bytes across the link.
struct Iperf {
  int code;
  std::vector<double> interval_bps;
  double total_bps = 0;
  std::string error;
};

Iperf iperf(const std::string& lab, const std::string& from, const std::string& to_addr, int seconds) {
  auto r = run(exec(lab, from, "iperf3 -J --get-server-output -c " + to_addr + " -t " + std::to_string(seconds)));
  Iperf out{r.code, {}, 0, {}};
  try {
    auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
    if (j.contains("error")) out.error = j["error"].get<std::string>();
    for (const auto& i : j["server_output_json"]["intervals"])
      out.interval_bps.push_back(i["sum"]["bits_per_second"].get<double>());
    out.total_bps = j["end"]["sum_received"]["bits_per_second"].get<double>();
  } catch (const std::exception& e) {
    out.error = std::string("unparseable iperf3 output: ") + e.what() + ": " + r.out;
  }
  return out;
}

void start_iperf_server(const std::string& lab, const std::string& node) {
  REQUIRE(run(exec(lab, node, "iperf3 -s -D -1 -J")).code == 0);
  std::this_thread::sleep_for(300ms);
}

// Goodput of TCP over a 1500-byte MTU is at most 1448/1514 = 95.6% of the HTB wire rate.
constexpr double kGoodputShare = 1448.0 / 1514.0;

}  // namespace

TEST_CASE("a two-DC lab: ping across DCs and iperf3 at the HTB rate", "[netns][lab]") {
  const std::string lab = "wlt-two";
  LabGuard g(lab, write_topology(lab, "100Mbit"));

  auto st = run(test::wanlab() + " status " + lab + " --json");
  REQUIRE(st.code == 0);
  const auto s = nlohmann::json::parse(st.out);
  CHECK(s["dcs"].size() == 2);
  CHECK(s["links"].size() == 2);
  CHECK(s["controller"]["running"] == true);
  CHECK(s["dcs"][1]["nodes"][0]["address"] == "198.18.4.2");
  CHECK(namespaces_of(lab).size() == 5);

  auto ping = run(exec(lab, "use-0", "ping -c 3 -i 0.2 -W 2 198.18.4.2"));
  INFO(ping.out);
  CHECK(ping.code == 0);
  CHECK_THAT(ping.out, Catch::Contains("3 received"));

  // The link's byte counter before and after iperf3 (the counters are the link's, not the
  // connection's).
  auto use_bytes = [&] {
    const auto now = nlohmann::json::parse(run(test::wanlab() + " status " + lab + " --json").out);
    std::uint64_t bytes = 0;
    for (const auto& l : now["links"])
      if (l["src"] == "use") bytes = l["counters"]["bytes"].get<std::uint64_t>();
    return bytes;
  };
  test::measure_on_quiet_host("iperf3 at the HTB rate", [&] {
    start_iperf_server(lab, "euw-0");
    const auto before = use_bytes();
    const auto r = iperf(lab, "use-0", "198.18.4.2", 6);
    INFO(r.error);
    REQUIRE(r.code == 0);
    const double expected = 100e6 * kGoodputShare;
    test::Expect e;
    std::ostringstream what;
    what << "goodput " << r.total_bps / 1e6 << " Mbit/s, expected " << expected / 1e6 << " within 5 %";
    e(std::abs(r.total_bps - expected) / expected < 0.05, what.str());
    // The link's counters saw the traffic.
    const auto bytes = use_bytes() - before;
    e(static_cast<double>(bytes) > 6 * 100e6 / 8 * 0.8,
      "link use->euw counted " + std::to_string(bytes) + " bytes in 6 s at 100 Mbit/s, expected > 80 % of 75 MB");
    return e;
  });
}

TEST_CASE("link set changes the rate of a running TCP connection in place", "[netns][lab]") {
  const std::string lab = "wlt-set";
  LabGuard g(lab, write_topology(lab, "100Mbit"));
  test::measure_on_quiet_host("link set under iperf3", [&] {
    // A later attempt starts from the first rate again.
    REQUIRE(run(test::wanlab() + " link set use euw --lab " + lab + " --rate 100Mbit").code == 0);
    start_iperf_server(lab, "euw-0");
    Iperf r{};
    std::thread client([&] { r = iperf(lab, "use-0", "198.18.4.2", 10); });
    std::this_thread::sleep_for(5s);
    auto set = run(test::wanlab() + " link set use euw --lab " + lab + " --rate 30Mbit");
    client.join();
    INFO(set.out);
    CHECK(set.code == 0);
    INFO(r.error);
    REQUIRE(r.code == 0);  // the connection survived the change
    test::Expect e;
    // iperf3 reports fewer intervals when its process was kept off the CPU.
    if (!e(r.interval_bps.size() >= 10, std::to_string(r.interval_bps.size()) + " intervals, expected 10")) return e;
    // Seconds 2-4 at 100 Mbit/s, seconds 7-9 at 30 Mbit/s (one second of margin each side of
    // the change at 5 s; the first two seconds hold slow start, whose second one dipped to
    // 88.7 Mbit/s in one run here). iperf3 counts bytes when its process reads them, so a
    // stall of that process on a busy machine moves bytes from one interval into the next:
    // the mean over each window within 5 %, each second within 10 %.
    auto check_window = [&](std::initializer_list<int> seconds, double rate) {
      const double expected = rate * kGoodputShare;
      double sum = 0;
      for (int i : seconds) {
        std::ostringstream what;
        what << "second " << i << ": " << r.interval_bps[i] / 1e6 << " Mbit/s, expected " << expected / 1e6
             << " within 10 %";
        e(std::abs(r.interval_bps[i] - expected) / expected < 0.10, what.str());
        sum += r.interval_bps[i];
      }
      const double mean = sum / static_cast<double>(seconds.size());
      std::ostringstream what;
      what << "mean " << mean / 1e6 << " Mbit/s, expected " << expected / 1e6 << " within 5 %";
      e(std::abs(mean - expected) / expected < 0.05, what.str());
    };
    check_window({2, 3}, 100e6);
    check_window({7, 8, 9}, 30e6);
    return e;
  });

  // status reflects the change; bad values are refused naming the flag.
  const auto s = nlohmann::json::parse(run(test::wanlab() + " status " + lab + " --json").out);
  for (const auto& l : s["links"])
    if (l["src"] == "use") CHECK(l["rate"] == "30Mbit");
  auto bad = run(test::wanlab() + " link set use euw --lab " + lab + " --rate 30Mbps");
  CHECK(bad.code == 2);
  CHECK_THAT(bad.out, Catch::Contains("--rate"));
  bad = run(test::wanlab() + " link set use nowhere --lab " + lab + " --rate 30Mbit");
  CHECK(bad.code == 2);
  CHECK_THAT(bad.out, Catch::Contains("nowhere"));
}

TEST_CASE("link set --loss-burst: Gilbert-Elliott loss at its stationary mean over 25,000 datagrams", "[netns][lab]") {
  const std::string lab = "wlt-ge";
  LabGuard g(lab, write_topology(lab, "100Mbit"));
  // p = 2 %, r = 25 %, half of the bad state's packets lost: 0.5 x 0.02 / 0.27 = 3.70 %,
  // in bursts (mean 4 packets in the bad state).
  auto set = run(test::wanlab() + " link set use euw --lab " + lab + " --loss-burst '2% 25% 50%'");
  INFO(set.out);
  REQUIRE(set.code == 0);
  CHECK_THAT(set.out, Catch::Contains("burst 2% 25% 50%"));
  const shaping::LossModel ge{Probability{20'000'000}, Probability{250'000'000}, {}, Probability{500'000'000}};
  const double expected = ge.mean();
  CHECK(expected == Approx(0.5 * 0.02 / 0.27));
  // A receiver kept off the CPU by the hypervisor loses datagrams from its socket buffer
  // too (12.9 % lost under 50 % steal in one CI run): judged by the steal.
  test::measure_on_quiet_host("bursty loss", [&] {
    REQUIRE(run(exec(lab, "euw-0", "iperf3 -s -D -1")).code == 0);
    std::this_thread::sleep_for(300ms);
    // 20 Mbit/s of 500-byte datagrams for 5 s: 25,000 of them, far below what the receiver
    // takes, so every loss is the link's.
    const auto out = run(exec(lab, "use-0", "iperf3 -u -J -c 198.18.4.2 -b 20M -l 500 -t 5"));
    REQUIRE(out.code == 0);
    const auto j = nlohmann::json::parse(out.out);
    const double sent = j["end"]["sum"]["packets"].get<double>();
    const double lost = j["end"]["sum"]["lost_percent"].get<double>() / 100;
    WARN("bursty loss: " << sent << " datagrams, receiver lost " << 100 * lost << " % (stationary mean "
                         << 100 * expected << " %)");
    test::Expect e;
    e(sent >= 20'000, "sent " + std::to_string(sent) + " datagrams, expected at least 20,000");
    // Bursts make the count vary more than independent losses (0.23 points over 25,000
    // datagrams, against a binomial 0.12): 4 sigma fails a correct link with probability 6e-5.
    const double sigma = ge.sd_of_mean(static_cast<std::uint64_t>(sent));
    e(std::abs(lost - expected) <= 4 * sigma, "lost " + std::to_string(100 * lost) + " %, expected " +
                                                  std::to_string(100 * expected) + " % within 4 sigma (" +
                                                  std::to_string(400 * sigma) + " points)");
    return e;
  });
  const auto s = nlohmann::json::parse(run(test::wanlab() + " status " + lab + " --json").out);
  for (const auto& l : s["links"]) {
    if (l["src"] != "use") {
      CHECK_FALSE(l.contains("loss_burst"));
      continue;
    }
    CHECK(l["loss_burst"] == "2% 25% 50%");
    const auto& c = l["counters"];
    if (c.contains("dropped_loss"))  // the userspace engine's own count
      CHECK(std::abs(c["dropped_loss"].get<double>() / c["packets_in"].get<double>() - expected) <=
            4 * ge.sd_of_mean(c["packets_in"].get<std::uint64_t>()));
  }
  // Turned off: random loss only again; a bad value is refused naming the flag.
  set = run(test::wanlab() + " link set use euw --lab " + lab + " --loss-burst off");
  CHECK(set.code == 0);
  CHECK_THAT(set.out, !Catch::Contains("burst"));
  auto bad = run(test::wanlab() + " link set use euw --lab " + lab + " --loss-burst '2% 0%'");
  CHECK(bad.code == 2);
  CHECK_THAT(bad.out, Catch::Contains("--loss-burst") && Catch::Contains("never end"));
}

TEST_CASE("down removes every kernel object, also processes left in the lab", "[netns][lab]") {
  const std::string lab = "wlt-down";
  {
    LabGuard g(lab, write_topology(lab, "50Mbit", 2));
    start_iperf_server(lab, "euw-1");  // a process left running inside the lab
    CHECK(namespaces_of(lab).size() == 7);
    auto d = run(test::wanlab() + " down " + lab);
    INFO(d.out);
    CHECK(d.code == 0);
    CHECK_THAT(d.out, Catch::Contains("removed 7 namespaces"));
    CHECK_THAT(d.out, Catch::Contains("killed 1 processes"));
    auto again = run(test::wanlab() + " down " + lab);
    CHECK(again.code == 0);
    CHECK_THAT(again.out, Catch::Contains("not up"));
  }
  CHECK(namespaces_of(lab).empty());
  CHECK_FALSE(std::filesystem::exists("/run/wanlab/" + lab));
  // Nothing of the lab ever lived in the host namespace.
  for (const auto& e : std::filesystem::directory_iterator("/sys/class/net")) {
    const auto n = e.path().filename().string();
    CHECK_FALSE((n.starts_with("to-") || n.starts_with("use-") || n.starts_with("euw-")));
  }
}

TEST_CASE("up twice and down twice are safe and say what they did", "[netns][lab]") {
  const std::string lab = "wlt-twice";
  const auto file = write_topology(lab, "50Mbit");
  LabGuard g(lab, file);
  auto again = run(test::wanlab() + " up " + file);
  CHECK(again.code == 0);
  CHECK_THAT(again.out, Catch::Contains("already up"));
  CHECK(namespaces_of(lab).size() == 5);
}

TEST_CASE("two labs run at once and down removes only its own", "[netns][lab]") {
  const std::string a = "wlt-a", b = "wlt-a-b";  // b's name starts with a's
  LabGuard ga(a, write_topology(a, "50Mbit"));
  {
    LabGuard gb(b, write_topology(b, "50Mbit"));
    CHECK(run(exec(a, "use-0", "ping -c 1 -W 2 198.18.4.2")).code == 0);
    CHECK(run(exec(b, "use-0", "ping -c 1 -W 2 198.18.4.2")).code == 0);
  }
  CHECK(namespaces_of(b).empty());
  CHECK(namespaces_of(a).size() == 5);
  CHECK(run(exec(a, "use-0", "ping -c 1 -W 2 198.18.4.2")).code == 0);
}

TEST_CASE("SIGKILL of the controller at any moment, then down, leaves nothing", "[netns][lab]") {
  const auto file = std::string(WANLAB_SOURCE_DIR) + "/topologies/bringup-96.json";
  const auto lab = nlohmann::json::parse(std::ifstream(file))["name"].get<std::string>();
  run(test::wanlab() + " down " + lab);
  for (int delay_ms : {0, 3, 10, 30, 80, 200, 1000}) {
    INFO("killed after " << delay_ms << " ms");
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::execl(WANLAB_BINARY, "wanlab", "--log-level", "off", "up", "--foreground", file.c_str(), nullptr);
      ::_exit(127);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    auto d = run(test::wanlab() + " down " + lab);
    INFO(d.out);
    CHECK(d.code == 0);
    CHECK(namespaces_of(lab).empty());
    // The nodes' host names and hosts files (/run/utsns, /etc/netns) go with them.
    for (const auto& n : netlink::Utsns::list()) CHECK_FALSE(n.starts_with(lab::ns_prefix(lab)));
    for (const auto& n : netlink::netns_etc_list()) CHECK_FALSE(n.starts_with(lab::ns_prefix(lab)));
    CHECK_FALSE(std::filesystem::exists("/run/wanlab/" + lab));
  }
}

TEST_CASE("bad input and missing privileges get one clear message", "[netns][lab]") {
  auto r = run(test::wanlab() + " up /nonexistent/topology.json");
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("/nonexistent/topology.json"));

  r = run("setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all " + test::wanlab() + " up " +
          std::string(WANLAB_SOURCE_DIR) + "/topologies/two-dc.json");
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("CAP_NET_ADMIN"));

  r = run(test::wanlab() + " exec --lab no-such-lab x-0 -- true");
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("not up"));
}

TEST_CASE("a userspace lab pins its engine and steers every veth's receive path off its CPU", "[netns][lab]") {
  const auto cpus = netlink::allowed_cpus_except(-1);
  if (cpus.size() < 2) {
    WARN("SKIPPED: one CPU: the engine is not pinned and nothing is steered");
    return;
  }
  const std::string lab = "wlt-rps";
  const auto file = write_topology(lab, "100Mbit");
  run(test::wanlab() + " down " + lab);
  auto up = run(test::wanlab() + " up " + file + " --backend userspace");
  INFO(up.out);
  REQUIRE(up.code == 0);
  struct Down {
    std::string lab;
    ~Down() { run(test::wanlab() + " down " + lab); }
  } down{lab};

  const auto st = nlohmann::json::parse(run(test::wanlab() + " status " + lab + " --json").out);
  const int pid = st["controller"]["pid"].get<int>();
  // The engine thread, by name, runs on the last CPU only.
  int engine_tid = 0;
  for (const auto& t : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    std::ifstream comm(t.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name == "wanlab-engine") engine_tid = std::stoi(t.path().filename().string());
  }
  REQUIRE(engine_tid != 0);
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(::sched_getaffinity(engine_tid, sizeof set, &set) == 0);
  CHECK(CPU_COUNT(&set) == 1);
  CHECK(CPU_ISSET(cpus.back(), &set));

  // Both ends of the WAN uplink and of a node's port steer to the other CPUs.
  const auto want = netlink::rps_mask(netlink::allowed_cpus_except(cpus.back()));
  const auto trim = [](std::string m) {  // "00000001" and "1" are the same mask
    const auto nz = m.find_first_not_of("0,");
    return nz == std::string::npos ? std::string("0") : m.substr(nz);
  };
  for (const auto& [ns, ifname] : {std::pair{lab::ns_router(lab), lab::if_router_to("use")},
                                   std::pair{lab::ns_gateway(lab, "use"), lab::if_gateway_wan("use")},
                                   std::pair{lab::ns_gateway(lab, "euw"), lab::if_gateway_port("euw", 0)},
                                   std::pair{lab::ns_node(lab, "euw-0"), lab::if_node("euw", 0)}}) {
    auto handle = netlink::Netns::open(ns);
    REQUIRE(handle);
    INFO(ns << ":" << ifname);
    CHECK(trim(netlink::rps_cpus(*handle, ifname)) == trim(want));
  }
  // Traffic still flows across the steered lab.
  auto ping = run(exec(lab, "use-0", "ping -c 2 -i 0.2 -W 2 198.18.4.2"));
  INFO(ping.out);
  CHECK(ping.code == 0);
}
