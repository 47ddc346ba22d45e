#pragma once
// The `wanlab` subcommands. Each returns the process exit status: 0 done, 1 failed,
// 2 bad input (file, flag).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace wanlab::cli {

struct UpArgs {
  std::string file;
  std::string backend = "auto";
  bool foreground = false;
  std::uint64_t seed = 1;
  std::optional<std::string> agents_tcp;
  std::optional<std::string> metrics;  // HOST:PORT to serve GET /metrics on
  std::optional<std::string> api;      // HOST:PORT to serve the control API on (with the token)
  std::string token;
  bool no_spawn_agents = false;
  bool router_only = false;        // containers: this namespace is the WAN router (lab/router_only.hpp)
  bool swarm = false;              // with router_only: a swarm stack's router (ports by DC subnet)
  std::optional<std::string> then;  // with --foreground: a command line to run once the lab is up
  std::string engine_sched = "fifo:50";  // the userspace engine thread's scheduling (wanlab::parse_thread_sched)
  std::optional<int> engine_cpu;         // ... and the CPU it is pinned to
};
int cmd_up(const UpArgs& a);
/// Prepares this namespace (a container) as node NODE of a router-only lab, then execs
/// `exec_argv` (if any).
int cmd_node_setup(const std::string& topology, const std::string& node, const std::string& backend,
                   const std::optional<std::string>& swarm_router, const std::vector<std::string>& exec_argv);

struct ComposeArgs {
  std::string topology;
  std::optional<std::string> scenario;
  std::string results = "./results";
  bool no_bench = false;
  bool monitoring = false;  // Prometheus and the dashboard beside the lab
  std::string project = ".";
  bool swarm = false;               // a Docker Swarm stack file instead (compose::stack_file)
  std::vector<std::string> hosts;   // swarm: "DC=HOST" or "controller=HOST" placements
  std::optional<int> api_port;      // swarm: the controller's published API port (compose::kApiPort)
};
/// Prints the docker-compose file of a lab (or its swarm stack file).
int cmd_compose(const ComposeArgs& a, const std::string& command_line);
int cmd_down(const std::optional<std::string>& lab);
int cmd_status(const std::optional<std::string>& lab, bool json);
int cmd_exec(const std::optional<std::string>& lab, const std::string& node, const std::vector<std::string>& argv);

struct LinkSetArgs {
  std::optional<std::string> lab;
  std::string src, dst;
  std::optional<std::string> delay, jitter, loss, loss_burst, rate, queue;
};
int cmd_link_set(const LinkSetArgs& a);

struct RailsSetArgs {
  std::optional<std::string> lab;
  std::string dc;
  std::optional<std::string> reconfiguration;
};
int cmd_rails_set(const RailsSetArgs& a);

struct CaptureArgs {
  std::optional<std::string> lab;
  std::string src, dst, file;
  std::optional<std::uint64_t> count;
  std::optional<std::string> duration;
};
/// Writes the frames the WAN link SRC->DST delivers into a pcap file (capture_command.cpp).
int cmd_capture(const CaptureArgs& a);

struct DashboardArgs {
  std::optional<std::string> lab;
  std::string listen = "127.0.0.1:8080";
  std::string token;
};
int cmd_dashboard(const DashboardArgs& a);

/// One clear line and false when the process lacks CAP_NET_ADMIN or CAP_SYS_ADMIN (for
/// namespaces), or, for router-only labs (`namespaces` false), CAP_NET_ADMIN or CAP_NET_RAW.
bool check_privileges(const char* what, bool namespaces = true);

}  // namespace wanlab::cli
