#pragma once
// Router-only labs, for containers: the DCs' LANs exist already (one container network per
// DC, with the address plan's subnet), and the controller runs in a namespace with one
// interface on each, holding that DC gateway's address (198.18.4k.1). There it plays the
// lab's WAN router, exactly as the router namespace of a namespace lab does: it forwards
// between the DCs and shapes each directed DC pair (kernel backend: HTB + netem on its
// egress toward the destination DC, classified by source subnet; userspace backend: the
// engine forwards, the kernel does not). Each node is another namespace (a container) on
// its DC's network that routes the DCs its DC has WAN links to via that address.
//
// Interfaces are found by address, not by name or order (container runtimes number them
// as they please). Plans act in the process's own namespace (kOwnNetns).
#include <string>
#include <vector>

#include "wanlab/core/topology.hpp"
#include "wanlab/lab/plan.hpp"
#include "wanlab/netlink/netlink.hpp"

namespace wanlab::lab {

/// Per DC (by index), the interface among `addresses` that holds the DC gateway's address
/// with the DC's /22. Throws std::runtime_error naming every DC without one (and what the
/// interfaces hold instead).
std::vector<std::string> find_router_ports(const core::Topology& topo,
                                           const std::vector<netlink::InterfaceAddress>& addresses);

/// The router's operations on its existing ports (`ports[k]` faces DC k): IPv4 forwarding
/// on (kernel backend) or off (userspace: the engine forwards), offloads off with the kernel
/// backend (its qdiscs then see MTU-sized packets; the userspace engine takes GSO super-frames
/// and accounts for them as their segments, shaping/gso.hpp), an alias
/// naming the lab and the DC, and for the kernel backend the WAN links' traffic control
/// as in plan_lab. Owns no namespace.
Plan plan_router(const core::Topology& topo, const std::vector<std::string>& ports, const PlanOptions& options);

/// Swarm labs (compose/compose.hpp, stack_file): Docker, not the plan, chose the router's
/// addresses. Per DC, the interface among `addresses` holding an address inside the DC's /22
/// (Docker's lie in core::swarm_task_subnet). Throws std::runtime_error as find_router_ports.
std::vector<std::string> find_swarm_router_ports(const core::Topology& topo,
                                                 const std::vector<netlink::InterfaceAddress>& addresses);

/// plan_router, and on each port a route to the DC's whole /22 (the port's own address is in
/// the upper /23 only; the nodes' plan addresses are in the lower one).
Plan plan_swarm_router(const core::Topology& topo, const std::vector<std::string>& ports, const PlanOptions& options);

/// A swarm lab's node, on interface `ifname`, once `node-setup --swarm` has set its addresses (the
/// plan's address the primary of the DC's /22, Docker's a secondary of it, so every packet
/// leaves from the plan's address, the one agents, runs and shaping know),
/// with the router at `router` (the controller's address on this DC's network): offloads off
/// with the kernel backend, a route to each DC its DC has a WAN link to via `router`, no
/// default route. The hardware address stays (remote hosts' VXLAN forwarding tables know
/// only Docker's).
/// Throws std::invalid_argument when `router` is not in the DC's /22.
Plan plan_swarm_node(const core::Topology& topo, const std::string& node, const std::string& ifname,
                     core::Ipv4 router, Backend backend);

/// The interface among `addresses` with an address in `node`'s DC's /22 (a swarm node's
/// overlay interface); throws std::runtime_error saying what the interfaces hold instead.
std::string find_swarm_node_interface(const core::Topology& topo, const std::string& node,
                                      const std::vector<netlink::InterfaceAddress>& addresses);

/// The DC index and node index of node `node` ("use-0"); throws std::invalid_argument
/// naming the lab's nodes when it has none of that name.
std::pair<std::size_t, int> find_node(const core::Topology& topo, const std::string& node);

/// The interface among `addresses` holding `node`'s address; throws std::runtime_error
/// saying what the interfaces hold instead.
std::string find_node_interface(const core::Topology& topo, const std::string& node,
                                const std::vector<netlink::InterfaceAddress>& addresses);

/// A node of a router-only lab, in its own namespace on interface `ifname`: the plan's
/// hardware address (core::node_mac: the userspace engine sends to it), with the kernel
/// backend offloads off (the router's ports then carry MTU-sized packets with complete
/// checksums, as a namespace lab's gateways send them to netem; the userspace engine takes
/// the nodes' GSO super-frames as they come, and intra-DC traffic keeps its offloads), and a route to each DC its DC has a WAN link to, via the
/// router's address in its DC, and no default route (whatever the container runtime set):
/// DCs without a link stay unreachable, as in namespace labs, and nothing leaves the lab.
Plan plan_node(const core::Topology& topo, const std::string& node, const std::string& ifname, Backend backend);

}  // namespace wanlab::lab
