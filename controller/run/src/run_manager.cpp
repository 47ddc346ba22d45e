#include "wanlab/run/run_manager.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "wanlab/common/channel.hpp"
#include "wanlab/common/channel_address.hpp"
#include "wanlab/common/version.hpp"
#include "wanlab/common/channel_server.hpp"
#include "wanlab/common/child_process.hpp"
#include "wanlab/common/protocol.hpp"
#include "wanlab/common/text.hpp"
#include "wanlab/common/unique_fd.hpp"
#include "wanlab/core/diagnostics.hpp"
#include "wanlab/lab/host_tcp.hpp"
#include "wanlab/lab/naming.hpp"
#include "wanlab/netlink/node_entry.hpp"
#include "wanlab/run/coordinator.hpp"
#include "wanlab/run/results.hpp"
#include "wanlab/run/run_rails.hpp"
#include "wanlab/run/windows.hpp"
#include "wanlab/workload/metrics.hpp"
#include "wanlab/workload/plan.hpp"
#include "wanlab/workload/scenario.hpp"

namespace wanlab::run {
namespace fs = std::filesystem;
using api::ApiError;

namespace {

// Starts `binary args...` inside the named network namespace, output to `log`. Everything
// the child needs is prepared before fork(): between fork and exec it only makes system
// calls (this process has threads). A failed exec is thrown with its errno. The pid is
// handed on: the run's bookkeeping reaps it (or kills what is left over).
pid_t spawn_in_netns(const std::string& netns, const fs::path& binary, const std::vector<std::string>& args,
                     const fs::path& log) {
  // The node as `wanlab exec` and `wanlab launch` enter it: its host name and hosts file too.
  const netlink::NodeEntry entry(netns);
  const UniqueFd logfd(::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!logfd) throw std::runtime_error(fmt::format("open {}: {}", log.string(), std::strerror(errno)));
  const UniqueFd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  SpawnOptions o;
  o.argv = {binary.string()};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  const pid_t parent = ::getpid();
  o.in_child = [&entry, parent] {
    // The agent ends with this controller: SIGHUP when it dies (the run cannot go on
    // without it; docs/protocol.md), a signal nothing else sends it. Forked by the daemon's
    // only io thread, which lives as long as the daemon.
    if (::prctl(PR_SET_PDEATHSIG, SIGHUP) != 0 || ::getppid() != parent) return 125;
    const char* failed = "";
    if (entry.enter(&failed) != 0) return 126;
    // Not the control plane's priority (lab_commands.cpp): the agents are the workload.
    ::setpriority(PRIO_PROCESS, 0, 0);
    return 0;
  };
  o.stdout_fd = logfd.get();
  o.stderr_fd = logfd.get();
  o.stdin_fd = devnull.get();
  // The daemon's sockets (API, agents, netlink) stay with the daemon.
  o.close_other_fds = true;
  return ChildProcess::spawn(o).detach();
}

}  // namespace

fs::path find_agent_binary() {
  std::vector<fs::path> tried;
  if (const char* env = std::getenv("WANLAB_AGENT"); env && *env) {
    if (::access(env, X_OK) == 0) return env;
    tried.emplace_back(env);
  }
  std::error_code ec;
  const auto self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const auto& p : {self.parent_path() / "wanlab-agent", self.parent_path().parent_path() / "agents" / "wanlab-agent"}) {
      if (::access(p.c_str(), X_OK) == 0) return p;
      tried.push_back(p);
    }
  }
  std::vector<std::string> names;
  for (const auto& t : tried) names.push_back(t.string());
  throw std::runtime_error(fmt::format("wanlab-agent not found (looked at {}); set WANLAB_AGENT", fmt::join(names, ", ")));
}

// How long before its window the next transfer on a link hears its grant (the data plane
// holds what it sends at its gate until then): none. The arbiter's 5 ms handover lead
// already lets the next window in while the last one's bytes still go out, which covers the
// grant's way to the first byte. Granting earlier held packets at the closed gate: their
// RTT samples rose by the wait, CUBIC's HyStart left slow start on them at congestion
// windows below what a window carries per connection, and transfers then waited an RTT for
// ACKs mid-window (bench/results/2026-11-22-policies.md, "Grants when the window opens").
constexpr Nanos kGrantLookahead = 0;

struct RunManager::Impl : std::enable_shared_from_this<Impl> {
  Impl(boost::asio::io_context& io, api::RunLab& l, RunManagerOptions o)
      : ioc(io), lab(l), options(std::move(o)), timer(io), window_timer(io) {}

