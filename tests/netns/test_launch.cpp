// Node identity (host name, hosts file, congestion control) and `wanlab launch` on a real
// two-DC lab: ranks and their variables, output, exit status, the run folder, refusals that
// start nothing, Ctrl-C and `down` stopping the ranks, and nothing left after `down`.
#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "process.hpp"
#include "wanlab/lab/naming.hpp"
#include "wanlab/netlink/netlink.hpp"
#include "wanlab/netlink/node_entry.hpp"

using namespace wanlab;
using namespace std::chrono_literals;
using Catch::Contains;
using test::run;
namespace fs = std::filesystem;

namespace {

const std::string kLab = "wlt-launch";

std::string write_topology(const std::string& lab, const std::string& node_json) {
  const auto path = fs::temp_directory_path() / (lab + ".json");
  nlohmann::json doc = {{"name", lab},
                        {"dcs", {{{"name", "use"}, {"nodes", 1}}, {{"name", "euw"}, {"nodes", 1}}}},
                        {"wan", {{{"between", {"use", "euw"}}, {"rtt", "20ms"}, {"rate", "100Mbit"}}}}};
  if (!node_json.empty()) doc["node"] = nlohmann::json::parse(node_json);
  std::ofstream(path) << doc.dump(2);
  return path.string();
}

struct LabGuard {
  std::string lab;
  LabGuard(std::string name, const std::string& file) : lab(std::move(name)) {
    run(test::wanlab() + " down " + lab);
    auto r = run(test::wanlab() + " up " + file);
    INFO(r.out);
    REQUIRE(r.code == 0);
  }
  ~LabGuard() { run(test::wanlab() + " down " + lab); }
};

std::string exec(const std::string& node, const std::string& cmd) {
  return test::wanlab() + " exec --lab " + kLab + " " + node + " -- " + cmd;
}

std::string launch(const std::string& args) { return test::wanlab() + " launch --lab " + kLab + " " + args; }

// What of lab `lab` is left on the machine: namespaces, UTS namespaces, /etc/netns folders,
// mounts naming it.
std::vector<std::string> leftovers(const std::string& lab) {
  std::vector<std::string> out;
  const auto prefix = lab::ns_prefix(lab);
  for (const auto& n : netlink::Netns::list())
    if (n.starts_with(prefix)) out.push_back("/run/netns/" + n);
  for (const auto& n : netlink::Utsns::list())
    if (n.starts_with(prefix)) out.push_back("/run/utsns/" + n);
  for (const auto& n : netlink::netns_etc_list())
    if (n.starts_with(prefix)) out.push_back("/etc/netns/" + n);
  std::ifstream mounts("/proc/self/mountinfo");
  for (std::string line; std::getline(mounts, line);)
    if (line.find("/" + prefix) != std::string::npos) out.push_back("mount: " + line);
  return out;
}

// Processes whose network namespace is node `node`'s.
int processes_in_node(const std::string& node) {
  struct stat ns {};
  if (::stat(("/run/netns/" + lab::ns_node(kLab, node)).c_str(), &ns) != 0) return 0;
  int n = 0;
  for (const auto& e : fs::directory_iterator("/proc")) {
    struct stat st {};
    if (::stat((e.path() / "ns/net").c_str(), &st) == 0 && st.st_ino == ns.st_ino && st.st_dev == ns.st_dev) ++n;
  }
  return n;
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("nodes have their own names, the lab's hosts file and congestion control", "[netns][launch]") {
  LabGuard g(kLab, write_topology(kLab, R"({"tcp_congestion": "reno",
                                            "sysctls": {"net.ipv4.tcp_slow_start_after_idle": 0}})"));
  CHECK(fs::exists("/run/utsns/" + kLab + ".use-0"));
  CHECK(fs::exists("/etc/netns/" + kLab + ".euw-0/hosts"));

  auto h = run(exec("use-0", "hostname"));
  INFO(h.out);
  CHECK(h.code == 0);
  CHECK(h.out == "use-0\n");
  CHECK(run(exec("euw-0", "hostname")).out == "euw-0\n");
  // The host keeps its own name.
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  CHECK(std::string(host) != "use-0");

  auto g1 = run(exec("use-0", "getent hosts euw-0"));
  INFO(g1.out);
  CHECK(g1.code == 0);
  CHECK_THAT(g1.out, Contains("198.18.4.2"));
  CHECK_THAT(run(exec("euw-0", "getent hosts use-0")).out, Contains("198.18.0.2"));
  // A node's own name is its lab address, not 127.0.x.1: gloo binds to it.
  CHECK_THAT(run(exec("euw-0", "getent hosts euw-0")).out, Contains("198.18.4.2"));
  CHECK_THAT(run(exec("use-0", "getent hosts gw-euw")).out, Contains("198.18.4.1"));
  auto p = run(exec("use-0", "ping -c 1 -W 2 euw-0"));
  INFO(p.out);
  CHECK(p.code == 0);

  CHECK(run(exec("use-0", "cat /proc/sys/net/ipv4/tcp_congestion_control")).out == "reno\n");
  CHECK(run(exec("euw-0", "cat /proc/sys/net/ipv4/tcp_slow_start_after_idle")).out == "0\n");
}

TEST_CASE("launch starts ranks on two DCs with the variables frameworks read", "[netns][launch]") {
  LabGuard g(kLab, write_topology(kLab, ""));
  const auto out = fs::temp_directory_path() / "wlt-launch-run";
  fs::remove_all(out);

  // The default congestion control: cubic (added to the host's allowed list where needed).
  CHECK(run(exec("euw-0", "cat /proc/sys/net/ipv4/tcp_congestion_control")).out == "cubic\n");

  auto r = run(launch("--nodes use-0,euw-0 --out " + out.string() +
                      " -- sh -c 'echo $RANK $WORLD_SIZE $LOCAL_RANK $NODE_RANK $MASTER_ADDR $(hostname) "
                      "$GLOO_SOCKET_IFNAME $WANLAB_DC; ping -c 3 -i 0.2 -W 2 $MASTER_ADDR'"));
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Contains("[use-0/0] 0 2 0 0 use-0 use-0 use-0 use\n"));
  CHECK_THAT(r.out, Contains("[euw-0/1] 1 2 0 1 use-0 euw-0 euw-0 euw\n"));
  CHECK_THAT(r.out, Contains("[euw-0/1] 3 packets transmitted, 3 received"));

  const auto rec = read_json(out / "launch.json");
  CHECK(rec["ranks"].size() == 2);
  CHECK(rec["master_addr"] == "use-0");
  const int port = rec["master_port"].get<int>();
  CHECK(port > 0);
  CHECK(rec["ranks"][1]["env"]["MASTER_PORT"] == std::to_string(port));
  const auto sum = read_json(out / "summary.json");
  CHECK(sum["exit_status"] == 0);
  CHECK(sum["wall_time_s"].get<double>() > 0.3);
  CHECK(sum["samples"].get<int>() >= 4);
  std::uint64_t euw_to_use = 0;
  for (const auto& l : sum["links"])
    if (l["src"] == "euw") euw_to_use = l["bytes"].get<std::uint64_t>();
  CHECK(euw_to_use >= 3 * 84);  // three echo requests of 84 bytes at least
  std::ifstream csv(out / "links.csv");
  std::string header;
  std::getline(csv, header);
  CHECK(header == "t_s,src,dst,bytes,payload_bytes,mbit_s,drops,queued_packets");
  int rows = 0;
  for (std::string line; std::getline(csv, line);) ++rows;
  CHECK(rows >= 8);
  CHECK(fs::exists(out / "logs" / "euw-0.0.log"));

  // The worst status wins.
  r = run(launch("--nodes use-0,euw-0 --out " + out.string() + "-fail -- sh -c 'exit $((RANK * 3))'"));
  CHECK(r.code == 3);
  CHECK(read_json(out.string() + "-fail/summary.json")["ranks"][1]["exit_status"] == 3);
  // Per node, two ranks; --env reaches them; words are substituted without a shell.
  r = run(launch("--all --per-node 2 --env GREETING=hi --out " + out.string() + "-four -- echo '$GREETING' "
                 "'$RANK/$WORLD_SIZE' '$LOCAL_RANK'"));
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Contains("[use-0/1] hi 1/4 1\n"));
  CHECK_THAT(r.out, Contains("[euw-0/3] hi 3/4 1\n"));
  for (const auto& d : {out.string(), out.string() + "-fail", out.string() + "-four"}) fs::remove_all(d);
}

