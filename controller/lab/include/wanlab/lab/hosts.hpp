#pragma once
// A lab's names without DNS: the hosts file each node sees as /etc/hosts (plan.hpp,
// WriteHosts), so `getent hosts use-0` answers 198.18.4.2 inside any node and a node's own
// host name resolves to its lab address, not to 127.0.0.1 (frameworks such as gloo bind to
// what their host name resolves to).
#include <cstddef>
#include <string>

#include "wanlab/core/topology.hpp"

namespace wanlab::lab {

/// The hosts file of node `node` of DC `dc`: localhost, every node of the lab by name (its
/// own first), every DC's gateway as gw-<dc> (its LAN address), and the WAN router as
/// `router` (its address on the node's DC side).
std::string hosts_file(const core::Topology& topo, std::size_t dc, int node);

}  // namespace wanlab::lab