  struct Active {
    std::string id;
    api::RunRequest request;
    workload::Scenario scenario;
    std::unique_ptr<RunCoordinator> coordinator;
    fs::path out;
    std::map<std::string, pid_t> agents;  // node -> pid, agents this manager started
    std::vector<LinkSample> samples;
    std::map<std::pair<std::size_t, std::size_t>, shaping::LinkCounters> base;  // counters at start
    bool sampling = false;
    std::string started_at;
    // Exclusive policies: the windows, and whether the data plane enforces them too.
    std::unique_ptr<RunWindows> windows;
    bool gated = false;
    std::int64_t start_steady_ns = 0;  // the run's common start on the steady clock
    std::optional<HostCpu> cpu_at_start;  // the machine's CPU time then
    BackendCounters engine_at_start;      // the userspace engine's counters then
    std::int64_t engine_at_start_ns = 0;  // steady clock
    Clock::time_point noted{};            // the last note of progress in the lab's state file
    // Iterations every worker has finished, and when the last of them ended (steady ns):
    // the iteration time /metrics shows (-1: none finished yet).
    int iterations_seen = 0;
    std::int64_t iteration_end_ns = 0;
    double last_iteration_s = -1;
    // The run's circuit plans per DC with rails (run_rails.hpp), set on the lab's rail switch.
    std::map<std::size_t, shaping::RailPlan> rails;
    std::int64_t rails_at_ns = 0;  // steady clock, when they were set
    std::vector<shaping::RailSwitchStats> rails_at_start;  // the switch's counters then
  };

  boost::asio::io_context& ioc;
  api::RunLab& lab;
  RunManagerOptions options;
  boost::asio::steady_timer timer;
  boost::asio::steady_timer window_timer;
  std::unique_ptr<protocol::ChannelServer> server;
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<protocol::Channel>> agents;  // node -> channel
  std::map<std::string, nlohmann::json> hellos;                      // node -> its hello
  std::unique_ptr<Active> active;
  std::map<std::string, nlohmann::json> finished;  // id -> final status
  int next_id = 1;
  bool closed = false;