TEST_CASE("launch refuses what it cannot start, starting nothing", "[netns][launch]") {
  LabGuard g(kLab, write_topology(kLab, ""));
  const auto out = fs::temp_directory_path() / "wlt-launch-refused";
  fs::remove_all(out);
  auto r = run(launch("--nodes use-0,apne-0 --out " + out.string() + " -- sleep 5"));
  CHECK(r.code == 2);
  CHECK(r.out == "wanlab: launch: lab " + kLab + " has no node 'apne-0' (its nodes: use-0, euw-0)\n");
  r = run(launch("--nodes use-0,euw-0 --out " + out.string() + " -- no-such-program-wlt --flag"));
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Contains("command 'no-such-program-wlt' not found in the nodes' PATH"));
  r = run(launch("--nodes use-0,euw-0 --out " + out.string() + " --shell -- no-such-program-wlt '$RANK'"));
  CHECK(r.code == 2);
  r = run(test::wanlab() + " launch --lab wlt-not-up --nodes use-0 --out " + out.string() + " -- true");
  CHECK(r.code == 2);
  CHECK(r.out == "wanlab: launch: lab wlt-not-up is not up\n");
  r = run(launch("--nodes use-0 --env RANK=3 --out " + out.string() + " -- true"));
  CHECK(r.code == 2);
  CHECK_FALSE(fs::exists(out));
  CHECK(processes_in_node("use-0") == 0);
  CHECK(processes_in_node("euw-0") == 0);
}

