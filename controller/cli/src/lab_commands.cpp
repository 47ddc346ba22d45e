// up and down: the life cycle of a lab and its controller daemon (its main loop: controller/daemon/).
#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <thread>
#include <variant>

#include "commands.hpp"
#include "wanlab/daemon/daemon.hpp"
#include "lab_lookup.hpp"
#include "wanlab/api/lab_controller.hpp"
#include "wanlab/run/run_manager.hpp"
#include "wanlab/api/server.hpp"
#include "wanlab/common/child_process.hpp"
#include "wanlab/common/io_loop.hpp"
#include "wanlab/common/printable.hpp"
#include "wanlab/common/system_error.hpp"
#include "wanlab/common/thread.hpp"
#include "wanlab/common/unique_fd.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/lab/host_tcp.hpp"
#include "wanlab/lab/state.hpp"
#include "wanlab/lab/teardown.hpp"
#include "wanlab/netlink/netlink.hpp"
#include "wanlab/replay/trace.hpp"

namespace wanlab::cli {
namespace {

using namespace std::chrono_literals;

bool has_cap(int cap) {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capget, &hdr, data) != 0) return false;
  return (data[cap / 32].effective & (1u << (cap % 32))) != 0;
}

std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    auto n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

// A run the dead controller of lab `name` left behind ends with an error.txt in its folder
// (lab::end_orphaned_run); says so on stdout.
void notice_orphaned_run(const lab::LabState& state, const std::string& noticed_by) {
  try {
    if (const auto file = lab::end_orphaned_run(state, noticed_by))
      fmt::print("lab {}: its controller died during run {}; the run is over: {}\n", state.lab, state.run->id,
                 file->string());
  } catch (const std::exception& e) {
    fmt::print(stderr, "wanlab: lab {}: its controller died during run {}: {}\n", state.lab, state.run->id, e.what());
  }
}

void remove_leftovers(const std::string& name) {
  const auto state = lab::read_state(name);
  if (state) notice_orphaned_run(*state, "`wanlab up`");
  const auto planned = state ? state->namespaces : std::vector<std::string>{};
  if (!state && !lab::leftovers_present(name, planned)) return;
  const auto r = lab::teardown(name, planned);
  fmt::print("lab {}: removed leftovers of a controller that is gone{}: {} namespaces{}\n", name,
             state ? fmt::format(" (pid {})", state->controller_pid) : "", r.removed.size(),
             r.killed_processes ? fmt::format(", {} processes killed", r.killed_processes) : "");
  std::error_code ec;
  std::filesystem::remove(lab::lab_dir(name) / "state.json", ec);
  std::filesystem::remove(lab::socket_path(name), ec);
}

// How long `up` waits for another `up` of the same lab to finish building it.
constexpr auto kWaitForOtherUp = std::chrono::milliseconds(60s);

// `up` of a lab that is already up: nothing to do if it runs this topology, else refused.
int already_up(const lab::LabState& state, const core::Topology& wanted) {
  std::vector<std::string> differences;
  try {
    differences = core::topology_differences(topology_of(state), wanted);
  } catch (const std::exception& e) {
    differences.push_back(fmt::format("its recorded topology is unreadable: {}", e.what()));
  }
  if (differences.empty()) {
    fmt::print("lab {} is already up (controller pid {}, topology {}); nothing done\n", state.lab,
               state.controller_pid, state.topology_file);
    return 0;
  }
  fmt::print(stderr,
             "wanlab: lab {} is already up with a different topology (controller pid {}, brought up from {}; `link "
             "set` changes count too); nothing done:\n",
             state.lab, state.controller_pid, state.topology_file);
  for (const auto& d : differences) fmt::print(stderr, "  {}\n", d);
  fmt::print(stderr, "take it down first (wanlab down {}), or give this topology another \"name\"\n", state.lab);
  return 1;
}

}  // namespace

bool check_privileges(const char* what, bool namespaces) {
  if (!namespaces) {
    if (has_cap(CAP_NET_ADMIN) && has_cap(CAP_NET_RAW)) return true;
    fmt::print(stderr,
               "wanlab: {} needs CAP_NET_ADMIN and CAP_NET_RAW to shape and forward on this namespace's interfaces; "
               "run it as root, or give the container those capabilities (cap_add: [NET_ADMIN, NET_RAW])\n",
               what);
    return false;
  }
  if (has_cap(CAP_NET_ADMIN) && has_cap(CAP_SYS_ADMIN)) return true;
  fmt::print(stderr,
             "wanlab: {} needs CAP_NET_ADMIN and CAP_SYS_ADMIN to create network namespaces and links; "
             "run it as root (e.g. with sudo)\n",
             what);
  return false;
}

