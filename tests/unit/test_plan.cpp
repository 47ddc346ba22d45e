// The lab plan as data: golden operation lists and invariants every plan must keep.
#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "golden.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/lab/apply.hpp"
#include "wanlab/lab/naming.hpp"
#include "wanlab/lab/plan.hpp"
#include "wanlab/lab/wan_tc.hpp"

using namespace wanlab;
using wanlab::test::check_golden;

namespace {

core::Topology small_topology(const std::string& extra_lan = "") {
  auto doc = nlohmann::json::parse(R"({
    "name": "t",
    "dcs": [ {"name": "use", "nodes": 2}, {"name": "euw", "nodes": 1}, {"name": "apne", "nodes": 1} ],
    "wan": [
      {"between": ["use", "euw"], "rtt": "84.9ms", "rate": "100Mbit", "jitter": "1ms", "loss": "0.1%"},
      {"between": ["use", "apne"], "delay": "80ms", "rate": "50Mbit", "queue": "500p"}
    ]
  })");
  if (!extra_lan.empty()) doc["lan"] = nlohmann::json::parse(extra_lan);
  return core::parse_topology(doc, "test.json", ".");
}

std::string render(const lab::Plan& plan) {
  std::string out;
  for (const auto& op : plan.ops) out += lab::to_string(op) + "\n";
  return out;
}

}  // namespace

TEST_CASE("plan of a three-DC lab matches its golden operation list", "[unit][plan]") {
  const auto topo = small_topology();
  check_golden("plan-netem.txt", render(lab::plan_lab(topo, {.netem = true})));
  check_golden("plan-no-netem.txt", render(lab::plan_lab(topo, {.netem = false})));
  check_golden("plan-userspace.txt", render(lab::plan_lab(topo, {.backend = lab::Backend::userspace})));
  check_golden("plan-lan-shaped.txt",
               render(lab::plan_lab(small_topology(R"({"rate": "10Gbit", "delay": "50us"})"), {.netem = true})));
}

