// Rail fabrics in topology files (docs/rails.md): what parses, the canonical form, and one
// clear error per bad setting, naming the file, the field and the reason; the rails' power and
// cost; and the lab's plan for them (the rail switch's namespace, every node's rail ports).
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>
#include <vector>

#include "wanlab/core/address_plan.hpp"
#include "wanlab/core/fabric_cost.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/lab/plan.hpp"
#include "wanlab/lab/router_only.hpp"

using namespace wanlab;
using namespace wanlab::core;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

// One DC of 4 nodes x 8 GPUs whose fabric is `fabric`.
json one_dc(const json& fabric) {
  json doc = json::parse(R"({"name": "r", "dcs": [{"name": "a", "nodes": 4, "gpus_per_node": 8}]})");
  doc["dcs"][0]["fabric"] = fabric;
  return doc;
}

json ocs() {
  return json::parse(R"({"type": "rails", "switching": "ocs", "rails": 8, "port_rate": "400Gbit",
                         "reconfiguration": "10ms"})");
}

std::vector<Diagnostic> problems(const json& doc) {
  try {
    parse_topology(doc, "r.json", {});
  } catch (const ConfigError& e) {
    return e.diagnostics();
  }
  FAIL("expected a ConfigError");
  return {};
}

}  // namespace

TEST_CASE("rails: an OCS rail fabric parses and round-trips", "[rails][topology]") {
  const auto t = parse_topology(one_dc(ocs()), "r.json", {});
  const auto& f = t.dcs[0].fabric;
  CHECK(f.kind == Fabric::Kind::rails);
  CHECK(f.ocs());
  CHECK(f.rails == 8);
  CHECK(f.port_rate.bps == 400'000'000'000ULL);
  CHECK(f.reconfiguration == 10ms);
  CHECK(to_string(f) == "rails (ocs, 8 x 400Gbit, 10ms)");
  const auto back = parse_topology(to_json(t), "r.json", {});
  CHECK(back.dcs[0].fabric == f);
  CHECK(topology_differences(t, back).empty());
}

TEST_CASE("rails: the default fabric is one packet LAN, and rails may leave out their count", "[rails][topology]") {
  auto doc = one_dc("packet");
  CHECK(parse_topology(doc, "r.json", {}).dcs[0].fabric.kind == Fabric::Kind::packet);
  doc["dcs"][0].erase("fabric");
  const auto plain = parse_topology(doc, "r.json", {});
  CHECK(plain.dcs[0].fabric == Fabric{});
  CHECK_FALSE(to_json(plain)["dcs"][0].contains("fabric"));  // today's files stay as they are
  auto f = json::parse(R"({"type": "rails", "switching": "packet", "port_rate": "400Gbit"})");
  const auto t = parse_topology(one_dc(f), "r.json", {});
  CHECK(t.dcs[0].fabric.rails == 8);
  CHECK_FALSE(t.dcs[0].fabric.ocs());
  CHECK(topology_differences(t, plain) ==
        std::vector<std::string>{"DC a: fabric rails (packet, 8 x 400Gbit) (running) vs packet"});
}

TEST_CASE("rails: a reconfiguration latency from 10us to 25ms is accepted", "[rails][topology]") {
  for (const auto* latency : {"10us", "1ms", "25ms", "0"}) {
    auto f = ocs();
    f["reconfiguration"] = latency;
    CHECK_NOTHROW(parse_topology(one_dc(f), "r.json", {}));
  }
}

TEST_CASE("rails: a rail count other than GPUs per node is one error", "[rails][topology]") {
  auto f = ocs();
  f["rails"] = 4;
  const auto ds = problems(one_dc(f));
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].file == "r.json");
  CHECK(ds[0].path == "/dcs/0/fabric/rails");
  CHECK_THAT(ds[0].reason, Contains("4 rails in a DC of 8 GPUs per node"));
}

