// The lab commands of `wanlab`: up, down, status, exec, link set, capture, dashboard,
// node-setup and compose (subcommand.hpp).
#include "subcommand.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "wanlab/api/server.hpp"
#include "wanlab/common/secrets.hpp"

namespace wanlab::cli {
namespace {

std::unique_ptr<Subcommand> subcommand(CLI::App* cmd, bool remote, std::function<int(const Invocation&)> run) {
  return std::make_unique<Subcommand>(cmd, remote, std::move(run));
}

}  // namespace

std::optional<std::string> read_token_file(const std::string& file, const std::string& context,
                                           const std::string& flag) {
  std::string warning;
  std::string token;
  try {
    token = wanlab::read_secret_file(file, warning);
  } catch (const std::runtime_error& e) {
    fmt::print(stderr, "wanlab: {}{} {}\n", context, flag, e.what());
    return std::nullopt;
  }
  if (!warning.empty()) fmt::print(stderr, "wanlab: warning: {} {}\n", flag, warning);
  return token;
}

namespace {

// `up` after parsing: the token from --token-file, then the options that need one.
int run_up(UpArgs& up, const std::optional<std::string>& up_token_file, bool token_in_argv) {
  if (up_token_file) {
    if (token_in_argv) {
      fmt::print(stderr, "wanlab: up: give the token once: --token or --token-file\n");
      return 2;
    }
    const auto token = read_token_file(*up_token_file, "up: ", "--token-file");
    if (!token) return 2;
    up.token = *token;
  } else if (token_in_argv) {
    fmt::print(stderr, "wanlab: note: --token on the command line could be read by any local user (ps) until "
                       "wanlab hid it; pass it in $WANLAB_TOKEN or --token-file FILE instead\n");
  }
  if (up.then && !up.foreground) {
    fmt::print(stderr, "wanlab: up: --then needs --foreground (the command runs beside the controller)\n");
    return 2;
  }
  if (up.agents_tcp && up.token.empty()) {
    fmt::print(stderr, "wanlab: up: --agents-tcp needs --token (or $WANLAB_TOKEN): agents over TCP must "
                       "authenticate\n");
    return 2;
  }
  if (up.api) {
    if (up.token.empty()) {
      fmt::print(stderr, "wanlab: up: --api needs --token (or --token-file, $WANLAB_TOKEN): the control API over "
                         "TCP can do what root can in the lab\n");
      return 2;
    }
    try {
      (void)wanlab::api::parse_host_port(*up.api);
    } catch (const std::invalid_argument& e) {
      fmt::print(stderr, "wanlab: up: --api: {}\n", e.what());
      return 2;
    }
  }
  if (up.metrics) {
    try {
      const auto host = wanlab::api::parse_host_port(*up.metrics).first;
      if (!wanlab::api::is_loopback_host(host) && up.token.empty()) {
        fmt::print(stderr, "wanlab: up: --metrics {}: not a loopback address, so it needs --token (or "
                           "$WANLAB_TOKEN): scrapers must authenticate\n",
                   *up.metrics);
        return 2;
      }
    } catch (const std::invalid_argument& e) {
      fmt::print(stderr, "wanlab: up: --metrics: {}\n", e.what());
      return 2;
    }
  }
  return cmd_up(up);
}

}  // namespace

std::unique_ptr<Subcommand> add_up(CLI::App& app) {
  struct State {
    UpArgs up;
    std::optional<std::string> up_token_file;
  };
  auto s = std::make_shared<State>();
  CLI::App* up_cmd = nullptr;
  {
    auto& [up, up_token_file] = *s;
    up_cmd = app.add_subcommand("up", "Bring a lab up from a topology file; returns when it is ready, leaving a "
                                            "controller daemon that owns it");
    up_cmd->add_option("file", up.file, "Topology file (JSON, see topologies/README.md)")->required();
    up_cmd->add_option("--backend", up.backend,
                       "WAN shaping: kernel (HTB + netem through netlink), userspace (an engine in the controller "
                       "forwards and shapes; any kernel), or auto: kernel where netem exists, else userspace")
        ->check(CLI::IsMember({"auto", "kernel", "userspace"}));
    up_cmd->add_option("--seed", up.seed, "Seed of the userspace engine's jitter and loss (same seed, same run)");
    up_cmd->add_flag("--foreground", up.foreground, "Run the controller in this process (for containers)");
    up_cmd->add_option("--agents-tcp", up.agents_tcp,
                       "Also accept agents over TCP on HOST:PORT (containers, other hosts); needs --token");
    up_cmd->add_option("--metrics", up.metrics,
                       "Serve GET /metrics (Prometheus text format, docs/metrics.md) over TCP on HOST:PORT, e.g. "
                       "127.0.0.1:9464; an address other than loopback needs --token, which scrapers send as "
                       "\"Authorization: Bearer TOKEN\"")
        ->type_name("HOST:PORT");
    up_cmd->add_option("--api", up.api,
                       "Also serve the whole control API (status, link set, replay, runs) over TCP on HOST:PORT, for "
                       "`wanlab --api HOST:PORT ...` from another host; every request must carry the token (--token, "
                       "--token-file or $WANLAB_TOKEN), on loopback too")
        ->type_name("HOST:PORT");
    up_cmd->add_option("--token", up.token,
                       "Bearer token agents must present over TCP (default: $WANLAB_TOKEN). On the command line it is "
                       "visible to every local user (ps) until wanlab has read it: prefer $WANLAB_TOKEN or --token-file")
        ->envname("WANLAB_TOKEN");
    up_cmd->add_option("--token-file", up_token_file,
                       "Read the bearer token from the first line of FILE (keep it mode 600); instead of --token")
        ->type_name("FILE");
    up_cmd->add_flag("--no-spawn-agents", up.no_spawn_agents,
                     "Do not start agents in the nodes' namespaces for runs: wait for agents to connect (containers)");
    up_cmd->add_flag("--router-only", up.router_only,
                     "Make no namespaces: this namespace (a container on one network per DC, holding each DC's "
                     "gateway address 198.18.4k.1/22) is the lab's WAN router; nodes are containers "
                     "(`wanlab node-setup`). Needs CAP_NET_ADMIN and CAP_NET_RAW only");
    up_cmd->add_flag("--swarm", up.swarm,
                     "With --router-only, in a Docker Swarm stack: the port toward each DC is the interface with an "
                     "address in the DC's /22 (Docker chose it), routed for the whole /22; the userspace engine "
                     "learns the nodes' hardware addresses from their frames (docs/docker.md, Swarm)");
    up_cmd->add_option("--then", up.then,
                       "With --foreground: run this command line (words split on blanks, no shell) once the lab is "
                       "up, e.g. \"wanlab bench bench/scenarios/three-dc-7b.json\"; the lab stays up after it ends")
        ->type_name("CMD");
    up_cmd->add_option("--engine-sched", up.engine_sched,
                       "Scheduling of the userspace engine's thread: fifo:PRIORITY or rr:PRIORITY (real-time, 1-99; "
                       "the kernel's RT throttling bounds it), deadline:RUNTIME/PERIOD (SCHED_DEADLINE, e.g. "
                       "deadline:600us/1ms), nice[:N] (the fair scheduler, default -20) or off. Where the kernel "
                       "refuses (no CAP_SYS_NICE) it falls back to nice -20 with a warning")
        ->default_str("fifo:50")
        ->type_name("POLICY");
    up_cmd->add_option("--engine-cpu", up.engine_cpu,
                       "Pin the userspace engine's thread to this CPU; the lab's receive paths are steered to the other "
                       "CPUs. Default for a real-time engine in a namespace lab on 2+ CPUs: the last CPU this process "
                       "may use (with several labs up at once, give each its own)")
        ->type_name("N");
  }
  return subcommand(up_cmd, false, [s](const Invocation& inv) {
    auto& [up, up_token_file] = *s;
    return run_up(up, up_token_file, inv.token_in_argv);
  });
}

std::unique_ptr<Subcommand> add_down(CLI::App& app) {
  struct State {
    std::optional<std::string> down_lab;
  };
  auto s = std::make_shared<State>();
  CLI::App* down_cmd = nullptr;
  {
    auto& [down_lab] = *s;
    down_cmd = app.add_subcommand("down", "Remove a lab and everything it created (also after its controller died)");
    down_cmd->add_option("lab", down_lab, "Lab name (default: the only lab up)");
  }
  return subcommand(down_cmd, false, [s](const Invocation&) {
    auto& [down_lab] = *s;
    return cmd_down(down_lab);
  });
}

std::unique_ptr<Subcommand> add_status(CLI::App& app) {
  struct State {
    std::optional<std::string> status_lab;
    bool status_json = false;
  };
  auto s = std::make_shared<State>();
  CLI::App* status_cmd = nullptr;
  {
    auto& [status_lab, status_json] = *s;
    status_cmd = app.add_subcommand("status", "Show labs: DCs, nodes, addresses, namespaces, links and live counters");
    status_cmd->add_option("lab", status_lab, "Lab name (default: every lab up)");
    status_cmd->add_flag("--json", status_json, "Machine-readable output");
  }
  return subcommand(status_cmd, true, [s](const Invocation&) {
    auto& [status_lab, status_json] = *s;
    return cmd_status(status_lab, status_json);
  });
}

std::unique_ptr<Subcommand> add_exec(CLI::App& app) {
  struct State {
    std::optional<std::string> exec_lab;
    std::string exec_node;
    std::vector<std::string> exec_argv;
  };
  auto s = std::make_shared<State>();
  CLI::App* exec_cmd = nullptr;
  {
    auto& [exec_lab, exec_node, exec_argv] = *s;
    exec_cmd = app.add_subcommand("exec", "Run a command inside a node: its network and UTS namespaces (host name: the "
                                                   "node's), its /sys, and the lab's hosts file as /etc/hosts");
    exec_cmd->add_option("--lab", exec_lab, "Lab name (default: the one lab that has NODE; refused when several do)");
    exec_cmd->add_option("node", exec_node, "Node name, e.g. use-0")->required();
    exec_cmd->add_option("cmd", exec_argv, "Command and arguments (after --)")->required();
    exec_cmd->positionals_at_end();
  }
  return subcommand(exec_cmd, false, [s](const Invocation&) {
    auto& [exec_lab, exec_node, exec_argv] = *s;
    if (!exec_argv.empty() && exec_argv.front() == "--") exec_argv.erase(exec_argv.begin());
    if (exec_argv.empty()) {
      fmt::print(stderr, "wanlab: exec: no command given (wanlab exec NODE -- CMD...)\n");
      return 2;
    }
    return cmd_exec(exec_lab, exec_node, exec_argv);
  });
}

std::unique_ptr<Subcommand> add_link(CLI::App& app) {
  struct State {
    LinkSetArgs ls;
  };
  auto s = std::make_shared<State>();
  CLI::App* link_cmd = nullptr;
  CLI::App* set_cmd = nullptr;
  {
    auto& [ls] = *s;
    link_cmd = app.add_subcommand("link", "Inspect or change WAN links");
    link_cmd->require_subcommand(1);
    set_cmd = link_cmd->add_subcommand("set", "Change a directed link in place (netlink change; queues are kept)");
    set_cmd->add_option("src", ls.src, "Source DC")->required();
    set_cmd->add_option("dst", ls.dst, "Destination DC")->required();
    set_cmd->add_option("--lab", ls.lab, "Lab name (default: the only lab up)");
    set_cmd->add_option("--delay", ls.delay, "One-way delay, e.g. 34ms");
    set_cmd->add_option("--jitter", ls.jitter, "Jitter, e.g. 1ms (never reorders)");
    set_cmd->add_option("--loss", ls.loss, "Loss, e.g. 0.1% (with --loss-burst: in the good state)");
    set_cmd->add_option("--loss-burst", ls.loss_burst,
                        "Bursty (Gilbert-Elliott) loss \"P R [BAD]\": good->bad and bad->good per packet, loss in "
                        "the bad state (default 100%), e.g. \"0.5% 25%\"; \"off\" for random loss only");
    set_cmd->add_option("--rate", ls.rate, "Rate, e.g. 100Mbit or 4.35Gbit");
    set_cmd->add_option("--queue", ls.queue, "Queue limit, packets (1000p) or bytes (4MB)");
  }
  return subcommand(link_cmd, true, [s, set_cmd](const Invocation&) {
    auto& [ls] = *s;
    if (!*set_cmd) return 2;
    return cmd_link_set(ls);
  });
}

std::unique_ptr<Subcommand> add_rails(CLI::App& app) {
  struct State {
    RailsSetArgs rs;
  };
  auto s = std::make_shared<State>();
  CLI::App* rails_cmd = nullptr;
  CLI::App* set_cmd = nullptr;
  {
    auto& [rs] = *s;
    rails_cmd = app.add_subcommand("rails", "Change a DC's photonic rails in a running lab (docs/rails.md)");
    rails_cmd->require_subcommand(1);
    set_cmd = rails_cmd->add_subcommand(
        "set", "Change a DC's OCS rails in place: the rail switch applies it from its next reconfiguration on");
    set_cmd->add_option("dc", rs.dc, "DC whose fabric is OCS rails")->required();
    set_cmd->add_option("--lab", rs.lab, "Lab name (default: the only lab up)");
    set_cmd->add_option("--reconfiguration", rs.reconfiguration,
                        "How long a change of circuits takes, 0 to 1s, e.g. 10us or 25ms");
  }
  return subcommand(rails_cmd, true, [s, set_cmd](const Invocation&) {
    auto& [rs] = *s;
    if (!*set_cmd) return 2;
    return cmd_rails_set(rs);
  });
}

std::unique_ptr<Subcommand> add_capture(CLI::App& app) {
  struct State {
    CaptureArgs cap;
  };
  auto s = std::make_shared<State>();
  CLI::App* capture_cmd = nullptr;
  {
    auto& [cap] = *s;
    capture_cmd = app.add_subcommand(
        "capture", "Write the frames a WAN link delivers into a pcap file (Wireshark, tcpdump -r): those that reach "
                   "DST's gateway from the WAN router with a source address in SRC's subnet, after the link's queue, "
                   "rate, delay, jitter and loss, timestamped on arrival; either backend");
    capture_cmd->add_option("src", cap.src, "Source DC")->required();
    capture_cmd->add_option("dst", cap.dst, "Destination DC")->required();
    capture_cmd->add_option("-w,--write", cap.file, "pcap file to write")->required()->type_name("FILE");
    capture_cmd->add_option("--lab", cap.lab, "Lab name (default: the only lab up)");
    capture_cmd->add_option("--count", cap.count, "Stop after N frames")->type_name("N");
    capture_cmd->add_option("--duration", cap.duration, "Stop after this long, e.g. 10s (default: at Ctrl-C)");
  }
  return subcommand(capture_cmd, false, [s](const Invocation&) {
    auto& [cap] = *s;
    return cmd_capture(cap);
  });
}

std::unique_ptr<Subcommand> add_dashboard(CLI::App& app) {
  struct State {
    DashboardArgs dash;
  };
  auto s = std::make_shared<State>();
  CLI::App* dashboard_cmd = nullptr;
  {
    auto& [dash] = *s;
    dashboard_cmd = app.add_subcommand(
        "dashboard", "Serve a live web page of a lab: its DCs and links as a map, per-link throughput and queue over "
                     "the last minutes, the arbiter's windows as a Gantt chart, a run's per-GPU progress "
                     "(docs/metrics.md)");
    dashboard_cmd->add_option("--lab", dash.lab, "Lab name (default: the only lab up)");
    dashboard_cmd->add_option("--listen", dash.listen,
                              "HOST:PORT to serve on (default 127.0.0.1:8080); an address other than loopback needs "
                              "--token, which the page's URL then carries (?token=...)")
        ->type_name("HOST:PORT");
    dashboard_cmd->add_option("--token", dash.token, "Token the page's requests must carry (default: $WANLAB_TOKEN)")
        ->envname("WANLAB_TOKEN");
  }
  return subcommand(dashboard_cmd, false, [s](const Invocation&) {
    auto& [dash] = *s;
    return cmd_dashboard(dash);
  });
}

std::unique_ptr<Subcommand> add_node_setup(CLI::App& app) {
  struct State {
    std::string ns_topology, ns_node, ns_backend = "auto";
    std::vector<std::string> ns_argv;
    std::optional<std::string> ns_swarm;
  };
  auto s = std::make_shared<State>();
  CLI::App* node_setup_cmd = nullptr;
  {
    auto& [ns_topology, ns_node, ns_backend, ns_argv, ns_swarm] = *s;
    node_setup_cmd = app.add_subcommand(
        "node-setup", "Prepare this network namespace (a container) as a node of a router-only lab, then run CMD: "
                      "give the interface holding the node's address the plan's hardware address, turn its offloads "
                      "off where the router's backend is kernel, and route the DCs its DC has WAN links to via the "
                      "controller (198.18.4k.1)");
    node_setup_cmd->add_option("topology", ns_topology, "Topology file (JSON)")->required();
    node_setup_cmd->add_option("node", ns_node, "Node name, e.g. use-0")->required();
    node_setup_cmd
        ->add_option("--backend", ns_backend,
                     "The router's backend, as given to its `up`: kernel (offloads off, so netem sees MTU-sized "
                     "packets), userspace (offloads on: the engine takes GSO super-frames), or auto: kernel where "
                     "this kernel has netem (the containers' kernel is the router's)")
        ->check(CLI::IsMember({"auto", "kernel", "userspace"}));
    node_setup_cmd->add_option("--swarm", ns_swarm,
                               "Swarm labs: the router's service name (e.g. controller). Keep the interface's own "
                               "(overlay) address and hardware address, add the plan's node address, send from it, and "
                               "route the other DCs via the address that name resolves to in this DC")
        ->type_name("NAME");
    node_setup_cmd->add_option("cmd", ns_argv, "Command to run afterwards (after --), e.g. wanlab-agent ...");
    node_setup_cmd->positionals_at_end();
  }
  return subcommand(node_setup_cmd, false, [s](const Invocation&) {
    auto& [ns_topology, ns_node, ns_backend, ns_argv, ns_swarm] = *s;
    if (!ns_argv.empty() && ns_argv.front() == "--") ns_argv.erase(ns_argv.begin());
    return cmd_node_setup(ns_topology, ns_node, ns_backend, ns_swarm, ns_argv);
  });
}

std::unique_ptr<Subcommand> add_compose(CLI::App& app) {
  struct State {
    ComposeArgs compose_args;
  };
  auto s = std::make_shared<State>();
  CLI::App* compose_cmd = nullptr;
  {
    auto& [compose_args] = *s;
    compose_cmd = app.add_subcommand(
        "compose", "Print the docker-compose file of a lab: one network per DC, the controller container as the WAN "
                   "router, one container per node (write it to docker-compose.yml in the project folder)");
    compose_cmd->add_option("topology", compose_args.topology, "Topology file, in the project's topologies/")->required();
    compose_cmd->add_option("--scenario", compose_args.scenario,
                            "Scenario (in the project's bench/scenarios/) the controller benchmarks once the lab is up "
                            "(`wanlab bench`); none: the lab only");
    compose_cmd->add_flag("--no-bench", compose_args.no_bench,
                          "Mount the scenarios but do not benchmark on `up` (run them with docker-compose exec)");
    compose_cmd->add_flag("--monitoring", compose_args.monitoring,
                          "Add a Prometheus container (docker/prometheus/Dockerfile) scraping the controller's /metrics "
                          "every second, published at 127.0.0.1:9090, and the dashboard at 127.0.0.1:8080 "
                          "(docs/metrics.md)");
    compose_cmd->add_option("--results", compose_args.results,
                            "Host folder for results, mounted at /wanlab/bench-results (default: ./results)");
    compose_cmd->add_option("--project", compose_args.project,
                            "Project folder: where docker-compose.yml, the Dockerfile, topologies/, traces/ and "
                            "bench/scenarios/ are (default: .)");
    compose_cmd->add_flag("--swarm", compose_args.swarm,
                          "Print a Docker Swarm stack file instead (`docker stack deploy -c FILE LAB`): one overlay "
                          "network per DC, the topology and scenario as Docker configs (read from --project), results "
                          "in the volume LAB-results (docs/docker.md, Swarm)");
    compose_cmd->add_option("--host", compose_args.hosts,
                            "With --swarm: run DC's node services (or the controller's) on the swarm node HOST "
                            "(repeatable); unnamed ones run on nodes labelled wanlab.DC=true (wanlab.controller=true)")
        ->type_name("DC=HOST");
    compose_cmd->add_option("--api-port", compose_args.api_port,
                            "With --swarm: the port the controller's host publishes its control API on, for `wanlab "
                            "--api HOST:PORT ...` from any manager (default 7071)")
        ->check(CLI::Range(1, 65535));
  }
  return subcommand(compose_cmd, false, [s](const Invocation& inv) {
    auto& [compose_args] = *s;
    const int argc = inv.argc;
    char** argv = inv.argv;
    std::string line = "wanlab";
    for (int i = 1; i < argc; ++i) line += fmt::format(" {}", argv[i]);
    return cmd_compose(compose_args, line);
  });
}

}  // namespace wanlab::cli