namespace {

// --engine-sched and --engine-cpu; nullopt (said why) when they are not valid here.
std::optional<ThreadSched> engine_sched_of(const UpArgs& a) {
  const auto sched = parse_thread_sched(a.engine_sched);
  if (!sched) {
    fmt::print(stderr, "wanlab: --engine-sched: {}\n", sched.error);
    return std::nullopt;
  }
  ThreadSched engine_sched = sched.value;
  if (a.engine_cpu) {
    const long cpus = ::sysconf(_SC_NPROCESSORS_CONF);
    if (*a.engine_cpu < 0 || *a.engine_cpu >= cpus) {
      fmt::print(stderr, "wanlab: --engine-cpu: {} is not a CPU of this machine (0..{})\n", *a.engine_cpu, cpus - 1);
      return std::nullopt;
    }
    if (sched.value.policy == ThreadSched::Policy::deadline) {
      fmt::print(stderr, "wanlab: --engine-cpu: a SCHED_DEADLINE engine (--engine-sched {}) cannot be pinned to a CPU\n",
                 a.engine_sched);
      return std::nullopt;
    }
    engine_sched.cpu = a.engine_cpu;
  }
  return engine_sched;
}

// The traces named by links, checked before anything is built (the controller starts
// their replays once the lab is up): a line per replay, or nullopt (said why).
std::optional<std::vector<std::string>> check_link_traces(const core::Topology& topo) {
  std::vector<std::string> replays;
  for (const auto& l : topo.links) {
    if (!l.trace) continue;
    const auto link = fmt::format("{}->{}", topo.dcs[l.src].name, topo.dcs[l.dst].name);
    try {
      const auto trace = replay::load_trace(*l.trace);
      replay::check_against(trace, l.params, link);
      const auto s = replay::summarize(trace);
      replays.push_back(fmt::format("link {} replays {} ({} steps over {}, {})", link, l.trace->string(), s.steps,
                                    replay::human_trace_time(s.length), replay::to_string(trace.mode)));
    } catch (const core::ConfigError& e) {
      fmt::print(stderr, "wanlab: the trace of link {} ({}): {}\n", link, l.json_path, e.what());
      return std::nullopt;
    }
  }
  return replays;
}

// The lab's lock, for building it here. Held by a controller, or by another `up` still
// building the lab (its state is written once the lab is up): waits a while for one or the
// other. Without the lock, the exit status of this `up` (it said why).
std::variant<lab::LabLock, int> lock_lab(const core::Topology& topo) {
  const auto& name = topo.name;
  if (auto lock = lab::LabLock::try_acquire(name)) return std::move(*lock);
  std::optional<lab::LabState> state;
  for (auto waited = 0ms; waited < kWaitForOtherUp; waited += 100ms) {
    state = lab::read_state(name);
    if (state && state->controller_pid > 0) return already_up(*state, topo);
    state.reset();
    if (auto got = lab::LabLock::try_acquire(name)) return std::move(*got);  // the other `up` failed and let go
    std::this_thread::sleep_for(100ms);
  }
  fmt::print(stderr, "wanlab: lab {} is being brought up by another `wanlab up` (still not up after {} s); "
                     "nothing done\n",
             name, std::chrono::duration_cast<std::chrono::seconds>(kWaitForOtherUp).count());
  return 1;
}

// The controller's options from the command line and this host (netem, the nodes' TCP
// congestion control); nullopt, with `rc` set, when the lab cannot be built so.
std::optional<api::UpOptions> up_options(const UpArgs& a, const core::Topology& topo, const ThreadSched& engine_sched,
                                         int& rc) {
  api::UpOptions options;
  options.engine_sched = engine_sched;
  options.backend = a.backend;
  options.seed = a.seed;
  options.agents_tcp = a.agents_tcp;
  options.token = a.token;
  options.metrics_listen = a.metrics;
  options.api_listen = a.api;
  options.spawn_agents = !a.no_spawn_agents;
  options.router_only = a.router_only;
  options.swarm = a.swarm;
  if (a.swarm && !a.router_only) {
    fmt::print(stderr, "wanlab: up: --swarm is for a swarm stack's router: add --router-only\n");
    rc = 2;
    return std::nullopt;
  }
  options.netem = netlink::netem_available();
  const auto backend = api::resolve_backend(a.backend, options.netem, core::has_rails(topo));
  if (backend == "kernel" && !options.netem)
    fmt::print("note: this kernel has no netem qdisc: WAN rates and queue limits are applied (HTB), but delay, "
               "jitter and loss are not; use --backend userspace (or auto) for them\n");
  if (a.backend == "auto" && backend == "userspace")
    fmt::print("note: {}\n", options.netem ? "the lab has rails: the WAN and the rails run in the userspace engine"
                                            : "this kernel has no netem qdisc: the WAN runs in the userspace engine");
  if (!a.router_only) {
    try {
      const auto cc = lab::choose_tcp_congestion(topo);
      options.tcp_congestion = cc.set;
      if (!cc.note.empty()) fmt::print("note: {}\n", cc.note);
    } catch (const std::exception& e) {
      fmt::print(stderr, "wanlab: lab {} not built: {}\n", topo.name, e.what());
      rc = 1;
      return std::nullopt;
    }
  }
  return options;
}

// Forks the controller daemon (this program, without exec: --token was blanked in argv
// once parsed) and waits for its one-line report: up, or why not.
int start_daemon(const core::Topology& topo, const api::UpOptions& options, const std::vector<std::string>& replays) {
  const auto& name = topo.name;
  Pipe ready = make_pipe("the controller's report");
  // Single-threaded here (netem_available joins its probe), so fork is safe.
  auto controller = ChildProcess::fork_call("the controller of lab " + name, [&]() -> int {
    ready.read.reset();
    ::setsid();
    const UniqueFd devnull(::open("/dev/null", O_RDWR | O_CLOEXEC));
    UniqueFd log;
    try {
      lab::make_lab_dir(name);
      log = lab::open_lab_file(lab::log_path(name), O_WRONLY | O_APPEND, 0644);
    } catch (const std::exception& e) {
      fmt::print(stderr, "wanlab: {}\n", e.what());
    }
    ::dup2(devnull.get(), 0);
    ::dup2(log ? log.get() : devnull.get(), 1);
    ::dup2(log ? log.get() : devnull.get(), 2);
    ::signal(SIGHUP, SIG_IGN);
    int rc = 1;
    try {
      rc = daemon::run_controller(topo, options, std::move(ready.write), std::nullopt);
    } catch (const std::exception& e) {
      spdlog::critical("controller failed: {}", e.what());
    }
    std::fflush(nullptr);
    return rc;
  });
  ready.write.reset();
  const auto answer = read_all(ready.read.get());
  ready.read.reset();
  if (answer.starts_with("ready ")) {
    controller.detach();  // the daemon outlives this command
    const auto j = nlohmann::json::parse(answer.substr(6));
    std::size_t nodes = topo.node_count();
    fmt::print("lab {} is up: {} DCs, {} nodes, {} directed WAN links ({} backend); {} kernel operations in "
               "{:.0f} ms\n",
               name, topo.dcs.size(), nodes, topo.links.size(), api::resolve_backend(options.backend, options.netem),
               j["operations"].get<std::size_t>(), j["bring_up_ms"].get<double>());
    fmt::print("controller pid {}, API {}, log {}\n", j["pid"].get<int>(), lab::socket_path(name).string(),
               lab::log_path(name).string());
    for (const auto& r : replays) fmt::print("{}\n", r);
    return 0;
  }
  try {
    controller.wait();
  } catch (const SystemError&) {
    // Reaped already: what it said (or did not) is what counts.
  }
  if (answer.starts_with("error "))
    fmt::print(stderr, "wanlab: lab {} could not be built (nothing of it is left): {}\n", name, answer.substr(6));
  else
    fmt::print(stderr, "wanlab: the controller of lab {} died during bring-up; see {}; run `wanlab down {}`\n", name,
               lab::log_path(name).string(), name);
  return 1;
}

}  // namespace