TEST_CASE("plan invariants", "[unit][plan]") {
  const auto topo = small_topology();
  const auto plan = lab::plan_lab(topo, {.netem = true});

  SECTION("namespaces: router, a gateway per DC, one per node, all carrying the lab prefix") {
    CHECK(plan.namespaces.size() == 1 + 3 + 4);
    CHECK(plan.namespaces.front() == "t.router");
    for (const auto& ns : plan.namespaces) CHECK(ns.starts_with("t."));
    CHECK(std::count(plan.namespaces.begin(), plan.namespaces.end(), "t.use-1") == 1);
  }

  SECTION("every operation acts in a namespace created earlier in the plan") {
    std::set<std::string> created;
    for (const auto& op : plan.ops) {
      if (auto* c = std::get_if<lab::CreateNetns>(&op)) {
        CHECK(created.insert(c->ns).second);
        continue;
      }
      INFO(lab::to_string(op));
      CHECK(created.count(lab::op_namespace(op)) == 1);
      if (auto* v = std::get_if<lab::CreateVeth>(&op)) CHECK(created.count(v->peer_ns) == 1);
    }
    CHECK(created.size() == plan.namespaces.size());
  }

  SECTION("each directed WAN link gets one HTB class, one netem leaf and one source filter") {
    std::map<std::string, int> classes, leaves, filters;
    for (const auto& op : plan.ops) {
      if (auto* c = std::get_if<lab::AddHtbClass>(&op)) classes[c->ifname + c->classid.to_string()]++;
      if (auto* n = std::get_if<lab::AddNetem>(&op)) leaves[n->ifname + n->parent.to_string()]++;
      if (auto* f = std::get_if<lab::AddSrcFilter>(&op)) filters[f->ifname + f->flowid.to_string()]++;
    }
    CHECK(classes.size() == topo.links.size());
    CHECK(leaves.size() == topo.links.size());
    CHECK(filters.size() == topo.links.size());
    for (const auto& [k, n] : classes) CHECK(n == 1);
  }

  SECTION("link a->b is shaped on the router's egress toward b, classified by a's subnet") {
    const auto& l = *topo.find_link(*topo.dc_index("euw"), *topo.dc_index("use"));
    const auto tc = lab::wan_link_tc(topo, l);
    bool found = false;
    for (const auto& op : plan.ops)
      if (auto* f = std::get_if<lab::AddSrcFilter>(&op); f && f->flowid.raw() == tc.classid.raw() && f->ifname == "to-use") {
        CHECK(f->src.to_string() == "198.18.4.0/22");
        found = true;
      }
    CHECK(found);
  }

  SECTION("no netem: pfifo leaves with the same limits, no netem anywhere") {
    const auto p = lab::plan_lab(topo, {.netem = false});
    int pfifo = 0;
    for (const auto& op : p.ops) {
      CHECK_FALSE(std::holds_alternative<lab::AddNetem>(op));
      pfifo += std::holds_alternative<lab::AddPfifo>(op);
    }
    CHECK(pfifo == static_cast<int>(topo.links.size()));
  }

  SECTION("userspace backend: no WAN qdiscs, the router's kernel does not forward") {
    const auto p = lab::plan_lab(topo, {.backend = lab::Backend::userspace});
    for (const auto& op : p.ops) {
      INFO(lab::to_string(op));
      CHECK_FALSE((std::holds_alternative<lab::AddHtbQdisc>(op) || std::holds_alternative<lab::AddSrcFilter>(op)));
      if (auto* sc = std::get_if<lab::SetSysctl>(&op); sc && sc->ns == "t.router" && sc->key == "net/ipv4/ip_forward")
        CHECK(sc->value == "0");
    }
  }

  SECTION("offloads are off on every gateway's router-facing interface in the kernel backend, on in the userspace one") {
    for (auto backend : {lab::Backend::kernel, lab::Backend::userspace}) {
      std::set<std::string> off;
      for (const auto& op : lab::plan_lab(topo, {.backend = backend}).ops)
        if (auto* o = std::get_if<lab::DisableOffloads>(&op)) off.insert(o->ns + ":" + o->ifname);
      if (backend == lab::Backend::kernel)
        CHECK(off == std::set<std::string>{"t.gw-use:use-wan", "t.gw-euw:euw-wan", "t.gw-apne:apne-wan"});
      else
        CHECK(off.empty());
    }
  }

  SECTION("DCs without a link between them get no route to each other") {
    // euw and apne have no link: euw's gateway routes only to use.
    int euw_routes = 0;
    for (const auto& op : plan.ops)
      if (auto* r = std::get_if<lab::AddRoute>(&op); r && r->ns == "t.gw-euw") {
        ++euw_routes;
        CHECK(r->dst.to_string() == "198.18.0.0/22");
      }
    CHECK(euw_routes == 1);
  }
}

