// `wanlab launch`'s pure part (ranks, their environment, argument checks), the nodes'
// hosts file, and the topology's node settings (congestion control, sysctls).
#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "golden.hpp"
#include "launch_plan.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/lab/host_tcp.hpp"
#include "wanlab/lab/hosts.hpp"
#include "wanlab/lab/plan.hpp"

using namespace wanlab;
using namespace wanlab::cli::launch;
using Catch::Contains;

namespace {

core::Topology topology(const std::string& node_json = "") {
  auto doc = nlohmann::json::parse(R"({
    "name": "fw",
    "dcs": [ {"name": "use", "nodes": 2}, {"name": "euw", "nodes": 1} ],
    "wan": [ {"between": ["use", "euw"], "rtt": "80ms", "rate": "100Mbit"} ]
  })");
  if (!node_json.empty()) doc["node"] = nlohmann::json::parse(node_json);
  return core::parse_topology(doc, "fw.json", ".");
}

std::string value(const Env& env, const std::string& name) {
  for (const auto& [k, v] : env)
    if (k == name) return v;
  FAIL("no " << name);
  return {};
}

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const LaunchError& e) {
    return e.what();
  }
  FAIL("expected a LaunchError");
  return {};
}

}  // namespace

TEST_CASE("launch selects nodes in the order given, or every node with --all", "[unit][launch]") {
  const auto topo = topology();
  const auto two = select_nodes(topo, std::string("euw-0,use-1"), false);
  REQUIRE(two.size() == 2);
  CHECK(two[0].name == "euw-0");
  CHECK(two[0].dc == "euw");
  CHECK(two[0].address == "198.18.4.2");
  CHECK(two[0].ifname == "euw-0");
  CHECK(two[1].address == "198.18.0.3");
  const auto all = select_nodes(topo, std::nullopt, true);
  REQUIRE(all.size() == 3);
  CHECK(all[0].name == "use-0");
  CHECK(all[2].name == "euw-0");
}

TEST_CASE("launch refuses node lists it cannot start, naming why", "[unit][launch]") {
  const auto topo = topology();
  CHECK_THAT(error_of([&] { select_nodes(topo, std::nullopt, false); }), Contains("--nodes use-0,euw-0 or --all"));
  CHECK_THAT(error_of([&] { select_nodes(topo, std::string("use-0"), true); }), Contains("or --all"));
  CHECK(error_of([&] { select_nodes(topo, std::string("use-0,apne-0"), false); }) ==
        "lab fw has no node 'apne-0' (its nodes: use-0, use-1, euw-0)");
  CHECK_THAT(error_of([&] { select_nodes(topo, std::string("use-0,,euw-0"), false); }), Contains("empty node name"));
  CHECK_THAT(error_of([&] { select_nodes(topo, std::string("use-0,use-0"), false); }), Contains("named twice"));
}

TEST_CASE("launch --env takes NAME=VALUE and leaves launch's own names alone", "[unit][launch]") {
  const auto env = parse_env({"NCCL_DEBUG=INFO", "EMPTY=", "EQ=a=b"});
  REQUIRE(env.size() == 3);
  CHECK(env[1] == std::pair<std::string, std::string>{"EMPTY", ""});
  CHECK(env[2].second == "a=b");
  CHECK_THAT(error_of([] { parse_env({"NOVALUE"}); }), Contains("expected NAME=VALUE"));
  CHECK_THAT(error_of([] { parse_env({"1X=2"}); }), Contains("not a variable name"));
  CHECK_THAT(error_of([] { parse_env({"A-B=2"}); }), Contains("not a variable name"));
  CHECK_THAT(error_of([] { parse_env({"MASTER_PORT=1234"}); }), Contains("launch sets MASTER_PORT itself"));
  CHECK_THAT(error_of([] { parse_env({"A=1", "A=2"}); }), Contains("A is given twice"));
}

