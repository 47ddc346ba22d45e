#include "wanlab/lab/plan.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "wanlab/core/diagnostics.hpp"
#include "wanlab/lab/hosts.hpp"
#include "wanlab/lab/naming.hpp"
#include "wanlab/lab/wan_tc.hpp"

namespace wanlab::lab {
namespace {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};

std::string htb_text(const netlink::HtbClassParams& p) {
  return fmt::format("rate {} ceil {} burst {} cburst {} quantum {}", wanlab::to_string(p.rate),
                     wanlab::to_string(p.ceil), p.burst.value, p.cburst.value, p.quantum);
}

std::string netem_text(const netlink::NetemParams& p) {
  auto s = fmt::format("delay {} jitter {} loss {} limit {}", wanlab::to_string(p.delay), wanlab::to_string(p.jitter),
                       wanlab::to_string(p.loss), p.limit);
  if (p.loss_burst) s += fmt::format(" gemodel {}", wanlab::to_string(*p.loss_burst));
  if (p.order_rate.bps) s += fmt::format(" order-rate {}", wanlab::to_string(p.order_rate));
  return s;
}

// A shaped egress: HTB root, one class, and a netem leaf (or pfifo where there is no
// netem, which keeps the rate and the queue limit).
void plan_leaf(std::vector<Op>& ops, const std::string& ns, const std::string& ifname, netlink::Handle cls,
               netlink::Handle leaf, const netlink::NetemParams& netem, bool have_netem) {
  if (have_netem)
    ops.push_back(AddNetem{ns, ifname, cls, leaf, netem});
  else
    ops.push_back(AddPfifo{ns, ifname, cls, leaf, netem.limit});
}

// A namespace of the lab: IPv6 off, IPv4 forwarding as asked, loopback up.
void plan_namespace(Plan& plan, const std::string& ns, bool forward) {
  plan.ops.push_back(CreateNetns{ns});
  plan.namespaces.push_back(ns);
  plan.ops.push_back(SetSysctl{ns, "net/ipv6/conf/all/disable_ipv6", "1"});
  plan.ops.push_back(SetSysctl{ns, "net/ipv6/conf/default/disable_ipv6", "1"});
  plan.ops.push_back(SetSysctl{ns, "net/ipv4/ip_forward", forward ? "1" : "0"});
  plan.ops.push_back(SetUp{ns, "lo"});
}

// Each DC's LAN: gateway namespace with a bridge, the uplink veth to the router, and one
// namespace per node on the bridge.
void plan_dc(const core::Topology& topo, std::size_t k, const PlanOptions& options, Plan& plan) {
  const auto& dc = topo.dcs[k];
  const auto& lab = topo.name;
  const int ik = static_cast<int>(k);
  const int mtu = topo.lan.mtu;
  const auto router = ns_router(lab);
  const auto gw = ns_gateway(lab, dc.name);
  auto& ops = plan.ops;

  plan_namespace(plan, gw, true);
  ops.push_back(CreateVeth{router, if_router_to(dc.name), gw, if_gateway_wan(dc.name), mtu});
  if (options.rps_cpus) {
    ops.push_back(SetRps{router, if_router_to(dc.name), *options.rps_cpus});
    ops.push_back(SetRps{gw, if_gateway_wan(dc.name), *options.rps_cpus});
  }
  // Kernel backend: segment and checksum before the WAN, so its qdiscs see real packets
  // (netlink/offloads.hpp). The userspace engine takes GSO super-frames and accounts for
  // them as their segments (shaping/gso.hpp).
  if (options.backend == Backend::kernel) ops.push_back(DisableOffloads{gw, if_gateway_wan(dc.name)});
  ops.push_back(SetAlias{router, if_router_to(dc.name), fmt::format("wanlab {} router->{}", lab, dc.name)});
  ops.push_back(SetAlias{gw, if_gateway_wan(dc.name), fmt::format("wanlab {} {}->router", lab, dc.name)});
  ops.push_back(AddAddress{router, if_router_to(dc.name), core::transit_router_side(ik)});
  ops.push_back(AddAddress{gw, if_gateway_wan(dc.name), core::transit_gateway_side(ik)});
  ops.push_back(SetUp{router, if_router_to(dc.name)});
  ops.push_back(SetUp{gw, if_gateway_wan(dc.name)});
  ops.push_back(CreateBridge{gw, if_gateway_bridge(dc.name), mtu});
  ops.push_back(SetAlias{gw, if_gateway_bridge(dc.name), fmt::format("wanlab {} {} LAN", lab, dc.name)});
  ops.push_back(AddAddress{gw, if_gateway_bridge(dc.name), {core::dc_gateway(ik), 22}});
  ops.push_back(SetUp{gw, if_gateway_bridge(dc.name)});
  ops.push_back(AddRoute{router, core::dc_subnet(ik), core::transit_gateway_side(ik).address, if_router_to(dc.name)});
  // The gateway routes only toward DCs this DC has a WAN link to: other pairs stay unreachable.
  for (const auto& l : topo.links) {
    if (l.src != k) continue;
    ops.push_back(AddRoute{gw, core::dc_subnet(static_cast<int>(l.dst)), core::transit_router_side(ik).address,
                           if_gateway_wan(dc.name)});
  }

  const bool shape_lan = topo.lan.rate.bps > 0 || topo.lan.delay.count() > 0;
  // An unshaped rate under a LAN delay: far above what veths carry.
  const Rate lan_rate = topo.lan.rate.bps > 0 ? topo.lan.rate : Rate{100'000'000'000ULL};
  const netlink::HtbClassParams lan_htb{lan_rate, lan_rate, htb_burst(lan_rate, mtu), htb_burst(lan_rate, mtu),
                                        htb_quantum(lan_rate, mtu)};
  netlink::NetemParams lan_netem;
  lan_netem.delay = topo.lan.delay;
  lan_netem.limit = 10000;

  for (int i = 0; i < dc.nodes; ++i) {
    const auto node_ns = ns_node(lab, core::node_name(dc, i));
    const auto port = if_gateway_port(dc.name, i);
    const auto nif = if_node(dc.name, i);
    ops.push_back(CreateNetns{node_ns});
    plan.namespaces.push_back(node_ns);
    ops.push_back(CreateUtsns{node_ns, core::node_name(dc, i)});
    ops.push_back(WriteHosts{node_ns, hosts_file(topo, k, i)});
    ops.push_back(SetSysctl{node_ns, "net/ipv6/conf/all/disable_ipv6", "1"});
    ops.push_back(SetSysctl{node_ns, "net/ipv6/conf/default/disable_ipv6", "1"});
    if (options.tcp_congestion)
      ops.push_back(SetSysctl{node_ns, "net/ipv4/tcp_congestion_control", *options.tcp_congestion});
    for (const auto& [key, value] : topo.node.sysctls) {
      std::string path = key;
      std::replace(path.begin(), path.end(), '.', '/');
      ops.push_back(SetSysctl{node_ns, path, value});
    }
    ops.push_back(CreateVeth{gw, port, node_ns, nif, mtu});
    if (options.rps_cpus) {
      ops.push_back(SetRps{gw, port, *options.rps_cpus});
      ops.push_back(SetRps{node_ns, nif, *options.rps_cpus});
    }
    ops.push_back(SetMaster{gw, port, if_gateway_bridge(dc.name)});
    ops.push_back(SetUp{gw, port});
    ops.push_back(SetUp{node_ns, "lo"});
    ops.push_back(AddAddress{node_ns, nif, {core::node_address(ik, i), 22}});
    ops.push_back(SetUp{node_ns, nif});
    ops.push_back(AddRoute{node_ns, {core::Ipv4{0}, 0}, core::dc_gateway(ik), nif});
    if (!shape_lan) continue;
    // Both directions of the node's link: node egress, and the bridge port's egress
    // toward the node.
    const netlink::Handle root{1, 0}, cls{1, 1}, leaf{0x10, 0};
    for (const auto& [ns, ifname] : {std::pair{node_ns, nif}, std::pair{gw, port}}) {
      ops.push_back(AddHtbQdisc{ns, ifname, root, 1});
      ops.push_back(AddHtbClass{ns, ifname, root, cls, lan_htb});
      plan_leaf(ops, ns, ifname, cls, leaf, lan_netem, options.netem);
    }
  }
}

// A DC's rails (docs/rails.md): a namespace for its rail switch (the userspace engine's
// RailSwitch forwards between the ports there), and per node one port per rail: a veth
// whose node end `rail<r>` has the node's rail address and hardware address, whose other
// end `n<i>r<r>` the switch reads. The switch's namespace has no address and forwards
// nothing itself. Segmentation and checksums happen in the node, so the switch sees
// wire-sized frames.
void plan_rails(const core::Topology& topo, std::size_t k, const PlanOptions& options, Plan& plan) {
  const auto& dc = topo.dcs[k];
  const int ik = static_cast<int>(k);
  const auto rails = ns_rails(topo.name, dc.name);
  auto& ops = plan.ops;
  plan_namespace(plan, rails, false);
  for (int i = 0; i < dc.nodes; ++i) {
    const auto node_ns = ns_node(topo.name, core::node_name(dc, i));
    for (int r = 0; r < dc.fabric.rails; ++r) {
      const auto port = if_rail_port(i, r);
      const auto nif = if_rail(r);
      ops.push_back(CreateVeth{rails, port, node_ns, nif, topo.lan.mtu});
      if (options.rps_cpus) {
        ops.push_back(SetRps{rails, port, *options.rps_cpus});
        ops.push_back(SetRps{node_ns, nif, *options.rps_cpus});
      }
      ops.push_back(DisableOffloads{node_ns, nif});
      ops.push_back(SetMac{node_ns, nif, core::rail_mac(ik, r, i)});
      ops.push_back(SetAlias{rails, port, fmt::format("wanlab {} {} rail {} port of {}", topo.name, dc.name, r,
                                                      core::node_name(dc, i))});
      ops.push_back(AddAddress{node_ns, nif, {core::rail_address(ik, r, i), 24}});
      ops.push_back(SetUp{rails, port});
      ops.push_back(SetUp{node_ns, nif});
    }
  }
}

// What of a topology's rails the lab cannot build, one diagnostic each (core::ConfigError).
void check_rails(const core::Topology& topo, const PlanOptions& options) {
  core::Diagnostics d(topo.source_file);
  for (std::size_t k = 0; k < topo.dcs.size(); ++k) {
    const auto& dc = topo.dcs[k];
    if (dc.fabric.kind != core::Fabric::Kind::rails) continue;
    const auto at = fmt::format("/dcs/{}/fabric", k);
    if (options.backend == Backend::kernel)
      d.add(at, "the lab's rails are the userspace engine's rail switch (circuits and reconfigurations are not "
                "qdiscs): bring the lab up with --backend userspace (auto picks it for rails)");
    if (static_cast<int>(k) >= core::kMaxRailDcs)
      d.add(at, fmt::format("a DC with rails must be among the topology's first {} DCs in the lab (its rails' "
                            "addresses: docs/rails.md)",
                            core::kMaxRailDcs));
    if (dc.fabric.rails > core::kMaxRails)
      d.add(at + "/rails", fmt::format("{} rails: the lab builds at most {} per DC", dc.fabric.rails, core::kMaxRails));
    if (dc.nodes > core::kMaxRailNodes)
      d.add(fmt::format("/dcs/{}/nodes", k),
            fmt::format("{} nodes on rails: the lab builds at most {} nodes per rail", dc.nodes, core::kMaxRailNodes));
  }
  d.throw_if_any();
}

}  // namespace

void plan_wan(const core::Topology& topo, const PlanOptions& options, const std::string& router,
              const std::vector<std::string>& ports, Plan& plan) {
  for (std::size_t dst = 0; dst < topo.dcs.size(); ++dst) {
    const auto& ifname = ports.at(dst);
    bool has_links = false;
    for (const auto& l : topo.links) has_links |= l.dst == dst;
    if (!has_links) continue;
    // Unclassified traffic (ARP) passes directly: default class 0 does not exist.
    plan.ops.push_back(AddHtbQdisc{router, ifname, kWanRootQdisc, 0});
    for (const auto& l : topo.links) {
      if (l.dst != dst) continue;
      const auto tc = wan_link_tc(topo, l);
      plan.ops.push_back(AddHtbClass{router, ifname, kWanRootQdisc, tc.classid, tc.htb});
      plan_leaf(plan.ops, router, ifname, tc.classid, tc.leaf, tc.netem, options.netem);
      plan.ops.push_back(AddSrcFilter{router, ifname, kWanRootQdisc, static_cast<std::uint16_t>(l.src + 1),
                                      core::dc_subnet(static_cast<int>(l.src)), tc.classid});
    }
  }
}

std::string to_string(const Op& op) {
  return std::visit(
      Overloaded{
          [](const CreateNetns& o) { return fmt::format("netns {}", o.ns); },
          [](const SetSysctl& o) { return fmt::format("sysctl {}: {}={}", o.ns, o.key, o.value); },
          [](const CreateVeth& o) {
            return fmt::format("veth {}:{} <-> {}:{} mtu {}", o.ns, o.name, o.peer_ns, o.peer, o.mtu);
          },
          [](const CreateBridge& o) { return fmt::format("bridge {}:{} mtu {}", o.ns, o.name, o.mtu); },
          [](const SetMaster& o) { return fmt::format("master {}:{} -> {}", o.ns, o.ifname, o.master); },
          [](const SetUp& o) { return fmt::format("up {}:{}", o.ns, o.ifname); },
          [](const SetAlias& o) { return fmt::format("alias {}:{} \"{}\"", o.ns, o.ifname, o.alias); },
          [](const AddAddress& o) { return fmt::format("addr {}:{} {}", o.ns, o.ifname, o.prefix.to_string()); },
          [](const AddRoute& o) {
            return fmt::format("route {}: {} via {} dev {}", o.ns, o.dst.length == 0 ? "default" : o.dst.to_string(),
                               o.via.to_string(), o.ifname);
          },
          [](const AddHtbQdisc& o) {
            return fmt::format("qdisc {}:{} {} htb default {}", o.ns, o.ifname, o.handle.to_string(), o.default_minor);
          },
          [](const AddHtbClass& o) {
            return fmt::format("class {}:{} {} parent {} htb {}", o.ns, o.ifname, o.classid.to_string(),
                               o.parent.to_string(), htb_text(o.params));
          },
          [](const AddNetem& o) {
            return fmt::format("qdisc {}:{} {} parent {} netem {}", o.ns, o.ifname, o.handle.to_string(),
                               o.parent.to_string(), netem_text(o.params));
          },
          [](const AddPfifo& o) {
            return fmt::format("qdisc {}:{} {} parent {} pfifo limit {}", o.ns, o.ifname, o.handle.to_string(),
                               o.parent.to_string(), o.limit);
          },
          [](const DisableOffloads& o) { return fmt::format("offloads {}:{} tso gso tx-csum off", o.ns, o.ifname); },
          [](const DelRoute& o) {
            return fmt::format("unroute {}: {}", o.ns, o.dst.length == 0 ? "default" : o.dst.to_string());
          },
          [](const SetMac& o) { return fmt::format("mac {}:{} {}", o.ns, o.ifname, core::mac_text(o.mac)); },
          [](const SetForwarding& o) { return fmt::format("forwarding {}:{} {}", o.ns, o.ifname, o.on ? "on" : "off"); },
          [](const CreateUtsns& o) { return fmt::format("utsns {} hostname {}", o.ns, o.hostname); },
          [](const SetRps& o) { return fmt::format("rps {}:{} cpus {}", o.ns, o.ifname, o.mask); },
          [](const WriteHosts& o) {
            return fmt::format("hosts {}: {} lines", o.ns, std::count(o.text.begin(), o.text.end(), '\n'));
          },
          [](const AddSrcFilter& o) {
            return fmt::format("filter {}:{} parent {} prio {} u32 src {} flowid {}", o.ns, o.ifname,
                               o.parent.to_string(), o.prio, o.src.to_string(), o.flowid.to_string());
          },
      },
      op);
}

const std::string& op_namespace(const Op& op) {
  return std::visit([](const auto& o) -> const std::string& { return o.ns; }, op);
}

Plan plan_lab(const core::Topology& topo, const PlanOptions& options) {
  check_rails(topo, options);
  Plan plan;
  const auto router = ns_router(topo.name);
  // With the userspace backend the engine forwards between DCs, not the router's kernel.
  const bool kernel = options.backend == Backend::kernel;
  plan_namespace(plan, router, kernel);
  for (std::size_t k = 0; k < topo.dcs.size(); ++k) {
    plan_dc(topo, k, options, plan);
    if (topo.dcs[k].fabric.kind == core::Fabric::Kind::rails) plan_rails(topo, k, options, plan);
  }
  if (kernel) {
    std::vector<std::string> ports;
    for (const auto& dc : topo.dcs) ports.push_back(if_router_to(dc.name));
    plan_wan(topo, options, router, ports, plan);
  }
  return plan;
}

}  // namespace wanlab::lab