  void start_server() {
    protocol::ChannelServerOptions so;
    so.unix_path = options.agent_socket;
    if (options.tcp_listen) {
      const auto a = protocol::parse_address("tcp:" + *options.tcp_listen);
      so.tcp = boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address(a.host), a.port);
    }
    so.token = options.token;
    std::weak_ptr<Impl> weak = shared_from_this();
    server = std::make_unique<protocol::ChannelServer>(
        ioc, so, [weak](std::shared_ptr<protocol::Channel> ch, const nlohmann::json& hello) {
          if (auto self = weak.lock()) self->on_hello(std::move(ch), hello);
        });
    schedule_tick();
  }

  void schedule_tick() {
    timer.expires_after(std::chrono::milliseconds(100));
    std::weak_ptr<Impl> weak = shared_from_this();
    timer.async_wait([weak](const boost::system::error_code& ec) {
      if (ec) return;
      if (auto self = weak.lock()) {
        self->tick();
        self->schedule_tick();
      }
    });
  }

  void send_all(const std::vector<Outgoing>& out) {
    for (const auto& o : out)
      if (auto it = agents.find(o.node); it != agents.end()) it->second->send(o.message);
  }

  void on_hello(std::shared_ptr<protocol::Channel> ch, const nlohmann::json& hello) {
    std::lock_guard lock(mutex);
    const auto node = hello.value("node", std::string{});
    const auto& topo = lab.topology();
    bool known = false;
    for (const auto& dc : topo.dcs)
      for (int i = 0; i < dc.nodes; ++i) known |= core::node_name(dc, i) == node;
    if (!known) {
      ch->send(protocol::error_message({"unknown_node", fmt::format("lab {} has no node '{}'", topo.name, node), "node"}));
      ch->close();
      return;
    }
    const int pid = hello.value("pid", 0);
    if (pid > 0 && std::find(leftover.begin(), leftover.end(), pid) != leftover.end()) {
      // An agent started for a run that ended before it connected (that run failed as its
      // first agents joined): `bye` ends an agent started for one run; kept out of `agents`,
      // it is not taken for the next run's, which starts its own.
      std::weak_ptr<Impl> weak = shared_from_this();
      std::weak_ptr<protocol::Channel> wch = ch;
      leaving.push_back(ch);
      ch->start([](const nlohmann::json&) {},
                [weak, node, wch](const std::string& reason) {
                  if (auto self = weak.lock()) self->on_close(node, wch, reason);
                });
      ch->send(protocol::message("bye"));
      spdlog::info("agent of node {} (pid {}) connected after its run ended; told to exit", node, pid);
      return;
    }
    if (auto old = agents.find(node); old != agents.end()) old->second->close("replaced by a newer connection of the same node");
    agents[node] = ch;
    hellos[node] = hello;
    std::weak_ptr<Impl> weak = shared_from_this();
    std::weak_ptr<protocol::Channel> wch = ch;
    ch->start(
        [weak, node, wch](const nlohmann::json& m) {
          if (auto self = weak.lock()) self->on_message(node, wch, m);
        },
        [weak, node, wch](const std::string& reason) {
          if (auto self = weak.lock()) self->on_close(node, wch, reason);
        });
    ch->send(protocol::message("welcome", {{"controller_version", std::string(version())}}));
    spdlog::info("agent of node {} connected (pid {})", node, hello.value("pid", 0));
    if (active) send_all(active->coordinator->agent_joined(node, hello, Clock::now()));
  }

  void on_message(const std::string& node, const std::weak_ptr<protocol::Channel>& wch, const nlohmann::json& m) {
    std::lock_guard lock(mutex);
    auto it = agents.find(node);
    if (it == agents.end() || it->second != wch.lock()) return;  // a replaced connection
    if (m.value("type", std::string{}) == "failed")
      spdlog::warn("node {} reports: {}", node, m.value("message", std::string{}));
    const auto type = m.value("type", std::string{});
    if (active && active->windows && (type == "want" || type == "delivered")) {
      if (active->coordinator->phase() != Phase::running) return;
      WindowActions out;
      const auto now = steady_ns();
      const auto problem = type == "want" ? active->windows->want(m, now, out) : active->windows->delivered(m, now, out);
      if (problem) spdlog::warn("node {}: {}", node, *problem);
      carry_out(out);
      return;
    }
    if (active) send_all(active->coordinator->message(node, m, Clock::now()));
    if (active) note_iterations(*active);
    after_event();
  }

  void note_iterations(Active& a) {
    if (a.coordinator->phase() != Phase::running && a.coordinator->phase() != Phase::done) return;
    const int done = a.coordinator->iterations_done();
    if (done <= a.iterations_seen) return;
    const auto now = steady_ns();
    const auto since = a.iteration_end_ns > 0 ? a.iteration_end_ns : a.start_steady_ns;
    if (since > 0) a.last_iteration_s = static_cast<double>(now - since) / 1e9 / (done - a.iterations_seen);
    a.iterations_seen = done;
    a.iteration_end_ns = now;
  }

  static std::int64_t steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  }

  void carry_out(const WindowActions& out) {
    auto& a = *active;
    // Grants first: the agents need a moment to start sending, and each gate switch waits
    // for the data plane to apply it; the gates are open before the first bytes get there.
    send_all(out.messages);
    if (a.gated) {
      for (const auto& g : out.gates) {
        try {
          lab.set_gate(g.link.src, g.link.dst, g.flow, g.open);
        } catch (const std::exception& e) {
          spdlog::warn("run {}: gate {} of link {}->{}: {}", a.id, g.flow, g.link.src, g.link.dst, e.what());
        }
      }
    }
  }

  // Every few ms while windows are in use: the flows' bytes on the wire, window ends.
  void schedule_window_tick() {
    window_timer.expires_after(std::chrono::milliseconds(5));
    std::weak_ptr<Impl> weak = shared_from_this();
    window_timer.async_wait([weak](const boost::system::error_code& ec) {
      if (ec) return;
      auto self = weak.lock();
      if (!self) return;
      std::lock_guard lock(self->mutex);
      if (!self->active || !self->active->windows) return;
      self->window_tick(*self->active);
      self->schedule_window_tick();
    });
  }

  void window_tick(Active& a) {
    if (a.coordinator->phase() != Phase::running) return;
    const auto now = steady_ns();
    if (a.gated) {
      for (const auto& [link, flows] : a.windows->flows()) {
        try {
          a.windows->flow_bytes(link, lab.flow_counters(link.src, link.dst), now);
        } catch (const std::exception& e) {
          spdlog::warn("run {}: flow counters of link {}->{}: {}", a.id, link.src, link.dst, e.what());
        }
      }
    }
    WindowActions out;
    a.windows->tick(now, out);
    carry_out(out);
  }

  // Ends gating on every link the run declared flows on.
  void clear_gates(Active& a) {
    if (!a.windows || !a.gated) return;
    for (const auto& [link, flows] : a.windows->flows()) {
      try {
        lab.set_flows(link.src, link.dst, {});
      } catch (const std::exception& e) {
        spdlog::warn("run {}: ending gating on link {}->{}: {}", a.id, link.src, link.dst, e.what());
      }
    }
  }

  void on_close(const std::string& node, const std::weak_ptr<protocol::Channel>& wch, const std::string& reason) {
    std::lock_guard lock(mutex);
    if (std::erase(leaving, wch.lock()) > 0) spdlog::info("agent of node {} (of the last run) disconnected: {}", node, reason);
    auto it = agents.find(node);
    if (it == agents.end() || it->second != wch.lock()) return;
    agents.erase(it);
    spdlog::info("agent of node {} disconnected: {}", node, reason);
    if (active) send_all(active->coordinator->agent_left(node, reason, Clock::now()));
    after_event();
  }

  void sample(Active& a, bool force = false) {
    const auto start = a.coordinator->start_unix_ns();
    if (!start) return;
    const auto now_unix =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    const double t = static_cast<double>(now_unix - *start) / 1e9;
    if (!force && t < 0) return;
    for (const auto& [src, dst, c] : lab.link_counters()) {
      const auto& b = a.base[{src, dst}];
      a.samples.push_back({std::max(0.0, t), src, dst, c.bytes - b.bytes, c.payload_bytes - b.payload_bytes,
                           c.drops - b.drops, c.queued_packets});
    }
  }

  // Phase changes that need the manager: counters at the start, results at the end.
  void after_event() {
    if (!active) return;
    auto& a = *active;
    const auto phase = a.coordinator->phase();
    if (phase == Phase::running && !a.sampling) {
      a.sampling = true;
      for (const auto& [src, dst, c] : lab.link_counters()) a.base[{src, dst}] = c;
      if (const auto start = a.coordinator->start_unix_ns()) {
        const auto now_unix = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
        a.start_steady_ns = steady_ns() + (*start - now_unix);
        a.cpu_at_start = read_host_cpu();
        a.engine_at_start = lab.backend_counters();
        a.engine_at_start_ns = steady_ns();
      }
      if (a.windows) {
        // Gates close now that the data connections are up (their handshakes passed) and
        // before the common start.
        if (a.gated) {
          try {
            for (const auto& [link, flows] : a.windows->flows()) lab.set_flows(link.src, link.dst, flows);
          } catch (const std::exception& e) {
            send_all(a.coordinator->abort(fmt::format("cannot gate the WAN flows: {}", e.what())));
          }
        }
        schedule_window_tick();
      }
    }
    if (phase == Phase::done || phase == Phase::failed) finish();
  }

  void tick() {
    std::lock_guard lock(mutex);
    reap(false);
    if (!active) return;
    send_all(active->coordinator->tick(Clock::now()));
    if (active && active->sampling && active->coordinator->phase() == Phase::running) sample(*active);
    if (active) note_iterations(*active);
    // The run's progress and this controller's sign of life, in the lab's state file about
    // every second: whoever finds this controller dead says when and where the run stopped.
    if (active && Clock::now() - active->noted >= std::chrono::seconds(1)) {
      active->noted = Clock::now();
      lab.note_run_progress(active->coordinator->iterations_done(), to_string(active->coordinator->phase()));
    }
    // A spawned agent that exits before the end of its run is a failure, with its log.
    for (const auto& [node, pid] : active->agents) {
      int st = 0;
      if (pid > 0 && ::waitpid(pid, &st, WNOHANG) == pid) {
        active->agents[node] = -1;
        const auto phase = active->coordinator->phase();
        if (phase != Phase::done && phase != Phase::failed)
          send_all(active->coordinator->abort(fmt::format(
              "the agent of node {} exited ({}); see {}", node,
              WIFEXITED(st) ? fmt::format("status {}", WEXITSTATUS(st)) : fmt::format("signal {}", WTERMSIG(st)),
              (active->out / "agents" / (node + ".log")).string())));
      }
    }
    after_event();
  }

  std::vector<pid_t> leftover;  // agents of finished runs not yet reaped
  // Their control connections, out of `agents` (no run may use an agent that is leaving),
  // kept open until they close (closing them would have the agent reconnect).
  std::vector<std::shared_ptr<protocol::Channel>> leaving;
  void reap(bool all) {
    std::vector<pid_t> keep;
    for (pid_t p : leftover) {
      if (p <= 0) continue;
      int st = 0;
      if (::waitpid(p, &st, all ? 0 : WNOHANG) != p) keep.push_back(p);
    }
    leftover.swap(keep);
  }
  // Before a run spawns its agents: the last run's are gone, so none still holds a port the
  // new ones bind (they exit within milliseconds of `bye`; after `limit`, killed).
  void await_leftover(std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    for (reap(false); !leftover.empty() && Clock::now() < deadline; reap(false))
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (leftover.empty()) return;
    for (pid_t p : leftover) ::kill(p, SIGKILL);
    reap(true);
  }

  void finish() {
    auto a = std::move(active);
    auto& co = *a->coordinator;
    try {
      lab.record_run(std::nullopt);
    } catch (const std::exception& e) {
      spdlog::warn("run {}: the lab's state file still names it: {}", a->id, e.what());
    }
    nlohmann::json st = status_json(*a);
    if (co.phase() == Phase::done) {
      try {
        sample(*a, true);
        RunMeta meta;
        meta.run_id = a->id;
        meta.lab = lab.topology().name;
        meta.backend = options.backend;
        meta.started_at = a->started_at;
        meta.scale = a->scenario.scale;
        meta.scenario_file = a->request.scenario;
        for (const auto& l : lab.topology().links)
          meta.rate_bps.push_back(static_cast<std::uint64_t>(static_cast<double>(l.params.rate.bps) * a->scenario.scale));
        auto summary = make_summary(co.plan(), lab.topology(), co.reports(), a->samples, meta);
        summary["tcp"] = tcp_summary(co.plan(), co.tcp());
        if (!a->rails.empty())
          summary["rails"] = rails_json(lab.topology(), a->rails_at_start, lab.rail_stats(), a->scenario.iterations,
                                        static_cast<double>(steady_ns() - a->rails_at_ns) / 1e9);
        if (const auto now = read_host_cpu(); now && a->cpu_at_start)
          summary["host_cpu"] = host_cpu_json(*a->cpu_at_start, *now);
        if (!a->engine_at_start.empty())
          if (auto e = engine_json(a->engine_at_start, lab.backend_counters(),
                                   static_cast<double>(steady_ns() - a->engine_at_start_ns) / 1e9);
              !e.is_null()) {
            if (auto how = lab.backend_scheduling(); !how.empty()) e["scheduling"] = std::move(how);
            summary["engine"] = std::move(e);
          }
        if (const auto* pf = co.prefill()) {
          const auto& w = summary.at("window_s");
          summary["prefill"] = pf->summary(static_cast<std::int64_t>(w.at("start").get<double>() * 1e9),
                                           static_cast<std::int64_t>(w.at("end").get<double>() * 1e9));
          // Needs the same run without the load: `wanlab bench` runs both and fills it in.
          summary["training_slowdown"] = nullptr;
        }
        if (a->windows) {
          summary["windows"] = a->windows->accuracy();
          summary["windows"]["enforced_by"] = a->gated ? "agents and data plane" : "agents";
          std::ofstream(a->out / "windows.csv") << a->windows->windows_csv(a->start_steady_ns);
        }
        write_run_folder(a->out, summary, workload::chrome_trace(co.plan(), co.reports()),
                         links_csv(lab.topology(), a->samples), workload::to_json(a->scenario));
        // The lab's topology beside the scenario, so that the folder draws its plots where the
        // scenario's topology path does not exist (a container's run read on the host); trace
        // paths left out, being the controller's.
        auto topo_doc = core::to_json(lab.topology());
        for (auto& l : topo_doc["wan"]) l.erase("trace");
        std::ofstream(a->out / "topology.json") << topo_doc.dump(2) << "\n";
        st["summary"] = summary;
        spdlog::info("run {} done: iteration time {:.3f} s, GPU utilization {:.1f} %, results in {}", a->id,
                     summary.at("iteration_time_s").value("mean", 0.0),
                     100 * summary.at("gpu_utilization").value("mean", 0.0), a->out.string());
      } catch (const std::exception& e) {
        st["phase"] = "failed";
        st["error"] = fmt::format("the run finished but its results could not be written: {}", e.what());
        spdlog::error("run {}: {}", a->id, st["error"].get<std::string>());
      }
    } else {
      spdlog::error("run {} failed: {}", a->id, co.error());
      std::error_code ec;
      std::ofstream(a->out / "error.txt") << co.error() << "\n";
    }
    clear_gates(*a);
    window_timer.cancel();
    try {
      lab.set_rate_scale(1.0);
      if (!a->rails.empty()) {
        for (const auto& [dc, rp] : a->rails) lab.set_rail_plan(dc, shaping::RailPlan{});
        lab.set_rail_scale(1.0);
      }
    } catch (const std::exception& e) {
      spdlog::warn("run {}: link rates not restored: {}", a->id, e.what());
    }
    // Agents we started exit after `bye` (or `abort`); any still there in 3 s is killed.
    // The next run starts its own, even if it comes before these have gone.
    for (const auto& [node, pid] : a->agents) {
      if (pid > 0) leftover.push_back(pid);
      if (const auto it = agents.find(node); it != agents.end()) {
        leaving.push_back(it->second);
        agents.erase(it);
      }
    }
    const auto pids = leftover;
    auto t = std::make_shared<boost::asio::steady_timer>(ioc, std::chrono::seconds(3));
    t->async_wait([t, pids, self = shared_from_this()](const boost::system::error_code&) {
      std::lock_guard lock(self->mutex);
      for (pid_t p : pids)  // only those not reaped since (a reaped pid may be reused)
        if (p > 0 && std::find(self->leftover.begin(), self->leftover.end(), p) != self->leftover.end())
          ::kill(p, SIGKILL);
      self->reap(false);
    });
    finished[a->id] = st;
  }

  nlohmann::json status_json(const Active& a) const {
    const auto& co = *a.coordinator;
    nlohmann::json j = {{"run", a.id},
                        {"scenario", a.scenario.name},
                        {"scenario_file", a.request.scenario},
                        {"out", a.out.string()},
                        {"phase", to_string(co.phase())},
                        {"iterations", a.scenario.iterations},
                        {"iterations_done", co.iterations_done()},
                        {"workers", co.plan().workers.size()},
                        {"nodes", co.nodes().size()},
                        {"started_at", a.started_at}};
    if (!co.error().empty()) j["error"] = co.error();
    return j;
  }

  nlohmann::json start(const api::RunRequest& r) {
    std::lock_guard lock(mutex);
    if (closed) throw ApiError(409, "closing", "the controller is shutting down");
    if (active)
      throw ApiError(409, "busy", fmt::format("run {} is in progress on lab {}; one run at a time (abort it with "
                                              "DELETE /v1/runs/{})",
                                              active->id, lab.topology().name, active->id));
    workload::Scenario scenario;
    workload::Plan plan;
    std::map<std::size_t, shaping::RailPlan> rails;
    try {
      scenario = workload::load_scenario(r.scenario);
      if (r.connections) scenario.connections = *r.connections;
      if (r.policy) scenario.policy = *r.policy;
      const auto& known = workload::known_policies();
      if (std::find(known.begin(), known.end(), scenario.policy) == known.end())
        throw ApiError(400, "bad_request",
                       fmt::format("policy: '{}' is not one of {}", scenario.policy, fmt::join(known, ", ")), "policy");
      const auto scen_topo = core::load_topology(scenario.topology_path);
      const auto& topo = lab.topology();
      if (!core::same_dcs(scen_topo, topo))
        throw ApiError(409, "wrong_lab",
                       fmt::format("scenario {} is for topology {} ({}), but lab {} has other DCs or nodes",
                                   scenario.name, scenario.topology_path.string(), scen_topo.name, topo.name),
                       "scenario");
      plan = workload::build_plan(scenario, topo);
      rails = rail_plans(plan);
      if (!rails.empty() && !lab.has_rails())
        throw ApiError(409, "no_rails", fmt::format("scenario {} runs on rails, but lab {} switches none (its backend "
                                                    "is not the userspace engine)",
                                                    scenario.name, topo.name),
                       "scenario");
    } catch (const core::ConfigError& e) {
      throw ApiError(400, "bad_scenario", e.what(), "scenario");
    } catch (const std::invalid_argument& e) {
      throw ApiError(400, "bad_scenario", e.what(), "scenario");
    }
    auto a = std::make_unique<Active>();
    a->id = fmt::format("{}-{}", scenario.name, next_id++);
    a->request = r;
    a->scenario = scenario;
    a->out = r.out;
    a->started_at = utc_timestamp();
    std::error_code ec;
    fs::create_directories(a->out / "agents", ec);
    if (ec) throw ApiError(400, "bad_request", fmt::format("out: cannot create {}: {}", r.out, ec.message()), "out");
    auto policy = arbiter::make_policy(scenario.policy);
    CoordinatorOptions co;
    co.windows = policy->exclusive();
    co.port_salt = (next_id * 17) % 64;
    lab.set_rate_scale(scenario.scale);
    if (!rails.empty()) {
      lab.set_rail_scale(scenario.scale);
      for (const auto& [dc, rp] : rails) lab.set_rail_plan(dc, rp);
      a->rails = std::move(rails);
      a->rails_at_ns = steady_ns();
      a->rails_at_start = lab.rail_stats();
    }
    // The agents make the scenario's congestion control their nodes' default for the run;
    // a namespace may only pick one the host allows.
    if (const auto why = lab::allow_tcp_congestion(scenario.tcp_congestion); !why.empty())
      spdlog::warn("run {}: tcp_congestion {}: {}", a->id, scenario.tcp_congestion, why);
    a->coordinator = std::make_unique<RunCoordinator>(a->id, std::move(plan), lab.topology(), co, Clock::now());
    active = std::move(a);
    auto& act = *active;
    try {
      // In the lab's state file before any agent exists: if this controller dies during the
      // run, the next up, down or status of the lab ends it with an error.txt.
      lab::RunRecord rec;
      rec.id = act.id;
      rec.scenario = act.scenario.name;
      rec.out = fs::absolute(act.out).lexically_normal().string();
      rec.started_at = act.started_at;
      rec.iterations = act.scenario.iterations;
      rec.phase = to_string(act.coordinator->phase());
      lab.record_run(std::move(rec));
      act.noted = Clock::now();
      if (co.windows) {
        std::vector<double> rates;
        for (const auto& l : lab.topology().links) rates.push_back(static_cast<double>(l.params.rate.bps) * scenario.scale);
        act.gated = lab.gates_flows();
        arbiter::ArbiterOptions ao;
        ao.tcp_window_bytes = workload::run_tcp_window(scenario);
        // Without the data plane's counters there is no progress to judge a window by: it
        // ends when its transfer is delivered, never by timeout.
        if (!act.gated) ao.idle_timeout = std::numeric_limits<Nanos>::max() / 2;
        act.windows =
            std::make_unique<RunWindows>(act.id, act.coordinator->plan(), rates, std::move(policy), ao,
                                         act.gated ? kGrantLookahead : 0);
        if (!act.gated)
          spdlog::warn("run {}: the {} backend does not gate flows; windows are kept by the agents alone", act.id,
                       options.backend);
      }
      if (options.spawn_agents) {
        const auto binary = options.agent_binary.empty() ? find_agent_binary() : options.agent_binary;
        await_leftover(std::chrono::seconds(3));
        for (const auto& node : act.coordinator->nodes()) {
          if (agents.count(node)) continue;  // already connected (e.g. left over): reuse it
          act.agents[node] = spawn_in_netns(lab::ns_node(lab.topology().name, node), binary,
                                            {"--controller", "unix:" + options.agent_socket.string(), "--node", node,
                                             "--once"},
                                            act.out / "agents" / (node + ".log"));
        }
      }
    } catch (const std::exception& e) {
      send_all(act.coordinator->abort(fmt::format("cannot start the run: {}", e.what())));
      finish();
      throw ApiError(500, "agents", fmt::format("cannot start the run: {}", e.what()));
    }
    for (const auto& [node, ch] : agents)
      send_all(act.coordinator->agent_joined(node, hellos[node], Clock::now()));
    spdlog::info("run {}: scenario {} ({} workers on {} nodes), results to {}", act.id, act.scenario.name,
                 act.coordinator->plan().workers.size(), act.coordinator->nodes().size(), act.out.string());
    return status_json(act);
  }
};