TEST_CASE("launch ranks: numbering, the variables frameworks read, substitution", "[unit][launch]") {
  const auto topo = topology();
  const auto nodes = select_nodes(topo, std::string("use-1,euw-0"), false);
  Options o;
  o.lab = "fw";
  o.per_node = 2;
  o.master_port = 29511;
  o.user_env = {{"NCCL_DEBUG", "INFO"}};
  const auto ranks = plan_ranks(nodes, {"torchrun", "--node-rank", "$NODE_RANK", "--master-addr=${MASTER_ADDR}",
                                        "--rdzv-endpoint", "$MASTER_ADDR:$MASTER_PORT", "$HOME", "$$", "cost$"},
                                o);
  REQUIRE(ranks.size() == 4);
  for (int r = 0; r < 4; ++r) {
    const auto& k = ranks[static_cast<std::size_t>(r)];
    CAPTURE(r);
    CHECK(k.rank == r);
    CHECK(k.node_rank == r / 2);
    CHECK(k.local_rank == r % 2);
    CHECK(value(k.env, "RANK") == std::to_string(r));
    CHECK(value(k.env, "WORLD_SIZE") == "4");
    CHECK(value(k.env, "LOCAL_RANK") == std::to_string(r % 2));
    CHECK(value(k.env, "LOCAL_WORLD_SIZE") == "2");
    CHECK(value(k.env, "NODE_RANK") == std::to_string(r / 2));
    CHECK(value(k.env, "NNODES") == "2");
    CHECK(value(k.env, "MASTER_ADDR") == "use-1");
    CHECK(value(k.env, "MASTER_PORT") == "29511");
    CHECK(value(k.env, "WANLAB_LAB") == "fw");
    CHECK(value(k.env, "NCCL_DEBUG") == "INFO");
  }
  CHECK(ranks[0].node == "use-1");
  CHECK(value(ranks[0].env, "GLOO_SOCKET_IFNAME") == "use-1");
  CHECK(value(ranks[3].env, "NCCL_SOCKET_IFNAME") == "euw-0");
  CHECK(value(ranks[3].env, "WANLAB_DC") == "euw");
  CHECK(value(ranks[3].env, "WANLAB_NODE") == "euw-0");
  CHECK(ranks[3].argv == std::vector<std::string>{"torchrun", "--node-rank", "1", "--master-addr=use-1",
                                                  "--rdzv-endpoint", "use-1:29511", "$HOME", "$$", "cost$"});

  o.per_node = 1;
  o.shell = true;
  const auto sh = plan_ranks(nodes, {"echo", "$RANK", "&&", "hostname"}, o);
  REQUIRE(sh.size() == 2);
  CHECK(sh[1].argv == std::vector<std::string>{"/bin/sh", "-c", "echo 1 && hostname"});

  CHECK_THAT(error_of([&] { plan_ranks(nodes, {}, o); }), Contains("no command"));
  o.per_node = 0;
  CHECK_THAT(error_of([&] { plan_ranks(nodes, {"true"}, o); }), Contains("--per-node 0"));
}

TEST_CASE("launch gives torchrun redirect defaults Debian's 1.13 can read, unless the user gives them",
          "[unit][launch]") {
  const auto topo = topology();
  const auto nodes = select_nodes(topo, std::string("use-0,euw-0"), false);
  Options o;
  o.lab = "fw";
  o.defaults = torchrun_defaults();
  o.user_env = {{"PET_TEE", "3"}};
  const auto ranks = plan_ranks(nodes, {"torchrun", "train.py"}, o);
  REQUIRE(ranks.size() == 2);
  // "9:0" matches torchrun's mapping form and names no local rank below 9: no redirection,
  // its default; a plain "0" is what 1.13 cannot read on Python 3.11.
  CHECK(value(ranks[0].env, "PET_REDIRECTS") == "9:0");
  CHECK(value(ranks[1].env, "PET_TEE") == "3");
  std::size_t tees = 0;
  for (const auto& [k, v] : ranks[1].env) tees += k == "PET_TEE" ? 1 : 0;
  CHECK(tees == 1);
}

TEST_CASE("launch substitutes only the names it knows", "[unit][launch]") {
  const Env env = {{"RANK", "3"}, {"MASTER_ADDR", "use-0"}};
  CHECK(substitute("$RANK", env) == "3");
  CHECK(substitute("r${RANK}x", env) == "r3x");
  CHECK(substitute("$RANKS", env) == "$RANKS");
  CHECK(substitute("${OTHER}-$OTHER", env) == "${OTHER}-$OTHER");
  CHECK(substitute("${RANK", env) == "${RANK");
  CHECK(substitute("$", env) == "$");
  CHECK(substitute("$MASTER_ADDR:29500", env) == "use-0:29500");
}

