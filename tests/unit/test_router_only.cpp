// Router-only labs (containers) as data: finding the router's ports and the node's interface
// by address, and the golden plans of the router and of a node.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include "golden.hpp"
#include "wanlab/core/address_plan.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/lab/plan.hpp"
#include "wanlab/lab/router_only.hpp"

using namespace wanlab;
using Catch::Matchers::Contains;
using wanlab::test::check_golden;

namespace {

// use <-> euw and use <-> apne; euw and apne have no link between them.
core::Topology small_topology() {
  auto doc = nlohmann::json::parse(R"({
    "name": "t",
    "dcs": [ {"name": "use", "nodes": 2}, {"name": "euw", "nodes": 1}, {"name": "apne", "nodes": 1} ],
    "wan": [
      {"between": ["use", "euw"], "rtt": "84.9ms", "rate": "100Mbit", "jitter": "1ms", "loss": "0.1%"},
      {"between": ["use", "apne"], "delay": "80ms", "rate": "50Mbit", "queue": "500p"}
    ]
  })");
  return core::parse_topology(doc, "test.json", ".");
}

std::uint32_t ip(const char* text) {
  unsigned a, b, c, d;
  REQUIRE(std::sscanf(text, "%u.%u.%u.%u", &a, &b, &c, &d) == 4);
  return a << 24 | b << 16 | c << 8 | d;
}

// A container on the three DC networks, its interfaces numbered in another order than the DCs.
std::vector<netlink::InterfaceAddress> controller_addresses() {
  return {{"lo", ip("127.0.0.1"), 8},
          {"eth0", ip("198.18.8.1"), 22},
          {"eth1", ip("198.18.0.1"), 22},
          {"eth2", ip("198.18.4.1"), 22}};
}

std::string render(const lab::Plan& plan) {
  std::string out;
  for (const auto& op : plan.ops) out += lab::to_string(op) + "\n";
  return out;
}

}  // namespace

TEST_CASE("router ports are found by the DC gateways' addresses, not by interface order", "[unit][router-only]") {
  const auto topo = small_topology();
  CHECK(lab::find_router_ports(topo, controller_addresses()) == std::vector<std::string>{"eth1", "eth2", "eth0"});

  SECTION("a DC without its network is named with the address it needs, and what the interfaces hold") {
    auto addrs = controller_addresses();
    addrs.erase(addrs.begin() + 3);  // no euw network
    CHECK_THROWS_WITH(lab::find_router_ports(topo, addrs),
                      Contains("DC euw (198.18.4.1/22 on its network 198.18.4.0/22)") &&
                          Contains("eth0 198.18.8.1/22") && Contains("lo 127.0.0.1/8"));
  }
  SECTION("a node's address on the DC network is not the router's") {
    auto addrs = controller_addresses();
    addrs[2].address = ip("198.18.0.2");
    CHECK_THROWS_WITH(lab::find_router_ports(topo, addrs), Contains("DC use (198.18.0.1/22"));
  }
  SECTION("the right address with another prefix length is not the DC's network") {
    auto addrs = controller_addresses();
    addrs[1].prefix_len = 24;
    CHECK_THROWS_WITH(lab::find_router_ports(topo, addrs), Contains("DC apne"));
  }
}

