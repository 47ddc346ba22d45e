// node-setup: a container as a node of a router-only lab (lab/router_only.hpp).
#include <arpa/inet.h>
#include <netdb.h>
#include <unistd.h>

#include <chrono>
#include <thread>

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
namespace {

// The addresses `name` resolves to (IPv4), none where it does not (yet).
std::vector<core::Ipv4> resolve(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  std::vector<core::Ipv4> out;
  if (::getaddrinfo(name.c_str(), nullptr, &hints, &found) != 0) return out;
  for (auto* a = found; a; a = a->ai_next)
    out.push_back(core::Ipv4{ntohl(reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr.s_addr)});
  ::freeaddrinfo(found);
  return out;
}

// A swarm lab's router, by its service name: Docker's DNS answers once its task runs, with
// its address on the asker's network(s); the one in `subnet`.
std::optional<core::Ipv4> find_router(const std::string& name, const core::Ipv4Prefix& subnet,
                                      std::chrono::seconds patience) {
  const auto until = std::chrono::steady_clock::now() + patience;
  for (;;) {
    for (const auto& a : resolve(name))
      if (subnet.contains(a)) return a;
    if (std::chrono::steady_clock::now() >= until) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

}  // namespace

int cmd_node_setup(const std::string& topology, const std::string& node, const std::string& backend,
                   const std::optional<std::string>& swarm_router, const std::vector<std::string>& exec_argv) {
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
  const bool kernel_backend = api::resolve_backend(backend, netlink::netem_available()) == "kernel";
  const auto lab_backend = kernel_backend ? lab::Backend::kernel : lab::Backend::userspace;
  const auto [k, i] = lab::find_node(topo, node);
  const int ik = static_cast<int>(k);
  std::string ifname;
  core::Ipv4 router = core::dc_gateway(ik);
  lab::Plan plan;
  try {
    if (swarm_router) {
      ifname = lab::find_swarm_node_interface(topo, node, here.ipv4_addresses());
      const auto found = find_router(*swarm_router, core::dc_subnet(ik), std::chrono::seconds(300));
      if (!found) {
        fmt::print(stderr, "wanlab: node-setup: the router's name {} did not resolve to an address in {} within 300 s "
                           "(is the controller service up, on this DC's network?)\n",
                   *swarm_router, core::dc_subnet(ik).to_string());
        return 1;
      }
      router = *found;
      const auto subnet = core::dc_subnet(ik);
      // The plan's address first (the primary of the /22: the source of everything the node
      // sends), Docker's after it as a secondary of the same /22 (Docker's /23 route goes).
      for (const auto& a : here.ipv4_addresses()) {
        if (a.ifname != ifname || !subnet.contains(core::Ipv4{a.address}) ||
            a.address == core::node_address(ik, i).value)
          continue;
        // As `ip addr del` and `ip addr add`, through netlink (Error names what failed).
        here.delete_address(ifname, a.address, a.prefix_len);
        here.add_address(ifname, core::node_address(ik, i).value, subnet.length);
        here.add_address(ifname, a.address, subnet.length);
        break;
      }
      plan = lab::plan_swarm_node(topo, node, ifname, router, lab_backend);
    } else {
      ifname = lab::find_node_interface(topo, node, here.ipv4_addresses());
      plan = lab::plan_node(topo, node, ifname, lab_backend);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "wanlab: node-setup: {}\n", e.what());
    return 1;
  }
  lab::apply(plan, kernel);
  std::vector<std::string> routes;
  for (const auto& op : plan.ops)
    if (const auto* r = std::get_if<lab::AddRoute>(&op)) routes.push_back(r->dst.to_string());
  fmt::print("node {} of lab {}: {} {} (mac {}), offloads {}, routes to {} via {}\n", node, topo.name, ifname,
             core::node_address(ik, i).to_string(),
             swarm_router ? std::string("Docker's, kept") : core::mac_text(core::node_mac(ik, i)),
             kernel_backend ? "off (kernel backend)" : "on (userspace backend)",
             routes.empty() ? "no other DC" : fmt::format("{}", fmt::join(routes, ", ")),
             swarm_router ? fmt::format("{} ({})", router.to_string(), *swarm_router) : router.to_string());
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
