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
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "wanlab/core/topology.hpp"

namespace wanlab::compose {

inline constexpr int kAgentPort = 7070;
/// Swarm stacks: the controller's control API over TCP (`wanlab up --api`), published on
/// its host for `wanlab --api HOST:PORT ...` from any manager.
inline constexpr int kApiPort = 7071;
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
  // Swarm stacks only (stack_file): where each service runs. Keys are DC names or
  // "controller", values swarm node hostnames (`node.hostname == HOST`); a DC or the
  // controller not named here runs on the swarm nodes labelled for it
  // (`node.labels.wanlab.<dc> == true`, `node.labels.wanlab.controller == true`).
  std::map<std::string, std::string> hosts;
  // Swarm stacks only: the project folder as the deploying host sees it, relative to the
  // stack file's folder or absolute: the configs' `file:` is this folder and the project path.
  std::string project = ".";
  // Swarm stacks only: the topology's trace files (project paths, e.g. "traces/a.csv").
  std::vector<std::string> traces;
  // Swarm stacks only: the port the controller's host publishes the control API on.
  int api_port = kApiPort;
};

/// The compose file. Throws std::invalid_argument naming the field and the reason where the
/// topology cannot be a compose lab (LAN shaping, a DC with more than kMaxComposeNodes nodes)
/// or an option is malformed.
std::string compose_file(const core::Topology& topo, const ComposeOptions& options);

/// The same lab as a Docker Swarm stack (`docker stack deploy -c FILE STACK`), for one host or
/// many (docs/docker.md, Swarm). Swarm does not honour static addresses, so the address plan
/// adapts:
///   - one attachable, internal overlay network per DC (`<lab>-<dc>`) whose subnet is the upper
///     half of the DC's /22 (core::swarm_task_subnet): Docker gives every container an address
///     there, clear of the plan's node addresses;
///   - the controller service (`endpoint_mode: dnsrr`, so the name `controller` resolves to its
///     container's address on the asker's network) runs `wanlab up --router-only --swarm`: its
///     port toward DC k is the interface with an address in DC k's /22, it routes the whole /22
///     on that port, and its userspace engine learns each node's hardware address from the
///     frames the node sends (the overlay's own address is kept: remote hosts' VXLAN tables
///     know only it);
///   - each node service runs `wanlab node-setup --swarm controller ...`: it makes the plan's
///     address the primary of the DC's /22 on its interface (Docker's a secondary of it, so
///     everything it sends leaves from the plan's address), and routes the other DCs via the
///     controller's address in its DC (resolved by name); then wanlab-agent connects to
///     tcp:controller:7070.
///   Agents, runs and `wanlab status` then see the plan's addresses, as in compose labs.
/// The token (agents' and the control API's) is the Docker secret `<lab>-token`, made
/// before the deploy (`docker secret create`), at /run/secrets/wanlab-token in every
/// service. The controller also serves the control API (`up --api 0.0.0.0:kApiPort`),
/// published in host mode on the controller's host (ComposeOptions::api_port): `wanlab --api
/// HOST:PORT status|link set|replay|run` from any manager. Publishing needs a network that
/// is not internal: the controller alone is also on `<lab>-control` (overlay, attachable),
/// which the DC networks never reach.
/// Placement: ComposeOptions::hosts, else node labels. The topology, the scenario and the
/// topology's traces are Docker configs at their project paths under /wanlab; the controller's
/// results go to the volume `<lab>-results` (at /wanlab/bench-results). Throws
/// std::invalid_argument as compose_file does, and for a DC with more than
/// core::kMaxSwarmNodesPerDc nodes or a host given for an unknown DC.
std::string stack_file(const core::Topology& topo, const ComposeOptions& options);

}  // namespace wanlab::compose
