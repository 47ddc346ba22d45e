// node-setup: a container as a node of a router-only lab (lab/router_only.hpp).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fmt/format.h>

#include "commands.hpp"
#include "wanlab/api/lab_controller.hpp"
#include "wanlab/core/address_plan.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/lab/apply.hpp"
#include "wanlab/lab/router_only.hpp"
#include "wanlab/netlink/netlink.hpp"

namespace wanlab::cli {

int cmd_node_setup(const std::string& topology, const std::string& node, const std::string& backend,
                   const std::vector<std::string>& exec_argv) {
  core::Topology topo;
  try {
    topo = core::load_topology(topology);
    (void)lab::find_node(topo, node);
  } catch (const core::ConfigError& e) {
    fmt::print(stderr, "wanlab: {}\n", e.what());
    return 2;
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "wanlab: node-setup: {}\n", e.what());
    return 2;
  }
  if (!check_privileges("node-setup", false)) return 1;
  lab::NetlinkKernel kernel;
  auto& here = kernel.socket(lab::kOwnNetns);
  const auto ifname = lab::find_node_interface(topo, node, here.ipv4_addresses());
  const bool kernel_backend = api::resolve_backend(backend, netlink::netem_available()) == "kernel";
  const auto plan =
      lab::plan_node(topo, node, ifname, kernel_backend ? lab::Backend::kernel : lab::Backend::userspace);
  lab::apply(plan, kernel);
  std::vector<std::string> routes;
  for (const auto& op : plan.ops)
    if (const auto* r = std::get_if<lab::AddRoute>(&op)) routes.push_back(r->dst.to_string());
  const auto [k, i] = lab::find_node(topo, node);
  fmt::print("node {} of lab {}: {} {} (mac {}), offloads {}, routes to {} via {}\n", node, topo.name, ifname,
             core::node_address(static_cast<int>(k), i).to_string(),
             core::mac_text(core::node_mac(static_cast<int>(k), i)),
             kernel_backend ? "off (kernel backend)" : "on (userspace backend)",
             routes.empty() ? "no other DC" : fmt::format("{}", fmt::join(routes, ", ")),
             core::dc_gateway(static_cast<int>(k)).to_string());
  std::fflush(stdout);
  if (exec_argv.empty()) return 0;
  std::vector<char*> argv;
  std::vector<std::string> words = exec_argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  fmt::print(stderr, "wanlab: node-setup: cannot run {}: {}\n", words.front(), std::strerror(errno));
  return 127;
}

}  // namespace wanlab::cli