TEST_CASE("router-only plans match their golden operation lists", "[unit][router-only][plan]") {
  const auto topo = small_topology();
  const std::vector<std::string> ports = {"eth1", "eth2", "eth0"};
  const auto kernel = lab::plan_router(topo, ports, {.netem = true});
  const auto userspace = lab::plan_router(topo, ports, {.backend = lab::Backend::userspace});
  check_golden("router-only-netem.txt", render(kernel));
  check_golden("router-only-userspace.txt", render(userspace));

  SECTION("no namespace is made or named; every operation acts here") {
    for (const auto* plan : {&kernel, &userspace}) {
      CHECK(plan->namespaces.empty());
      for (const auto& op : plan->ops) CHECK(lab::op_namespace(op) == lab::kOwnNetns);
    }
  }
  SECTION("the kernel forwards only with the kernel backend; the engine forwards otherwise") {
    for (const auto& op : kernel.ops)
      if (const auto* f = std::get_if<lab::SetForwarding>(&op)) CHECK(f->on);
    int off = 0;
    for (const auto& op : userspace.ops) {
      CHECK_FALSE(std::holds_alternative<lab::AddHtbQdisc>(op));
      if (const auto* f = std::get_if<lab::SetForwarding>(&op)) off += f->on ? 0 : 1;
    }
    CHECK(off == 3);
  }
  SECTION("the router's ports keep their offloads with the userspace backend") {
    auto offloads = [](const lab::Plan& p) {
      return std::count_if(p.ops.begin(), p.ops.end(),
                           [](const auto& op) { return std::holds_alternative<lab::DisableOffloads>(op); });
    };
    CHECK(offloads(kernel) == 3);
    CHECK(offloads(userspace) == 0);
  }
  SECTION("the WAN traffic control is the namespace lab's, on the ports toward each destination") {
    const auto full = lab::plan_lab(topo, {.netem = true});
    std::vector<std::string> from_lab, from_router;
    auto wan_ops = [](const lab::Plan& p, const std::vector<std::string>& ifnames, std::vector<std::string>& out) {
      for (const auto& op : p.ops) {
        std::visit(
            [&](const auto& o) {
              using T = std::decay_t<decltype(o)>;
              if constexpr (std::is_same_v<T, lab::AddHtbQdisc> || std::is_same_v<T, lab::AddHtbClass> ||
                            std::is_same_v<T, lab::AddNetem> || std::is_same_v<T, lab::AddSrcFilter>) {
                const auto it = std::find(ifnames.begin(), ifnames.end(), o.ifname);
                if (it != ifnames.end()) {
                  auto copy = o;
                  copy.ns = "router";
                  copy.ifname = fmt::format("to-dc{}", it - ifnames.begin());
                  out.push_back(lab::to_string(copy));
                }
              }
            },
            op);
      }
    };
    wan_ops(full, {"to-use", "to-euw", "to-apne"}, from_lab);
    wan_ops(kernel, ports, from_router);
    CHECK(from_lab.size() == 3 + 4 * 3);  // a qdisc per destination DC, then class, leaf and filter per link
    CHECK(from_router == from_lab);
  }
  SECTION("one port per DC") {
    CHECK_THROWS(lab::plan_router(topo, {"eth0", "eth1"}, {}));
  }
}

TEST_CASE("a node of a router-only lab", "[unit][router-only]") {
  const auto topo = small_topology();
  const std::vector<netlink::InterfaceAddress> node_addrs = {{"lo", ip("127.0.0.1"), 8},
                                                             {"eth0", ip("198.18.0.3"), 22}};
  CHECK(lab::find_node(topo, "use-1") == std::pair<std::size_t, int>{0, 1});
  CHECK(lab::find_node_interface(topo, "use-1", node_addrs) == "eth0");
  CHECK_THROWS_WITH(lab::find_node_interface(topo, "use-0", node_addrs),
                    Contains("node use-0's address 198.18.0.2/22") && Contains("eth0 198.18.0.3/22"));
  CHECK_THROWS_WITH(lab::find_node(topo, "usw-0"), Contains("no node 'usw-0'") && Contains("use-0, use-1, euw-0, apne-0"));

  // use routes both other DCs; euw only use (no euw <-> apne link: apne stays unreachable).
  check_golden("router-only-node-use-1.txt", render(lab::plan_node(topo, "use-1", "eth0", lab::Backend::kernel)));
  const auto euw = lab::plan_node(topo, "euw-0", "eth0", lab::Backend::kernel);
  check_golden("router-only-node-euw-0.txt", render(euw));
  int routes = 0;
  for (const auto& op : euw.ops)
    if (const auto* r = std::get_if<lab::AddRoute>(&op)) {
      ++routes;
      CHECK(r->dst == core::dc_subnet(0));
      CHECK(r->via == core::dc_gateway(1));
    }
  CHECK(routes == 1);

  SECTION("offloads go off only for the kernel backend (netem's qdiscs see MTU-sized packets)") {
    const auto kernel = lab::plan_node(topo, "use-1", "eth0", lab::Backend::kernel);
    const auto userspace = lab::plan_node(topo, "use-1", "eth0", lab::Backend::userspace);
    auto offloads = [](const lab::Plan& p) {
      return std::count_if(p.ops.begin(), p.ops.end(),
                           [](const auto& op) { return std::holds_alternative<lab::DisableOffloads>(op); });
    };
    CHECK(offloads(kernel) == 1);
    CHECK(offloads(userspace) == 0);
    CHECK(userspace.ops.size() == kernel.ops.size() - 1);
  }
}

TEST_CASE("node hardware addresses follow the address plan", "[unit][router-only]") {
  CHECK(core::mac_text(core::node_mac(0, 0)) == "02:57:4c:12:00:02");
  CHECK(core::mac_text(core::node_mac(1, 2)) == "02:57:4c:12:04:04");
  CHECK(core::mac_text(core::node_mac(63, 1020)) == "02:57:4c:12:ff:fe");
}

