#pragma once
// What the compose file and the swarm stack file (compose.cpp, stack.cpp) write alike.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "wanlab/core/topology.hpp"

namespace wanlab::compose::detail {

/// A YAML scalar as a double-quoted string (JSON's escapes are YAML's).
inline std::string q(const std::string& s) { return nlohmann::json(s).dump(); }

/// A flow sequence of quoted scalars: ["a", "b"].
inline std::string list(const std::vector<std::string>& items) {
  std::vector<std::string> quoted;
  for (const auto& i : items) quoted.push_back(q(i));
  return fmt::format("[{}]", fmt::join(quoted, ", "));
}

/// Containers cannot shape the LAN: a node's link to its DC's network (`dc_network`, e.g.
/// "bridge") ends outside them. Throws std::invalid_argument naming the field for a `kind`
/// ("compose", "swarm") lab.
inline void refuse_lan_shaping(const core::Topology& topo, const std::string& kind, const std::string& dc_network) {
  if (topo.lan.rate.bps > 0 || topo.lan.delay.count() > 0)
    throw std::invalid_argument(fmt::format(
        "{}: /lan: a {} lab cannot shape the LAN (rate {}, delay {}): a node's link to its DC's {} "
        "ends outside the containers; leave lan.rate and lan.delay out",
        topo.source_file, kind, to_string(topo.lan.rate), to_string(topo.lan.delay), dc_network));
}

}  // namespace wanlab::compose::detail