int cmd_up(const UpArgs& a) {
  const auto engine_sched = engine_sched_of(a);
  if (!engine_sched) return 2;
  core::Topology topo;
  try {
    topo = core::load_topology(a.file);
  } catch (const core::ConfigError& e) {
    fmt::print(stderr, "wanlab: {}\n", e.what());
    return 2;
  }
  const auto replays = check_link_traces(topo);
  if (!replays) return 2;
  if (!check_privileges(a.router_only ? "up --router-only" : "up", !a.router_only)) return 1;
  auto lock = lock_lab(topo);
  if (const int* rc = std::get_if<int>(&lock)) return *rc;
  remove_leftovers(topo.name);
  int rc = 0;
  const auto options = up_options(a, topo, *engine_sched, rc);
  if (!options) return rc;
  if (a.foreground) {
    spdlog::info("controller for lab {} running in the foreground (pid {})", topo.name, ::getpid());
    for (const auto& r : *replays) spdlog::info("{}", r);
    return daemon::run_controller(topo, *options, UniqueFd(), a.then);
  }
  return start_daemon(topo, *options, *replays);
}

int cmd_down(const std::optional<std::string>& lab_arg) {
  std::string name;
  if (lab_arg) {
    name = *lab_arg;
  } else {
    auto labs = lab::list_labs();
    if (labs.empty()) {
      fmt::print("no lab is up; nothing to remove\n");
      return 0;
    }
    if (labs.size() > 1) {
      fmt::print(stderr, "wanlab: several labs are up ({}); name one: wanlab down LAB\n", fmt::join(labs, ", "));
      return 2;
    }
    name = labs.front();
  }
  if (!valid_lab_name(name)) {
    fmt::print(stderr, "wanlab: '{}' is not a lab name\n", name);
    return 2;
  }
  const auto before = lab::read_state(name);
  const bool router_only = before && !before->router_ports.empty();
  if (!check_privileges("down", !router_only)) return 1;

  std::size_t removed = 0;
  int killed = 0;
  bool controller_answered = false;
  if (lab::controller_alive(name)) {
    try {
      auto r = api::call(lab::socket_path(name), "POST", "/v1/shutdown", "{}", 60s);
      if (r.status == 200) {
        controller_answered = true;
        removed += r.body.value("removed_namespaces", std::size_t{0});
        killed += r.body.value("killed_processes", 0);
      }
    } catch (const std::exception& e) {
      fmt::print(stderr, "wanlab: controller of lab {} did not answer ({}); killing it\n", name, e.what());
    }
    // The controller exits once it has answered; wait for its lock.
    for (int i = 0; i < 200 && lab::controller_alive(name); ++i) std::this_thread::sleep_for(25ms);
    if (lab::controller_alive(name)) {
      if (auto st = lab::read_state(name); st && st->controller_pid > 0) ::kill(st->controller_pid, SIGKILL);
      for (int i = 0; i < 200 && lab::controller_alive(name); ++i) std::this_thread::sleep_for(25ms);
    }
  }
  auto lock = lab::LabLock::try_acquire(name);
  if (!lock) {
    fmt::print(stderr, "wanlab: lab {} is still held by another process; try again\n", name);
    return 1;
  }
  const auto state = lab::read_state(name);
  if (state && !controller_answered) notice_orphaned_run(*state, "`wanlab down`");
  const auto r = lab::teardown(name, state ? state->namespaces : std::vector<std::string>{});
  removed += r.removed.size();
  killed += r.killed_processes;
  // A router-only lab whose controller is gone: its traffic control is still on the ports.
  if (state && !state->router_ports.empty() && state->backend == "kernel" && !controller_answered) {
    auto here = netlink::Socket::open();
    for (const auto& port : state->router_ports) {
      try {
        here.delete_root_qdisc(port);
      } catch (const std::exception& e) {
        fmt::print(stderr, "wanlab: lab {}: port {}: {}\n", name, port, e.what());
      }
    }
  }
  lab::remove_lab_dir(name);
  if (removed == 0 && !state && !controller_answered) {
    fmt::print("lab {} is not up; nothing to remove\n", name);
    return 0;
  }
  if (router_only)
    fmt::print("lab {} is down: its router ports are given back{}\n", name,
               controller_answered ? "" : " (its controller was gone; traffic control removed from its state)");
  else
    fmt::print("lab {} is down: removed {} namespaces{}{}\n", name, removed,
               killed ? fmt::format(", killed {} processes", killed) : "",
               controller_answered ? "" : " (its controller was gone; cleaned up from its state)");
  return 0;
}

}  // namespace wanlab::cli