RunManager::RunManager(boost::asio::io_context& ioc, api::RunLab& lab, RunManagerOptions options)
    : impl_(std::make_shared<Impl>(ioc, lab, std::move(options))) {
  impl_->start_server();
}

RunManager::~RunManager() { close(); }

nlohmann::json RunManager::start(const api::RunRequest& request) { return impl_->start(request); }

nlohmann::json RunManager::status(const std::string& id) {
  std::lock_guard lock(impl_->mutex);
  if (impl_->active && impl_->active->id == id) return impl_->status_json(*impl_->active);
  if (auto it = impl_->finished.find(id); it != impl_->finished.end()) return it->second;
  throw ApiError(404, "no_run", fmt::format("no run '{}'", id));
}

nlohmann::json RunManager::list() {
  std::lock_guard lock(impl_->mutex);
  nlohmann::json l = nlohmann::json::array();
  for (const auto& [id, st] : impl_->finished) {
    auto s = st;
    s.erase("summary");
    l.push_back(s);
  }
  if (impl_->active) l.push_back(impl_->status_json(*impl_->active));
  return {{"runs", l}};
}

nlohmann::json RunManager::abort(const std::string& id) {
  std::lock_guard lock(impl_->mutex);
  if (!impl_->active || impl_->active->id != id) {
    if (impl_->finished.count(id))
      throw ApiError(409, "finished", fmt::format("run {} has already finished", id));
    throw ApiError(404, "no_run", fmt::format("no run '{}'", id));
  }
  impl_->send_all(impl_->active->coordinator->abort("aborted by request"));
  impl_->finish();
  return impl_->finished.at(id);
}