TEST_CASE("launch finds the program before starting anything", "[unit][launch]") {
  CHECK(program_of({"python3", "-c", "x"}) == "python3");
  CHECK(program_of({"/bin/sh", "-c", "  torchrun --nnodes 2 x.py"}) == "torchrun");
  CHECK(program_of({"/bin/sh", "-c", "A=1 torchrun"}) == std::nullopt);
  CHECK(program_of({"/bin/sh", "-c", "cd /tmp && ls"}) == std::nullopt);
  CHECK(program_of({"/bin/sh", "-c", "echo $RANK"}) == std::nullopt);

  const auto dir = std::filesystem::temp_directory_path() / "wanlab-launch-path-test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "a");
  std::filesystem::create_directories(dir / "b");
  std::ofstream(dir / "a" / "tool") << "#!/bin/sh\n";  // not executable
  std::ofstream(dir / "b" / "tool") << "#!/bin/sh\n";
  ::chmod((dir / "b" / "tool").c_str(), 0755);
  const auto path = (dir / "a").string() + ":" + (dir / "b").string();
  CHECK(find_in_path("tool", path) == (dir / "b" / "tool").string());
  CHECK(find_in_path("absent", path) == std::nullopt);
  CHECK(find_in_path((dir / "a" / "tool").string(), path) == std::nullopt);
  CHECK(find_in_path((dir / "b" / "tool").string(), "") == (dir / "b" / "tool").string());
  CHECK(find_in_path("a", (dir).string()) == std::nullopt);  // a folder is not a program
  std::filesystem::remove_all(dir);
}

TEST_CASE("launch's exit status is the worst rank's", "[unit][launch]") {
  CHECK(worst_status({0, 0}) == 0);
  CHECK(worst_status({0, 1}) == 1);
  CHECK(worst_status({2, 137, 0}) == 137);
  CHECK(worst_status({}) == 0);
}

TEST_CASE("every node's hosts file names the lab's nodes, gateways and router", "[unit][launch][plan]") {
  const auto topo = topology();
  CHECK(lab::hosts_file(topo, 0, 1) ==
        "# lab fw: written by wanlab up, removed by wanlab down\n"
        "127.0.0.1\tlocalhost\n"
        "198.18.0.3\tuse-1\n"
        "198.18.0.2\tuse-0\n"
        "198.18.4.2\teuw-0\n"
        "198.18.0.1\tgw-use\n"
        "198.18.4.1\tgw-euw\n"
        "198.19.0.1\trouter\n");
  CHECK_THAT(lab::hosts_file(topo, 1, 0), Contains("198.19.0.5\trouter\n"));
}

TEST_CASE("a node's identity and settings are in the plan", "[unit][launch][plan]") {
  const auto topo = topology(R"({"tcp_congestion": "cubic", "sysctls": {"net.ipv4.tcp_rmem": "4096 131072 6291456",
                                 "net.ipv4.tcp_slow_start_after_idle": 0}})");
  CHECK(topo.node.tcp_congestion == "cubic");
  auto options = lab::PlanOptions{.netem = true, .tcp_congestion = "cubic"};
  const auto plan = lab::plan_lab(topo, options);
  std::string text;
  for (const auto& op : plan.ops)
    if (lab::op_namespace(op) == "fw.use-1") text += lab::to_string(op) + "\n";
  wanlab::test::check_golden("plan-node-use-1.txt", text);
  // The canonical JSON keeps the settings.
  CHECK(core::parse_topology(core::to_json(topo), "again.json", ".").node == topo.node);
}

TEST_CASE("the topology's node settings are checked", "[unit][launch]") {
  auto problems = [](const std::string& node) {
    try {
      topology(node);
    } catch (const core::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(problems(R"({"tcp_congestion": "Cubic!"})"), Contains("/node/tcp_congestion"));
  CHECK_THAT(problems(R"({"tcp_congestion": 3})"), Contains("/node/tcp_congestion"));
  CHECK_THAT(problems(R"({"sysctls": {"kernel.hostname": "x"}})"), Contains("not a per-namespace sysctl"));
  CHECK_THAT(problems(R"({"sysctls": {"net..x": "1"}})"), Contains("/node/sysctls/net..x"));
  CHECK_THAT(problems(R"({"sysctls": {"net.ipv4.tcp_congestion_control": "bbr"}})"), Contains("tcp_congestion"));
  CHECK_THAT(problems(R"({"sysctls": {"net.ipv4.tcp_rmem": [1]}})"), Contains("a string or an integer"));
  CHECK_THAT(problems(R"({"congestion": "bbr"})"), Contains("/node"));
  CHECK(problems(R"({"tcp_congestion": "bbr"})") == "no error");
}

TEST_CASE("the host's allowed congestion controls gain the lab's, once", "[unit][launch]") {
  CHECK(lab::allowed_list_with("reno bbr", "cubic") == "reno bbr cubic");
  CHECK(lab::allowed_list_with("reno cubic", "cubic") == std::nullopt);
  CHECK(lab::allowed_list_with("", "cubic") == "cubic");
}
