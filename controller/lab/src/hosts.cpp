#include "wanlab/lab/hosts.hpp"

#include <fmt/format.h>

#include "wanlab/core/address_plan.hpp"

namespace wanlab::lab {

std::string hosts_file(const core::Topology& topo, std::size_t dc, int node) {
  const int k = static_cast<int>(dc);
  std::string out = fmt::format("# lab {}: written by wanlab up, removed by wanlab down\n", topo.name);
  out += "127.0.0.1\tlocalhost\n";
  out += fmt::format("{}\t{}\n", core::node_address(k, node).to_string(), core::node_name(topo.dcs[dc], node));
  for (std::size_t j = 0; j < topo.dcs.size(); ++j)
    for (int i = 0; i < topo.dcs[j].nodes; ++i)
      if (j != dc || i != node)
        out += fmt::format("{}\t{}\n", core::node_address(static_cast<int>(j), i).to_string(),
                           core::node_name(topo.dcs[j], i));
  for (std::size_t j = 0; j < topo.dcs.size(); ++j)
    out += fmt::format("{}\tgw-{}\n", core::dc_gateway(static_cast<int>(j)).to_string(), topo.dcs[j].name);
  out += fmt::format("{}\trouter\n", core::transit_router_side(k).address.to_string());
  return out;
}

}  // namespace wanlab::lab