TEST_CASE("WAN link traffic-control parameters", "[unit][plan]") {
  const auto topo = small_topology();
  const auto& l = *topo.find_link(0, 1);  // use->euw: 100Mbit, 42.45ms each way, 1ms jitter
  const auto tc = lab::wan_link_tc(topo, l);
  CHECK(tc.htb.rate.bps == 100'000'000);
  CHECK(tc.htb.ceil.bps == 100'000'000);
  CHECK(tc.htb.burst.value == 12'500);  // 1 ms at 100 Mbit/s
  CHECK(tc.htb.quantum == 12'500);
  // 1.5 x BDP: 12.5 MB/s x (84.9 ms + 2 ms jitter) / 1514 B = 1076.1 -> 1077 packets... x1.5
  const double bdp_packets = 12.5e6 * 0.0869 / 1514.0;
  CHECK(tc.limit_packets >= static_cast<std::uint32_t>(1.5 * bdp_packets));
  CHECK(tc.limit_packets <= static_cast<std::uint32_t>(1.5 * bdp_packets) + 1);
  CHECK(tc.netem.delay == std::chrono::microseconds(42450));
  CHECK(tc.netem.jitter == std::chrono::milliseconds(1));
  CHECK(tc.netem.loss.ppb == 1'000'000);
  CHECK(tc.netem.order_rate.bps == 10'000'000'000ULL);  // jitter: keep order

  const auto& q = *topo.find_link(0, 2);  // explicit queue 500p, no jitter
  const auto tq = lab::wan_link_tc(topo, q);
  CHECK(tq.limit_packets == 500);
  CHECK(tq.netem.order_rate.bps == 0);

  CHECK(lab::htb_burst(Rate{1'000'000}, 1500).value == 4 * 1514);  // floor of 4 frames
  CHECK(lab::htb_quantum(Rate{400'000'000'000ULL}, 1500) == 200'000);
}

TEST_CASE("interface names fit IFNAMSIZ at the longest names the format allows", "[unit][plan]") {
  const std::string dc(core::kMaxDcName, 'x');
  for (const auto& n : {lab::if_router_to(dc), lab::if_gateway_wan(dc), lab::if_gateway_bridge(dc),
                        lab::if_gateway_port(dc, core::kMaxNodesPerDc - 1), lab::if_node(dc, core::kMaxNodesPerDc - 1)})
    CHECK(n.size() <= 15);
}

namespace {
struct RecordingKernel : lab::Kernel {
  std::vector<std::string> done;
  std::size_t fail_at = SIZE_MAX;
  void execute(const lab::Op& op) override {
    if (done.size() == fail_at) throw std::runtime_error("File exists");
    done.push_back(lab::to_string(op));
  }
};
}  // namespace

TEST_CASE("apply runs operations in order and names the failed step", "[unit][plan]") {
  const auto plan = lab::plan_lab(small_topology(), {.netem = true});
  RecordingKernel k;
  std::size_t progress = 0;
  lab::apply(plan, k, [&](std::size_t n) { progress = n; });
  CHECK(k.done.size() == plan.ops.size());
  CHECK(progress == plan.ops.size());
  CHECK(k.done.front() == "netns t.router");

  RecordingKernel failing;
  failing.fail_at = 5;
  try {
    lab::apply(plan, failing);
    FAIL("apply should have thrown");
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("step 6/"));
    CHECK_THAT(what, Catch::Contains(lab::to_string(plan.ops[5])));
    CHECK_THAT(what, Catch::Contains("File exists"));
  }
  CHECK(failing.done.size() == 5);
}

TEST_CASE("every operation type has its name (bench/bringup --profile prints them)", "[unit][plan]") {
  // The profile's table had fewer names than lab::Op has types (no DelRoute), so it formatted a
  // null name; the table is now sized from the variant and checked at compile time.
  STATIC_REQUIRE(lab::kOpTypeNames.size() == std::variant_size_v<lab::Op>);
  CHECK(std::string(lab::op_type_name(lab::Op{lab::DelRoute{}})) == "DelRoute");
  CHECK(std::string(lab::op_type_name(lab::Op{lab::SetMac{}})) == "SetMac");
  CHECK(std::string(lab::op_type_name(lab::Op{lab::CreateNetns{}})) == "CreateNetns");
  for (const char* name : lab::kOpTypeNames) CHECK(name != nullptr);
}

TEST_CASE("receive steering: both ends of every veth get the mask, only when asked", "[unit][plan]") {
  const auto topo = small_topology();
  const auto plain = lab::plan_lab(topo, {.backend = lab::Backend::userspace});
  CHECK(std::none_of(plain.ops.begin(), plain.ops.end(),
                     [](const auto& op) { return std::holds_alternative<lab::SetRps>(op); }));

  const auto steered = lab::plan_lab(topo, {.backend = lab::Backend::userspace, .rps_cpus = "1"});
  std::set<std::string> ends, steered_ends;
  for (const auto& op : steered.ops) {
    if (const auto* v = std::get_if<lab::CreateVeth>(&op)) {
      ends.insert(v->ns + ":" + v->name);
      ends.insert(v->peer_ns + ":" + v->peer);
    }
    if (const auto* r = std::get_if<lab::SetRps>(&op)) {
      CHECK(r->mask == "1");
      // Steered after the interface exists.
      CHECK(ends.count(r->ns + ":" + r->ifname) == 1);
      steered_ends.insert(r->ns + ":" + r->ifname);
    }
  }
  CHECK(ends.size() == 2 * (3 + 4));  // a WAN uplink per DC and a port per node, both ends
  CHECK(steered_ends == ends);
  CHECK(lab::to_string(lab::Op{lab::SetRps{"t.gw-use", "use-wan", "1"}}) == "rps t.gw-use:use-wan cpus 1");
}
