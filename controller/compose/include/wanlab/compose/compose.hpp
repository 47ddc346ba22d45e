#pragma once
// The docker-compose file of a lab (pure: topology and options in, YAML text out).
//
// The lab as containers, the same lab as `wanlab up` builds in namespaces:
//   - one internal bridge network per DC (`<lab>-<dc>`), with the address plan's subnet
//     (198.18.4k.0/22); the host's end of the bridge takes the subnet's last address
//     (198.18.4k+3.254), which no node uses;
//   - the controller container (`<lab>-controller`, NET_ADMIN) on every DC network at the DC
//     gateway's address (198.18.4k.1): `wanlab up --router-only` makes it the WAN router
//     (forwarding between the DC networks, shaping each directed DC pair with the kernel or
//     userspace backend) and serves agents over TCP (port kAgentPort, bearer token from
//     $WANLAB_TOKEN); with a scenario it then benchmarks it (`wanlab bench`) and keeps the
//     lab up;
//   - one container per node (`<lab>-<node>`, NET_ADMIN) at the node's address:
//     `wanlab node-setup` gives its interface the plan's hardware address, turns offloads
//     off where the router's backend is kernel (auto: the shared kernel has netem), routes
//     the DCs its DC has links to via the controller, then runs wanlab-agent.
// Folders of the project are mounted read-only at the same places under /wanlab (the
// containers' working folder): topologies/, traces/, bench/scenarios/; the results folder
// at /wanlab/bench-results, where `wanlab bench` writes by default. Names and labels
// (org.wanlab.lab=<lab>) carry the lab's name, so `docker-compose down` removes exactly
// the lab's containers and networks.
#include <optional>
#include <string>

#include "wanlab/core/topology.hpp"

namespace wanlab::compose {

inline constexpr int kAgentPort = 7070;
/// With monitoring: the controller's /metrics, the dashboard and Prometheus.
inline constexpr int kMetricsPort = 9464;
inline constexpr int kDashboardPort = 8080;
inline constexpr int kPrometheusPort = 9090;
/// Nodes per DC in a compose lab: a /22 less network, gateway (the controller), broadcast
/// and the bridge's own address.
inline constexpr int kMaxComposeNodes = 1020;

struct ComposeOptions {
  std::string topology;                 // path in the project, e.g. "topologies/three-dc.json"
  std::optional<std::string> scenario;  // path in the project, e.g. "bench/scenarios/three-dc-7b.json"
  bool bench = true;                    // with a scenario: the controller benchmarks it once the lab is up
  std::string results = "./results";    // host folder (relative to the project, or absolute)
  std::string image = "wanlab:latest";
  std::string command;                  // the command that made the file, for its header
  // --monitoring: the controller serves /metrics (port kMetricsPort, bearer token) on a
  // `monitoring` network it shares with a Prometheus container (Debian's prometheus package,
  // image built from docker/prometheus/Dockerfile) that scrapes it every second, and with a
  // dashboard container (`wanlab dashboard`, reading the controller's socket through the
  // shared /run/wanlab volume). Prometheus and the dashboard are published on the host's
  // loopback only (127.0.0.1:kPrometheusPort, 127.0.0.1:kDashboardPort).
  bool monitoring = false;
  std::string prometheus_image = "wanlab-prometheus:latest";
};

/// The compose file. Throws std::invalid_argument naming the field and the reason where the
/// topology cannot be a compose lab (LAN shaping, a DC with more than kMaxComposeNodes nodes)
/// or an option is malformed.
std::string compose_file(const core::Topology& topo, const ComposeOptions& options);

}  // namespace wanlab::compose