TEST_CASE("rails: a negative reconfiguration latency is one error", "[rails][topology]") {
  auto f = ocs();
  f["reconfiguration"] = "-10us";
  const auto ds = problems(one_dc(f));
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].path == "/dcs/0/fabric/reconfiguration");
  CHECK_THAT(ds[0].reason, Contains("must not be negative"));
  CHECK_THAT(ds[0].to_string(), Contains("r.json: /dcs/0/fabric/reconfiguration: '-10us'"));
}

TEST_CASE("rails: an unknown switching kind is one error", "[rails][topology]") {
  auto f = ocs();
  f["switching"] = "optical";
  const auto ds = problems(one_dc(f));
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].path == "/dcs/0/fabric/switching");
  CHECK_THAT(ds[0].reason, Contains("packet") && Contains("ocs"));
}

TEST_CASE("rails: other bad settings, one error each", "[rails][topology]") {
  struct Case {
    json fabric;
    std::string path, reason;
  };
  auto no_rate = ocs();
  no_rate.erase("port_rate");
  auto no_latency = ocs();
  no_latency.erase("reconfiguration");
  auto slow = ocs();
  slow["reconfiguration"] = "2s";
  auto packet_latency = ocs();
  packet_latency["switching"] = "packet";
  auto drop = ocs();
  drop["during_reconfiguration"] = "drop";
  auto zero = ocs();
  zero["port_rate"] = "0bit";
  const std::vector<Case> cases{
      {no_rate, "/dcs/0/fabric/port_rate", "missing"},
      {no_latency, "/dcs/0/fabric/reconfiguration", "missing"},
      {slow, "/dcs/0/fabric/reconfiguration", "no optical circuit switch takes that long"},
      {packet_latency, "/dcs/0/fabric/reconfiguration", "only an OCS"},
      {drop, "/dcs/0/fabric/during_reconfiguration", "hold"},
      {zero, "/dcs/0/fabric/port_rate", "must be positive"},
      {json("rails"), "/dcs/0/fabric", "port rate"},
      {json("ring"), "/dcs/0/fabric", "rails"},
      {json::parse(R"({"type": "rails", "switching": "ocs"})"), "/dcs/0/fabric/port_rate", "missing"},
  };
  for (const auto& c : cases) {
    INFO(c.fabric.dump());
    const auto ds = problems(one_dc(c.fabric));
    REQUIRE(ds.size() >= 1);
    CHECK(ds[0].path == c.path);
    CHECK_THAT(ds[0].reason, Contains(c.reason));
  }
}

TEST_CASE("rails: the power and cost of electrical against OCS rails", "[rails][cost]") {
  auto dc = parse_topology(one_dc(ocs()), "r.json", {}).dcs[0];
  dc.nodes = 32;  // one 64-port switch per rail
  auto b = rails_bill(dc);
  CHECK(b.packet.endpoints == 256);
  CHECK(b.packet.tiers == 1);
  CHECK(b.packet.switch_ports == 256);
  CHECK(b.packet.transceivers == 256);
  CHECK(b.packet.power_w == Approx(256 * (11.7 + 8.5)));
  CHECK(b.ocs.power_w == Approx(256 * 0.8));
  CHECK(b.power_ratio() == Approx(20.2 / 0.8));
  CHECK(b.cost_ratio() == Approx(1050.0 / 520));
  CHECK(b.nic_power_w == Approx(256 * 8.5));
  dc.nodes = 256;  // two tiers per rail: 3 switch ports and 3 transceivers per GPU port
  b = rails_bill(dc);
  CHECK(b.packet.tiers == 2);
  CHECK(b.packet.switch_ports == 3 * 2048);
  CHECK(b.power_ratio() == Approx(3 * 20.2 / 0.8));
  dc.nodes = 4096;
  CHECK(rails_bill(dc).packet.tiers == 3);
  dc.fabric.port_rate.bps = 800'000'000'000ULL;  // switch ports and optics scale, OCS mirrors do not
  dc.nodes = 32;
  CHECK(rails_bill(dc).power_ratio() == Approx(2 * 20.2 / 0.8));
}

