#include "wanlab/lab/router_only.hpp"

#include <fmt/format.h>

#include <stdexcept>

#include "wanlab/core/address_plan.hpp"
#include "wanlab/core/diagnostics.hpp"

namespace wanlab::lab {
namespace {

// The rail switch runs in a namespace lab's controller, on the rails' own veths.
void refuse_rails(const core::Topology& topo) {
  core::Diagnostics d(topo.source_file);
  for (std::size_t k = 0; k < topo.dcs.size(); ++k)
    if (topo.dcs[k].fabric.kind == core::Fabric::Kind::rails)
      d.add(fmt::format("/dcs/{}/fabric", k), "a router-only lab (containers) does not emulate rails: bring the "
                                              "topology up as a namespace lab (wanlab up) or simulate it");
  d.throw_if_any();
}

std::string held(const std::vector<netlink::InterfaceAddress>& addresses) {
  std::vector<std::string> items;
  for (const auto& a : addresses)
    items.push_back(fmt::format("{} {}", a.ifname, core::Ipv4Prefix{core::Ipv4{a.address}, a.prefix_len}.to_string()));
  return items.empty() ? "no IPv4 address at all" : fmt::format("{}", fmt::join(items, ", "));
}

}  // namespace

std::vector<std::string> find_router_ports(const core::Topology& topo,
                                           const std::vector<netlink::InterfaceAddress>& addresses) {
  std::vector<std::string> ports;
  std::vector<std::string> missing;
  for (std::size_t k = 0; k < topo.dcs.size(); ++k) {
    const int ik = static_cast<int>(k);
    const auto want = core::dc_gateway(ik);
    std::string found;
    for (const auto& a : addresses)
      if (a.address == want.value && a.prefix_len == core::dc_subnet(ik).length) found = a.ifname;
    if (found.empty())
      missing.push_back(fmt::format("DC {} ({}/22 on its network {})", topo.dcs[k].name, want.to_string(),
                                    core::dc_subnet(ik).to_string()));
    ports.push_back(found);
  }
  if (!missing.empty())
    throw std::runtime_error(fmt::format(
        "lab {}: no interface here holds the router address of {}; the interfaces hold {}", topo.name,
        fmt::join(missing, ", "), held(addresses)));
  for (std::size_t a = 0; a < ports.size(); ++a)
    for (std::size_t b = a + 1; b < ports.size(); ++b)
      if (ports[a] == ports[b])
        throw std::runtime_error(fmt::format("lab {}: DCs {} and {} are on the same interface {}; each DC needs a "
                                             "network of its own",
                                             topo.name, topo.dcs[a].name, topo.dcs[b].name, ports[a]));
  return ports;
}

Plan plan_router(const core::Topology& topo, const std::vector<std::string>& ports, const PlanOptions& options) {
  refuse_rails(topo);
  if (ports.size() != topo.dcs.size())
    throw std::invalid_argument(fmt::format("{} router ports for {} DCs", ports.size(), topo.dcs.size()));
  Plan plan;
  const bool kernel = options.backend == Backend::kernel;
  for (std::size_t k = 0; k < topo.dcs.size(); ++k) {
    plan.ops.push_back(SetForwarding{kOwnNetns, ports[k], kernel});
    // As plan_lab: only the kernel backend needs MTU-sized packets before its qdiscs.
    if (kernel) plan.ops.push_back(DisableOffloads{kOwnNetns, ports[k]});
    plan.ops.push_back(
        SetAlias{kOwnNetns, ports[k], fmt::format("wanlab {} router->{}", topo.name, topo.dcs[k].name)});
  }
  if (kernel) plan_wan(topo, options, kOwnNetns, ports, plan);
  return plan;
}

std::pair<std::size_t, int> find_node(const core::Topology& topo, const std::string& node) {
  std::vector<std::string> names;
  for (std::size_t k = 0; k < topo.dcs.size(); ++k)
    for (int i = 0; i < topo.dcs[k].nodes; ++i) {
      const auto name = core::node_name(topo.dcs[k], i);
      if (name == node) return {k, i};
      names.push_back(name);
    }
  throw std::invalid_argument(
      fmt::format("lab {} has no node '{}'; its nodes: {}", topo.name, node, fmt::join(names, ", ")));
}

std::string find_node_interface(const core::Topology& topo, const std::string& node,
                                const std::vector<netlink::InterfaceAddress>& addresses) {
  const auto [k, i] = find_node(topo, node);
  const int ik = static_cast<int>(k);
  const auto want = core::node_address(ik, i);
  for (const auto& a : addresses)
    if (a.address == want.value && a.prefix_len == core::dc_subnet(ik).length) return a.ifname;
  throw std::runtime_error(fmt::format("lab {}: no interface here holds node {}'s address {}/22 (DC {}'s network {}); "
                                       "the interfaces hold {}",
                                       topo.name, node, want.to_string(), topo.dcs[k].name,
                                       core::dc_subnet(ik).to_string(), held(addresses)));
}

Plan plan_node(const core::Topology& topo, const std::string& node, const std::string& ifname, Backend backend) {
  const auto [k, i] = find_node(topo, node);
  const int ik = static_cast<int>(k);
  Plan plan;
  plan.ops.push_back(SetMac{kOwnNetns, ifname, core::node_mac(ik, i)});
  if (backend == Backend::kernel) plan.ops.push_back(DisableOffloads{kOwnNetns, ifname});
  for (const auto& l : topo.links) {
    if (l.src != k) continue;
    plan.ops.push_back(AddRoute{kOwnNetns, core::dc_subnet(static_cast<int>(l.dst)), core::dc_gateway(ik), ifname});
  }
  // Nothing leaves the lab: a default route the container runtime set goes.
  plan.ops.push_back(DelRoute{kOwnNetns, {core::Ipv4{0}, 0}});
  return plan;
}

std::vector<std::string> find_swarm_router_ports(const core::Topology& topo,
                                                 const std::vector<netlink::InterfaceAddress>& addresses) {
  std::vector<std::string> ports;
  std::vector<std::string> missing;
  for (std::size_t k = 0; k < topo.dcs.size(); ++k) {
    const auto subnet = core::dc_subnet(static_cast<int>(k));
    std::string found;
    for (const auto& a : addresses)
      if (subnet.contains(core::Ipv4{a.address}) && a.prefix_len >= subnet.length) found = a.ifname;
    if (found.empty()) missing.push_back(fmt::format("DC {} (an address in {})", topo.dcs[k].name, subnet.to_string()));
    ports.push_back(found);
  }
  if (!missing.empty())
    throw std::runtime_error(fmt::format("lab {}: no interface here is on the network of {}; the interfaces hold {}",
                                         topo.name, fmt::join(missing, ", "), held(addresses)));
  for (std::size_t a = 0; a < ports.size(); ++a)
    for (std::size_t b = a + 1; b < ports.size(); ++b)
      if (ports[a] == ports[b])
        throw std::runtime_error(fmt::format("lab {}: DCs {} and {} are on the same interface {}; each DC needs a "
                                             "network of its own",
                                             topo.name, topo.dcs[a].name, topo.dcs[b].name, ports[a]));
  return ports;
}

Plan plan_swarm_router(const core::Topology& topo, const std::vector<std::string>& ports, const PlanOptions& options) {
  refuse_rails(topo);
  Plan plan = plan_router(topo, ports, options);
  for (std::size_t k = 0; k < topo.dcs.size(); ++k)
    plan.ops.push_back(AddRoute{kOwnNetns, core::dc_subnet(static_cast<int>(k)), core::Ipv4{0}, ports[k]});
  return plan;
}

std::string find_swarm_node_interface(const core::Topology& topo, const std::string& node,
                                      const std::vector<netlink::InterfaceAddress>& addresses) {
  const auto [k, i] = find_node(topo, node);
  const auto subnet = core::dc_subnet(static_cast<int>(k));
  for (const auto& a : addresses)
    if (subnet.contains(core::Ipv4{a.address}) && a.prefix_len >= subnet.length) return a.ifname;
  throw std::runtime_error(fmt::format("lab {}: no interface here is on DC {}'s network {} (node {}); the interfaces "
                                       "hold {}",
                                       topo.name, topo.dcs[k].name, subnet.to_string(), node, held(addresses)));
}

Plan plan_swarm_node(const core::Topology& topo, const std::string& node, const std::string& ifname,
                     core::Ipv4 router, Backend backend) {
  const auto [k, i] = find_node(topo, node);
  const int ik = static_cast<int>(k);
  const auto subnet = core::dc_subnet(ik);
  if (!subnet.contains(router))
    throw std::invalid_argument(fmt::format("lab {}: the router's address {} is not on DC {}'s network {}", topo.name,
                                            router.to_string(), topo.dcs[k].name, subnet.to_string()));
  Plan plan;
  if (backend == Backend::kernel) plan.ops.push_back(DisableOffloads{kOwnNetns, ifname});
  for (const auto& l : topo.links) {
    if (l.src != k) continue;
    plan.ops.push_back(AddRoute{kOwnNetns, core::dc_subnet(static_cast<int>(l.dst)), router, ifname});
  }
  plan.ops.push_back(DelRoute{kOwnNetns, {core::Ipv4{0}, 0}});
  return plan;
}

}  // namespace wanlab::lab