TEST_CASE("Ctrl-C and down stop every rank launch started; down leaves nothing", "[netns][launch]") {
  const auto out = fs::temp_directory_path() / "wlt-launch-stop";
  {
    LabGuard g(kLab, write_topology(kLab, ""));
    fs::remove_all(out);
    // SIGINT to launch: its ranks (and their children) get SIGTERM.
    const auto t0 = std::chrono::steady_clock::now();
    auto r = run("timeout --preserve-status -s INT 2 " +
                 launch("--all --out " + out.string() + " -- sh -c 'sleep 30 & sleep 31; wait'"));
    INFO(r.out);
    CHECK(r.code == 130);
    CHECK(std::chrono::steady_clock::now() - t0 < 8s);
    CHECK(read_json(out / "summary.json")["interrupted"] == true);
    CHECK(processes_in_node("use-0") == 0);
    CHECK(processes_in_node("euw-0") == 0);
    fs::remove_all(out);

    // `down` while a job runs: the ranks die with the lab and launch returns.
    auto job = std::async(std::launch::async, [&] {
      return run(launch("--all --out " + out.string() + " -- sleep 60"));
    });
    for (int i = 0; i < 50 && processes_in_node("euw-0") == 0; ++i) std::this_thread::sleep_for(100ms);
    CHECK(processes_in_node("euw-0") == 1);
    auto d = run(test::wanlab() + " down " + kLab);
    INFO(d.out);
    CHECK(d.code == 0);
    CHECK(job.wait_for(10s) == std::future_status::ready);
    const auto j = job.get();
    CHECK(j.code == 128 + SIGKILL);
    fs::remove_all(out);
  }
  CHECK(leftovers(kLab).empty());

  // A controller killed with SIGKILL: `down` from the state file removes the identities too.
  LabGuard g(kLab, write_topology(kLab, ""));
  const auto st = nlohmann::json::parse(run(test::wanlab() + " status " + kLab + " --json").out);
  ::kill(st["controller"]["pid"].get<int>(), SIGKILL);
  std::this_thread::sleep_for(200ms);
  CHECK_FALSE(leftovers(kLab).empty());
  auto d = run(test::wanlab() + " down " + kLab);
  INFO(d.out);
  CHECK(d.code == 0);
  CHECK(leftovers(kLab) == std::vector<std::string>{});
}
