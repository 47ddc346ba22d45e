#pragma once
// The lab's TCP congestion control (topology `node.tcp_congestion`). Each network
// namespace has its own net.ipv4.tcp_congestion_control, but one other than the host's may
// only pick an algorithm that the host's net.ipv4.tcp_allowed_congestion_control lists (the
// kernel answers EPERM otherwise), and that list is the host's alone. So the host must
// allow it: wanlab adds it to the list where it may (root in the host's namespace).
#include <optional>
#include <string>
#include <vector>

#include "wanlab/core/topology.hpp"

namespace wanlab::lab {

/// The space-separated list `allowed` with `name` added, or nullopt when it is there.
std::optional<std::string> allowed_list_with(const std::string& allowed, const std::string& name);

struct CongestionChoice {
  std::optional<std::string> set;  // what every node's namespace gets; none: the host's default
  std::string note;                // one line for the user, or empty
};

/// Makes the topology's congestion control (or the default, core::kDefaultTcpCongestion)
/// usable in the lab's namespaces, adding it to the host's allowed list where needed.
/// Named by the topology but not to be had: throws std::runtime_error, one line saying what
/// the host must allow. The default not to be had: no choice, and a note saying so.
CongestionChoice choose_tcp_congestion(const core::Topology& topo);

/// A run's congestion control (the scenario's `tcp_congestion`), which its agents make their
/// nodes' default for the run: added to the host's allowed list where needed and possible.
/// Empty when the namespaces may use it; else one line saying why not and what the host
/// must allow (the run's own connections still get it, per socket).
std::string allow_tcp_congestion(const std::string& name);

}  // namespace wanlab::lab
