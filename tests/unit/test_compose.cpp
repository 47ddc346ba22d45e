// The docker-compose file of a lab: golden output, the shipped docker-compose.yml, and the
// topologies a compose lab refuses.
#include <catch2/catch.hpp>

#include "golden.hpp"
#include "wanlab/compose/compose.hpp"
#include "wanlab/core/address_plan.hpp"
#include "wanlab/core/topology.hpp"

using namespace wanlab;
using Catch::Matchers::Contains;

namespace {

const std::string kSource = WANLAB_SOURCE_DIR;

core::Topology two_dc(const std::string& lan = "") {
  auto doc = nlohmann::json::parse(R"({
    "name": "t",
    "dcs": [ {"name": "use", "nodes": 2}, {"name": "euw", "nodes": 1} ],
    "wan": [ {"between": ["use", "euw"], "rtt": "84.9ms", "rate": "100Mbit"} ]
  })");
  if (!lan.empty()) doc["lan"] = nlohmann::json::parse(lan);
  return core::parse_topology(doc, "topologies/t.json", ".");
}

}  // namespace

TEST_CASE("the compose file of a lab matches its golden file", "[unit][compose]") {
  compose::ComposeOptions o;
  o.topology = "topologies/t.json";
  o.command = "wanlab compose topologies/t.json";
  test::check_golden("compose-two-dc.yml", compose::compose_file(two_dc(), o));

  SECTION("with a scenario the controller benchmarks it once the lab is up") {
    o.scenario = "bench/scenarios/t-1b.json";
    const auto y = compose::compose_file(two_dc(), o);
    CHECK_THAT(y, Contains(R"("--then", "wanlab bench bench/scenarios/t-1b.json"])"));
    o.bench = false;
    CHECK_THAT(compose::compose_file(two_dc(), o), !Contains("--then"));
  }
}

TEST_CASE("compose --monitoring: Prometheus scrapes the controller's /metrics, the dashboard is published",
          "[unit][compose][metrics]") {
  compose::ComposeOptions o;
  o.topology = "topologies/t.json";
  o.command = "wanlab compose --monitoring topologies/t.json";
  o.monitoring = true;
  const auto y = compose::compose_file(two_dc(), o);
  test::check_golden("compose-two-dc-monitoring.yml", y);
  CHECK_THAT(y, Contains(R"("--metrics", "0.0.0.0:9464")"));
  CHECK_THAT(y, Contains("  prometheus:\n    build: {context: docker/prometheus, network: host}"));
  CHECK_THAT(y, Contains(R"(ports: ["127.0.0.1:9090:9090"])"));
  CHECK_THAT(y, Contains(R"(ports: ["127.0.0.1:8080:8080"])"));
  CHECK_THAT(y, Contains("controller:9464"));
  CHECK_THAT(y, Contains("scrape_interval: 1s"));
  CHECK_THAT(y, Contains("credentials:"));
  CHECK_THAT(y, Contains("\"wanlab-run:/run/wanlab\""));
  // The DC networks stay internal; only the monitoring one is not.
  CHECK_THAT(y, Contains("  monitoring:\n    name: \"t-monitoring\"\n    driver: bridge\n    labels"));
  // Without the option nothing of it.
  o.monitoring = false;
  o.command = "wanlab compose topologies/t.json";
  const auto plain = compose::compose_file(two_dc(), o);
  CHECK_THAT(plain, !Contains("prometheus") && !Contains("--metrics") && !Contains("monitoring"));
}

TEST_CASE("the shipped docker-compose.yml is `wanlab compose` of the default lab", "[unit][compose]") {
  const auto topo = core::load_topology(kSource + "/topologies/three-dc.json");
  compose::ComposeOptions o;
  o.topology = "topologies/three-dc.json";
  o.scenario = "bench/scenarios/three-dc-7b.json";
  o.command = "wanlab compose topologies/three-dc.json --scenario bench/scenarios/three-dc-7b.json";
  const auto expected = compose::compose_file(topo, o);
  INFO("regenerate it: build/controller/wanlab compose topologies/three-dc.json --scenario "
       "bench/scenarios/three-dc-7b.json > docker-compose.yml");
  CHECK(test::read_text(kSource + "/docker-compose.yml") == expected);

  SECTION("every node is a container at its address, routing via the controller at its DC's gateway address") {
    CHECK_THAT(expected, Contains("euw: {ipv4_address: 198.18.8.1}"));
    CHECK_THAT(expected, Contains("usw: {ipv4_address: 198.18.4.5}"));
    CHECK_THAT(expected, Contains(R"("tcp:198.18.4.1:7070", "--node", "usw-3"])"));
    CHECK_THAT(expected, Contains("- {subnet: 198.18.8.0/22, gateway: 198.18.11.254}"));
    CHECK_THAT(expected, Contains(R"(container_name: "three-dc-euw-3")"));
  }
}

TEST_CASE("topologies a compose lab cannot be", "[unit][compose]") {
  compose::ComposeOptions o;
  o.topology = "topologies/t.json";
  CHECK_THROWS_WITH(compose::compose_file(two_dc(R"({"delay": "1ms"})"), o),
                    Contains("topologies/t.json: /lan: a compose lab cannot shape the LAN"));
  auto big = two_dc();
  big.dcs[1].nodes = compose::kMaxComposeNodes + 1;
  CHECK_THROWS_WITH(compose::compose_file(big, o), Contains("/dcs/1/nodes: DC euw has 1021 nodes"));
  big.dcs[1].nodes = compose::kMaxComposeNodes;
  CHECK_NOTHROW(compose::compose_file(big, o));
}