void RunManager::close() {
  if (!impl_) return;
  std::lock_guard lock(impl_->mutex);
  if (impl_->closed) return;
  impl_->closed = true;
  if (impl_->active) {
    impl_->send_all(impl_->active->coordinator->abort("the controller is shutting down"));
    impl_->finish();
  }
  impl_->timer.cancel();
  for (auto& [node, ch] : impl_->agents) ch->close();
  impl_->agents.clear();
  impl_->server.reset();
  for (pid_t p : impl_->leftover)
    if (p > 0) ::kill(p, SIGKILL);
  impl_->reap(true);
}

void RunManager::write_metrics(api::MetricsText& out) {
  std::lock_guard lock(impl_->mutex);
  struct Row {
    std::string id, scenario, phase;
    double iterations = 0, done = 0;
  };
  std::vector<Row> rows;
  for (const auto& [id, st] : impl_->finished)
    rows.push_back({id, st.value("scenario", ""), st.value("phase", ""), st.value("iterations", 0.0),
                    st.value("iterations_done", 0.0)});
  const auto* a = impl_->active.get();
  if (a)
    rows.push_back({a->id, a->scenario.name, to_string(a->coordinator->phase()),
                    static_cast<double>(a->scenario.iterations), static_cast<double>(a->coordinator->iterations_done())});
  out.family("wanlab_run_info", "gauge", "1 per run this controller has run, labelled with its scenario and phase "
                                         "(agents, preparing, connecting, running, done, failed).");
  for (const auto& r : rows) out.sample({{"run", r.id}, {"scenario", r.scenario}, {"phase", r.phase}}, 1);
  out.family("wanlab_run_active", "gauge", "1 while a run is in progress on the lab, else 0.");
  out.sample({}, a ? 1 : 0);
  out.family("wanlab_run_iterations", "gauge", "Training iterations the run's scenario asks for.");
  for (const auto& r : rows) out.sample({{"run", r.id}}, r.iterations);
  out.family("wanlab_run_iterations_done", "gauge", "Iterations every worker of the run has finished.");
  for (const auto& r : rows) out.sample({{"run", r.id}}, r.done);
  if (!a) return;
  const auto& co = *a->coordinator;
  out.family("wanlab_run_iteration_seconds", "gauge",
             "Time of the run's last finished iteration (every worker), as the controller heard of it.");
  if (a->last_iteration_s >= 0) out.sample({{"run", a->id}}, a->last_iteration_s);
  out.family("wanlab_run_worker_iteration", "gauge",
             "Per worker (GPU) of the running run: the last iteration it finished (-1: none yet).");
  const auto& plan = co.plan();
  for (std::size_t w = 0; w < co.progress().size(); ++w) {
    api::MetricLabels l{{"run", a->id}, {"worker", std::to_string(w)}};
    if (w < plan.workers.size()) {
      l.emplace_back("dc", impl_->lab.topology().dcs[plan.workers[w].dc].name);
      l.emplace_back("stage", std::to_string(plan.workers[w].stage));
    }
    out.sample(l, co.progress()[w]);
  }
  if (!a->windows) return;
  const auto stats = a->windows->link_stats(Impl::steady_ns());
  const auto& dcs = impl_->lab.topology().dcs;
  auto each = [&](const char* name, const char* type, const char* help, auto value) {
    out.family(name, type, help);
    for (const auto& st : stats)
      out.sample({{"src", dcs[st.link.src].name}, {"dst", dcs[st.link.dst].name}}, static_cast<double>(value(st)));
  };
  using S = RunWindows::LinkWindowStats;
  each("wanlab_arbiter_windows_granted_total", "counter", "Windows the arbiter has granted on the link in this run.",
       [](const S& s) { return s.granted; });
  each("wanlab_arbiter_windows_revoked_total", "counter", "Windows taken back for lack of progress.",
       [](const S& s) { return s.revoked; });
  each("wanlab_arbiter_windows_open", "gauge", "Windows open on the link now.", [](const S& s) { return s.open; });
  each("wanlab_arbiter_queued_bytes", "gauge",
       "Bytes that entered the link under windows and that it has not sent yet (the arbiter's fluid queue).",
       [](const S& s) { return s.queued_bytes; });
}