TEST_CASE("a swarm lab's router finds its ports by the DCs' subnets, Docker having chosen the addresses",
          "[unit][router-only][swarm]") {
  const auto topo = small_topology();
  // Docker's addresses: the upper /23 of each DC's /22, interfaces in another order.
  const std::vector<netlink::InterfaceAddress> addrs = {{"lo", ip("127.0.0.1"), 8},
                                                        {"eth0", ip("198.18.10.7"), 23},
                                                        {"eth1", ip("198.18.2.3"), 23},
                                                        {"eth2", ip("198.18.6.2"), 23}};
  CHECK(lab::find_swarm_router_ports(topo, addrs) == std::vector<std::string>{"eth1", "eth2", "eth0"});
  // A compose lab's router would look for the gateways' addresses and find none.
  CHECK_THROWS_WITH(lab::find_router_ports(topo, addrs), Contains("no interface here holds the router address"));
  auto without_euw = addrs;
  without_euw.erase(without_euw.begin() + 3);
  CHECK_THROWS_WITH(lab::find_swarm_router_ports(topo, without_euw),
                    Contains("DC euw (an address in 198.18.4.0/22)") && Contains("eth1 198.18.2.3/23"));
  // A wider prefix (another network's) does not count.
  const std::vector<netlink::InterfaceAddress> wide = {{"eth0", ip("198.18.2.3"), 16}};
  CHECK_THROWS(lab::find_swarm_router_ports(topo, wide));

  lab::PlanOptions o;
  o.backend = lab::Backend::userspace;
  const auto plan = lab::plan_swarm_router(topo, {"eth1", "eth2", "eth0"}, o);
  std::vector<std::string> routes;
  for (const auto& op : plan.ops)
    if (const auto* r = std::get_if<lab::AddRoute>(&op))
      routes.push_back(fmt::format("{} via {} dev {}", r->dst.to_string(), r->via.to_string(), r->ifname));
  CHECK(routes == std::vector<std::string>{"198.18.0.0/22 via 0.0.0.0 dev eth1", "198.18.4.0/22 via 0.0.0.0 dev eth2",
                                           "198.18.8.0/22 via 0.0.0.0 dev eth0"});
  CHECK(plan.ops.size() == lab::plan_router(topo, {"eth1", "eth2", "eth0"}, o).ops.size() + 3);
}

TEST_CASE("a swarm lab's node adds the plan's address and routes via the router's resolved address",
          "[unit][router-only][swarm]") {
  const auto topo = small_topology();
  const std::vector<netlink::InterfaceAddress> addrs = {{"lo", ip("127.0.0.1"), 8}, {"eth0", ip("198.18.2.9"), 23}};
  CHECK(lab::find_swarm_node_interface(topo, "use-1", addrs) == "eth0");
  CHECK_THROWS_WITH(lab::find_swarm_node_interface(topo, "euw-0", addrs),
                    Contains("no interface here is on DC euw's network 198.18.4.0/22"));
  const core::Ipv4 router{ip("198.18.3.17")};
  check_golden("swarm-node-use-1.txt",
               render(lab::plan_swarm_node(topo, "use-1", "eth0", router, lab::Backend::userspace)));
  const auto plan = lab::plan_swarm_node(topo, "use-1", "eth0", router, lab::Backend::kernel);
  bool mac = false;
  int routes = 0;
  for (const auto& op : plan.ops) {
    mac = mac || std::holds_alternative<lab::SetMac>(op);  // remote VXLAN tables know Docker's only
    if (const auto* r = std::get_if<lab::AddRoute>(&op)) {
      CHECK(r->via == router);
      ++routes;
    }
  }
  CHECK_FALSE(mac);
  CHECK(routes == 2);
  CHECK_THROWS_WITH(lab::plan_swarm_node(topo, "euw-0", "eth0", router, lab::Backend::kernel),
                    Contains("the router's address 198.18.3.17 is not on DC euw's network 198.18.4.0/22"));
}

TEST_CASE("swarm task addresses take the upper half of each DC's /22, clear of the plan's nodes",
          "[unit][router-only][swarm]") {
  CHECK(core::swarm_task_subnet(0).to_string() == "198.18.2.0/23");
  CHECK(core::swarm_task_subnet(2).to_string() == "198.18.10.0/23");
  for (int dc : {0, 5, 63}) {
    CHECK(core::dc_subnet(dc).contains(core::swarm_task_subnet(dc).address));
    CHECK_FALSE(core::swarm_task_subnet(dc).contains(core::node_address(dc, core::kMaxSwarmNodesPerDc - 1)));
    CHECK(core::swarm_task_subnet(dc).contains(core::node_address(dc, core::kMaxSwarmNodesPerDc + 1)));
  }
}