TEST_CASE("the swarm stack of a lab matches its golden file", "[unit][compose][swarm]") {
  compose::ComposeOptions o;
  o.topology = "topologies/t.json";
  o.scenario = "bench/scenarios/t-1b.json";
  o.command = "wanlab compose topologies/t.json --scenario bench/scenarios/t-1b.json --swarm";
  test::check_golden("stack-two-dc.yml", compose::stack_file(two_dc(), o));
  const auto y = compose::stack_file(two_dc(), o);
  // No static address anywhere: Swarm ignores them; the overlays' subnets are the upper /23s.
  CHECK_THAT(y, !Contains("ipv4_address"));
  CHECK_THAT(y, Contains("subnet: 198.18.2.0/23") && Contains("subnet: 198.18.6.0/23"));
  CHECK_THAT(y, Contains("driver: overlay") && Contains("attachable: true") && Contains("internal: true"));
  CHECK_THAT(y, Contains("endpoint_mode: dnsrr"));
  CHECK_THAT(y, Contains(R"("--router-only", "--swarm")"));
  CHECK_THAT(y, Contains(R"("node-setup", "--swarm", "controller", "topologies/t.json", "use-1")"));
  CHECK_THAT(y, Contains(R"("tcp:controller:7070")"));
  CHECK_THAT(y, Contains(R"(constraints: ["node.labels.wanlab.euw == true"])"));
  CHECK_THAT(y, Contains(R"(file: "./bench/scenarios/t-1b.json")"));
  CHECK_THAT(y, Contains(R"(name: "t-results")"));
  // The token is the external secret <lab>-token in every service; no default token.
  CHECK_THAT(y, !Contains("${WANLAB_TOKEN") && !Contains("environment"));
  CHECK_THAT(y, Contains("secrets:\n  token:\n    external: true\n    name: \"t-token\""));
  CHECK_THAT(y, Contains(R"("--token-file", "/run/secrets/wanlab-token")"));
  // The control API: served with the token, published in host mode on the controller's host,
  // which is also on a network that is not internal (publishing needs one).
  CHECK_THAT(y, Contains(R"("--api", "0.0.0.0:7071")"));
  CHECK_THAT(y, Contains("ports: [{target: 7071, published: 7071, protocol: tcp, mode: host}]"));
  CHECK_THAT(y, Contains(R"(networks: ["use", "euw", "control"])"));
  CHECK_THAT(y, Contains("  control:\n    name: \"t-control\"\n    driver: overlay\n    attachable: true\n    labels"));

  SECTION("another published API port") {
    o.api_port = 17071;
    CHECK_THAT(compose::stack_file(two_dc(), o), Contains("published: 17071, protocol: tcp, mode: host"));
    o.api_port = compose::kAgentPort;
    CHECK_THROWS_WITH(compose::stack_file(two_dc(), o), Contains("--api-port 7070: not a port"));
    o.api_port = 0;
    CHECK_THROWS_WITH(compose::stack_file(two_dc(), o), Contains("--api-port 0: not a port"));
  }
  SECTION("hosts named per DC or for the controller replace the labels") {
    o.hosts = {{"euw", "gpu-box-2"}, {"controller", "mgr"}};
    o.project = "/srv/wanlab";
    const auto h = compose::stack_file(two_dc(), o);
    CHECK_THAT(h, Contains(R"(constraints: ["node.hostname == gpu-box-2"])"));
    CHECK_THAT(h, Contains(R"(constraints: ["node.hostname == mgr"])"));
    CHECK_THAT(h, Contains(R"(constraints: ["node.labels.wanlab.use == true"])"));
    CHECK_THAT(h, Contains(R"(file: "/srv/wanlab/topologies/t.json")"));
  }
  SECTION("without a scenario the controller only brings the lab up") {
    o.scenario.reset();
    o.command = "wanlab compose topologies/t.json --swarm";
    CHECK_THAT(compose::stack_file(two_dc(), o), !Contains("--then") && !Contains("bench/scenarios"));
  }
  SECTION("traces are configs too") {
    o.traces = {"traces/a.csv"};
    CHECK_THAT(compose::stack_file(two_dc(), o),
               Contains(R"(target: "/wanlab/traces/a.csv")") && Contains(R"(file: "./traces/a.csv")"));
  }
}

TEST_CASE("topologies and placements a swarm stack refuses", "[unit][compose][swarm]") {
  compose::ComposeOptions o;
  o.topology = "topologies/t.json";
  CHECK_THROWS_WITH(compose::stack_file(two_dc(R"({"rate": "1Gbit"})"), o),
                    Contains("topologies/t.json: /lan: a swarm lab cannot shape the LAN"));
  auto big = two_dc();
  big.dcs[0].nodes = core::kMaxSwarmNodesPerDc + 1;
  CHECK_THROWS_WITH(compose::stack_file(big, o), Contains("/dcs/0/nodes: DC use has 510 nodes; a swarm lab has at most 509"));
  big.dcs[0].nodes = core::kMaxSwarmNodesPerDc;
  CHECK_NOTHROW(compose::stack_file(big, o));
  o.hosts = {{"usw", "h1"}};
  CHECK_THROWS_WITH(compose::stack_file(two_dc(), o), Contains("--host usw=h1: lab t has no DC usw; name one of controller, use, euw"));
  o.hosts.clear();
  auto control = two_dc();
  control.dcs[1].name = "control";
  CHECK_THROWS_WITH(compose::stack_file(control, o), Contains("a swarm lab cannot have a DC named control"));
}