nlohmann::json RunManager::windows(double horizon_s) {
  std::lock_guard lock(impl_->mutex);
  const auto* a = impl_->active.get();
  if (!a || !a->windows || a->start_steady_ns == 0) return {{"run", a ? nlohmann::json(a->id) : nlohmann::json(nullptr)}, {"now_s", nullptr}, {"windows", nlohmann::json::array()}};
  const auto now = Impl::steady_ns();
  return {{"run", a->id},
          {"now_s", static_cast<double>(now - a->start_steady_ns) / 1e9},
          {"windows", a->windows->recent_windows(a->start_steady_ns, now - static_cast<std::int64_t>(horizon_s * 1e9), now)}};
}

std::string DaemonController::metrics() {
  const auto t0 = Clock::now();
  api::MetricsText out;
  lab_.write_metrics(out);
  runs_.write_metrics(out);
  out.family("wanlab_metrics_render_seconds", "gauge",
             "How long the controller took to write the previous answer to GET /metrics (-1: none yet).");
  out.sample({}, last_render_s_);
  last_render_s_ = std::chrono::duration<double>(Clock::now() - t0).count();
  return out.take();
}

nlohmann::json DaemonController::status() {
  auto s = lab_.status();
  s["runs"] = runs_.list()["runs"];
  return s;
}

}  // namespace wanlab::run