TEST_CASE("rails: the lab builds a rails DC's switch namespace and every node's rail ports", "[rails][lab]") {
  const auto topo = parse_topology(one_dc(ocs()), "r.json", {});
  const auto plan = lab::plan_lab(topo, {.backend = lab::Backend::userspace});
  CHECK(std::find(plan.namespaces.begin(), plan.namespaces.end(), "r.rails-a") != plan.namespaces.end());
  int veths = 0, macs = 0, addresses = 0;
  for (const auto& op : plan.ops) {
    if (const auto* v = std::get_if<lab::CreateVeth>(&op); v && v->ns == "r.rails-a") {
      ++veths;
      CHECK(v->peer.rfind("rail", 0) == 0);
    }
    if (const auto* m = std::get_if<lab::SetMac>(&op); m && m->ifname == "rail3" && m->ns == "r.a-2") {
      ++macs;
      CHECK(m->mac == rail_mac(0, 3, 2));
    }
    if (const auto* a = std::get_if<lab::AddAddress>(&op); a && a->ifname == "rail3" && a->ns == "r.a-2") {
      ++addresses;
      CHECK(a->prefix.to_string() == "198.19.19.3/24");
    }
  }
  CHECK(veths == 4 * 8);  // a port per node and rail
  CHECK(macs == 1);
  CHECK(addresses == 1);
  // The node keeps its LAN (the WAN, the agents' channel) beside its rails.
  CHECK(std::any_of(plan.ops.begin(), plan.ops.end(), [](const lab::Op& op) {
    const auto* a = std::get_if<lab::AddAddress>(&op);
    return a && a->ns == "r.a-2" && a->ifname == "a-2";
  }));
}

TEST_CASE("rails: the rails' addresses: one /24 per DC and rail, a port per node", "[rails][lab]") {
  CHECK(rail_subnet(0, 0).to_string() == "198.19.16.0/24");
  CHECK(rail_subnet(2, 5).to_string() == "198.19.53.0/24");
  CHECK(rail_address(1, 7, 0).to_string() == "198.19.39.1");
  const auto back = rail_port_of(rail_address(14, 15, 252));
  REQUIRE(back);
  CHECK((*back == std::array<int, 3>{14, 15, 252}));
  CHECK_FALSE(rail_port_of(node_address(0, 1)));
  CHECK_FALSE(rail_port_of(transit_router_side(3).address));
  CHECK_THROWS_AS(rail_address(15, 0, 0), std::out_of_range);
  CHECK_THROWS_AS(rail_address(0, 16, 0), std::out_of_range);
  CHECK_THROWS_AS(rail_address(0, 0, 253), std::out_of_range);
  CHECK(mac_text(rail_mac(0, 1, 2)) == "02:57:52:13:11:03");
}

TEST_CASE("rails: what of a rails DC the lab cannot build is one error each", "[rails][lab]") {
  const auto refused = [](const json& doc, const lab::PlanOptions& o) {
    try {
      lab::plan_lab(parse_topology(doc, "r.json", {}), o);
    } catch (const ConfigError& e) {
      return e.diagnostics();
    }
    FAIL("expected a ConfigError");
    return std::vector<Diagnostic>{};
  };
  // The kernel backend: circuits are the userspace engine's.
  auto d = refused(one_dc(ocs()), {.backend = lab::Backend::kernel});
  REQUIRE(d.size() == 1);
  CHECK(d[0].path == "/dcs/0/fabric");
  CHECK_THAT(d[0].reason, Contains("--backend userspace"));
  // More nodes than a rail's /24 holds.
  auto big = one_dc(ocs());
  big["dcs"][0]["nodes"] = 300;
  d = refused(big, {.backend = lab::Backend::userspace});
  REQUIRE(d.size() == 1);
  CHECK(d[0].path == "/dcs/0/nodes");
  CHECK_THAT(d[0].reason, Contains("at most 253"));
  // A router-only lab (containers).
  try {
    lab::plan_router(parse_topology(one_dc(ocs()), "r.json", {}), {"eth0"}, {.backend = lab::Backend::userspace});
    FAIL("expected a ConfigError");
  } catch (const ConfigError& e) {
    REQUIRE(e.diagnostics().size() == 1);
    CHECK_THAT(e.diagnostics()[0].reason, Contains("router-only"));
  }
}
