// up and down: the life cycle of a lab and its controller daemon.
#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <optional>
#include <sstream>
#include <fmt/format.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>
#include <thread>

#include "commands.hpp"
#include "lab_lookup.hpp"
#include "wanlab/api/lab_controller.hpp"
#include "wanlab/run/run_manager.hpp"
#include "wanlab/api/server.hpp"
#include "wanlab/common/io_loop.hpp"
#include "wanlab/common/printable.hpp"
#include "wanlab/common/thread.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/lab/host_tcp.hpp"
#include "wanlab/lab/state.hpp"
#include "wanlab/lab/teardown.hpp"
#include "wanlab/netlink/netlink.hpp"
#include "wanlab/replay/trace.hpp"

namespace wanlab::cli {
namespace {

using namespace std::chrono_literals;

// The controller thread's nice value (see where it is set, before its event loop runs).
constexpr int kControlPlaneNice = -10;

bool has_cap(int cap) {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capget, &hdr, data) != 0) return false;
  return (data[cap / 32].effective & (1u << (cap % 32))) != 0;
}

void write_all(int fd, const std::string& s) {
  const char* p = s.data();
  std::size_t left = s.size();
  while (left > 0) {
    auto n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    left -= static_cast<std::size_t>(n);
  }
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

// Starts `command_line` (words split on blanks, no shell) in a process group of its own,
// with the controller's stdout and stderr; returns its pid.
pid_t start_then(const std::string& command_line) {
  std::vector<std::string> words;
  std::istringstream in(command_line);
  for (std::string w; in >> w;) words.push_back(w);
  if (words.empty()) throw std::runtime_error("--then: empty command");
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  // Built before fork: between fork and exec the child only calls async-signal-safe functions.
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(fmt::format("--then: fork: {}", std::strerror(errno)));
  if (pid == 0) {
    ::setpgid(0, 0);
    ::setpriority(PRIO_PROCESS, 0, 0);  // not the control plane's priority
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execvp(argv[0], argv.data());
    static const char msg[] = "wanlab: --then: exec failed\n";
    [[maybe_unused]] auto n = ::write(2, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  return pid;
}

// The controller: builds the lab, serves the API until a shutdown request or a signal,
// then tears the lab down. Reports "ready {json}" or "error <text>" on `ready_fd`.
int run_controller(const core::Topology& topo, const api::UpOptions& options, int ready_fd,
                   const std::optional<std::string>& then) {
  const auto& name = topo.name;
  // What the controller creates as root (run folders, agents' logs) is not for others to
  // write, whatever umask `up` was called with; the lab folder and sockets set their modes.
  ::umask(022);
  boost::asio::io_context ioc;
  boost::asio::signal_set signals(ioc, SIGINT, SIGTERM);
  boost::asio::signal_set child_exits(ioc, SIGCHLD);
  pid_t then_pid = -1;
  boost::asio::steady_timer flush_timer(ioc);  // state-file writes, off the request path
  std::unique_ptr<api::Server> server;
  std::unique_ptr<api::TcpServer> metrics_server;  // --metrics
  std::unique_ptr<api::TcpServer> api_server;      // --api
  std::unique_ptr<api::LabController> ctl;
  std::unique_ptr<run::RunManager> runs;
  std::unique_ptr<run::DaemonController> daemon;
  auto report = [&](const std::string& line) {
    if (ready_fd >= 0) {
      write_all(ready_fd, line);
      ::close(ready_fd);
      ready_fd = -1;
    }
  };
  try {
    ctl = std::make_unique<api::LabController>(topo, options, [&] {
      // Runs inside the shutdown request: once its answer is written nothing is left to
      // do and ioc.run() returns.
      server->close();
      if (metrics_server) metrics_server->close();
      if (api_server) api_server->close();
      signals.cancel();
      child_exits.cancel();
      flush_timer.cancel();
    });
    run::RunManagerOptions ro;
    ro.agent_socket = lab::lab_dir(name) / "agents.sock";
    ro.tcp_listen = options.agents_tcp;
    ro.token = options.token;
    ro.spawn_agents = options.spawn_agents;
    ro.backend = ctl->backend();
    runs = std::make_unique<run::RunManager>(ioc, *ctl, ro);
    daemon = std::make_unique<run::DaemonController>(*ctl, *runs);
    server = std::make_unique<api::Server>(ioc, lab::socket_path(name), *daemon);
    if (options.metrics_listen) {
      metrics_server = std::make_unique<api::TcpServer>(ioc, *options.metrics_listen, *daemon, options.token,
                                                        std::vector<std::string>{"/metrics"});
      spdlog::info("lab {}: metrics on http://{}/metrics", name, *options.metrics_listen);
    }
    if (options.api_listen) {
      api_server = api::TcpServer::control_api(ioc, *options.api_listen, *daemon, options.token);
      spdlog::info("lab {}: control API on http://{}/v1 (bearer token)", name, *options.api_listen);
    }
  } catch (const std::exception& e) {
    spdlog::error("lab {} could not be built: {}", name, e.what());
    if (ctl) ctl->teardown();
    lab::remove_lab_dir(name);
    report(fmt::format("error {}", e.what()));
    return 1;
  }
  const nlohmann::json ready = {{"pid", ::getpid()},
                                {"operations", ctl->operation_count()},
                                {"bring_up_ms", std::chrono::duration<double, std::milli>(ctl->bring_up_time()).count()}};
  spdlog::info("lab {} is up: {} kernel operations in {:.1f} ms", name, ctl->operation_count(),
               ready["bring_up_ms"].get<double>());
  report("ready " + ready.dump());
  std::function<void()> flush_later = [&] {
    flush_timer.expires_after(std::chrono::milliseconds(200));
    flush_timer.async_wait([&](const boost::system::error_code& ec) {
      if (ec) return;
      try {
        ctl->persist_if_dirty();
      } catch (const std::exception& e) {
        spdlog::warn("lab {}: state file not written: {}", name, e.what());
      }
      flush_later();
    });
  };
  flush_later();
  if (then) {
    try {
      then_pid = start_then(*then);
      spdlog::info("lab {} is up; running `{}` (pid {})", name, *then, then_pid);
    } catch (const std::exception& e) {
      spdlog::error("{}", e.what());
    }
  }
  std::function<void()> wait_child = [&] {
    child_exits.async_wait([&](const boost::system::error_code& ec, int) {
      if (ec) return;
      int status = 0;
      if (then_pid > 0 && ::waitpid(then_pid, &status, WNOHANG) == then_pid) {
        const auto how = WIFEXITED(status) ? fmt::format("exited with status {}", WEXITSTATUS(status))
                                           : fmt::format("was killed by signal {}", WTERMSIG(status));
        const auto level = WIFEXITED(status) && WEXITSTATUS(status) == 0 ? spdlog::level::info : spdlog::level::warn;
        spdlog::log(level, "`{}` {}; lab {} stays up until this controller is stopped", *then, how, name);
        then_pid = -1;
      }
      wait_child();
    });
  };
  wait_child();
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    spdlog::info("signal {}: tearing lab {} down", sig, name);
    if (then_pid > 0) ::kill(-then_pid, SIGTERM);
    runs->close();
    server->close();
    if (metrics_server) metrics_server->close();
    if (api_server) api_server->close();
    flush_timer.cancel();
    child_exits.cancel();
  });
  // This thread is the lab's control plane: the API, the runs' messages, the arbiter's
  // windows and grants, prefill dispatch. A cluster's control plane has CPUs of its own; in
  // the lab it shares them with every node's agent, so it goes ahead of them when they
  // contend. Its own load is small, and at nice 0 there its grants and window closes waited
  // for the CPU (bench/results/2026-11-26-bubbletea.md, "Priorities on the shared CPUs").
  // The engine thread sets its own (-20).
  if (const auto why = set_this_thread_nice(kControlPlaneNice); !why.empty())
    spdlog::warn("lab {}: cannot raise the controller's priority to nice {} ({}); on a busy machine its grants may "
                 "wait for the CPU",
                 name, kControlPlaneNice, why);
  // A request that breaks its handler is logged, and the lab goes on being served (and is
  // torn down at the end), rather than the daemon exiting with the lab left behind.
  run_surviving(ioc, [&](const std::string& what) {
    spdlog::error("lab {}: a handler failed: {}; still serving", name, printable(what, 400));
  });
  if (then_pid > 0) {
    ::kill(-then_pid, SIGTERM);
    ::waitpid(then_pid, nullptr, 0);
  }
  runs->close();
  const auto removed = ctl->teardown();
  lab::remove_lab_dir(name);
  spdlog::info("lab {} removed ({} namespaces)", name, removed.removed.size());
  return 0;
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

int cmd_up(const UpArgs& a) {
  const auto sched = parse_thread_sched(a.engine_sched);
  if (!sched) {
    fmt::print(stderr, "wanlab: --engine-sched: {}\n", sched.error);
    return 2;
  }
  ThreadSched engine_sched = sched.value;
  if (a.engine_cpu) {
    const long cpus = ::sysconf(_SC_NPROCESSORS_CONF);
    if (*a.engine_cpu < 0 || *a.engine_cpu >= cpus) {
      fmt::print(stderr, "wanlab: --engine-cpu: {} is not a CPU of this machine (0..{})\n", *a.engine_cpu, cpus - 1);
      return 2;
    }
    if (sched.value.policy == ThreadSched::Policy::deadline) {
      fmt::print(stderr, "wanlab: --engine-cpu: a SCHED_DEADLINE engine (--engine-sched {}) cannot be pinned to a CPU\n",
                 a.engine_sched);
      return 2;
    }
    engine_sched.cpu = a.engine_cpu;
  }
  core::Topology topo;
  try {
    topo = core::load_topology(a.file);
  } catch (const core::ConfigError& e) {
    fmt::print(stderr, "wanlab: {}\n", e.what());
    return 2;
  }
  // Traces named by links are checked before anything is built; the controller starts
  // their replays once the lab is up.
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
      return 2;
    }
  }
  if (!check_privileges(a.router_only ? "up --router-only" : "up", !a.router_only)) return 1;
  const auto& name = topo.name;

  auto lock = lab::LabLock::try_acquire(name);
  if (!lock) {
    // Held by a controller, or by another `up` still building the lab (its state is written
    // once the lab is up): wait a while for one or the other.
    std::optional<lab::LabState> state;
    for (auto waited = 0ms; waited < kWaitForOtherUp; waited += 100ms) {
      state = lab::read_state(name);
      if (state && state->controller_pid > 0) break;
      state.reset();
      if (auto got = lab::LabLock::try_acquire(name)) {  // the other `up` failed and let go: build it here
        lock.emplace(std::move(*got));
        break;
      }
      std::this_thread::sleep_for(100ms);
    }
    if (!lock) {
      if (!state) {
        fmt::print(stderr, "wanlab: lab {} is being brought up by another `wanlab up` (still not up after {} s); "
                           "nothing done\n",
                   name, std::chrono::duration_cast<std::chrono::seconds>(kWaitForOtherUp).count());
        return 1;
      }
      return already_up(*state, topo);
    }
  }
  remove_leftovers(name);

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
    return 2;
  }
  options.netem = netlink::netem_available();
  const auto backend = api::resolve_backend(a.backend, options.netem);
  if (backend == "kernel" && !options.netem)
    fmt::print("note: this kernel has no netem qdisc: WAN rates and queue limits are applied (HTB), but delay, "
               "jitter and loss are not; use --backend userspace (or auto) for them\n");
  if (a.backend == "auto" && backend == "userspace")
    fmt::print("note: this kernel has no netem qdisc: the WAN runs in the userspace engine\n");

  if (!a.router_only) {
    try {
      const auto cc = lab::choose_tcp_congestion(topo);
      options.tcp_congestion = cc.set;
      if (!cc.note.empty()) fmt::print("note: {}\n", cc.note);
    } catch (const std::exception& e) {
      fmt::print(stderr, "wanlab: lab {} not built: {}\n", name, e.what());
      return 1;
    }
  }

  if (a.foreground) {
    spdlog::info("controller for lab {} running in the foreground (pid {})", name, ::getpid());
    for (const auto& r : replays) spdlog::info("{}", r);
    return run_controller(topo, options, -1, a.then);
  }

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(fmt::format("pipe: {}", std::strerror(errno)));
  // Single-threaded here (netem_available joins its probe), so fork is safe.
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    ::close(fds[0]);
    ::setsid();
    int devnull = ::open("/dev/null", O_RDWR);
    int logfd = -1;
    try {
      lab::make_lab_dir(name);
      logfd = lab::open_lab_file(lab::log_path(name), O_WRONLY | O_APPEND, 0644);
    } catch (const std::exception& e) {
      fmt::print(stderr, "wanlab: {}\n", e.what());
    }
    ::dup2(devnull, 0);
    ::dup2(logfd >= 0 ? logfd : devnull, 1);
    ::dup2(logfd >= 0 ? logfd : devnull, 2);
    ::signal(SIGHUP, SIG_IGN);
    int rc = 1;
    try {
      rc = run_controller(topo, options, fds[1], std::nullopt);
    } catch (const std::exception& e) {
      spdlog::critical("controller failed: {}", e.what());
    }
    std::fflush(nullptr);
    ::_exit(rc);
  }
  ::close(fds[1]);
  const auto answer = read_all(fds[0]);
  ::close(fds[0]);
  if (answer.starts_with("ready ")) {
    const auto j = nlohmann::json::parse(answer.substr(6));
    std::size_t nodes = topo.node_count();
    fmt::print("lab {} is up: {} DCs, {} nodes, {} directed WAN links ({} backend); {} kernel operations in "
               "{:.0f} ms\n",
               name, topo.dcs.size(), nodes, topo.links.size(), backend, j["operations"].get<std::size_t>(),
               j["bring_up_ms"].get<double>());
    fmt::print("controller pid {}, API {}, log {}\n", j["pid"].get<int>(), lab::socket_path(name).string(),
               lab::log_path(name).string());
    for (const auto& r : replays) fmt::print("{}\n", r);
    return 0;
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (answer.starts_with("error "))
    fmt::print(stderr, "wanlab: lab {} could not be built (nothing of it is left): {}\n", name, answer.substr(6));
  else
    fmt::print(stderr, "wanlab: the controller of lab {} died during bring-up; see {}; run `wanlab down {}`\n", name,
               lab::log_path(name).string(), name);
  return 1;
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
