// The controller daemon's main loop (daemon.hpp).
#include "wanlab/daemon/daemon.hpp"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <chrono>
#include <functional>
#include <memory>
#include <sstream>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "wanlab/api/server.hpp"
#include "wanlab/common/child_process.hpp"
#include "wanlab/common/io_loop.hpp"
#include "wanlab/common/printable.hpp"
#include "wanlab/common/system_error.hpp"
#include "wanlab/common/thread.hpp"
#include "wanlab/lab/state.hpp"
#include "wanlab/run/run_manager.hpp"

namespace wanlab::daemon {
namespace {

// The controller thread's nice value (see where it is set, before its event loop runs).
constexpr int kControlPlaneNice = -10;

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

// Starts `command_line` (words split on blanks, no shell) in a process group of its own,
// with the controller's stdout and stderr. A failed exec is thrown with its errno.
ChildProcess start_then(const std::string& command_line) {
  SpawnOptions o;
  std::istringstream in(command_line);
  for (std::string w; in >> w;) o.argv.push_back(w);
  if (o.argv.empty()) throw std::runtime_error("--then: empty command");
  o.search_path = true;
  o.new_process_group = true;
  o.in_child = [] {
    ::setpriority(PRIO_PROCESS, 0, 0);  // not the control plane's priority
    return 0;
  };
  o.unblock_signals = true;
  try {
    return ChildProcess::spawn(o);
  } catch (const SystemError& e) {
    throw std::runtime_error(fmt::format("--then: {}", e.what()));
  }
}

// One lab's controller: its lab, its runs, the API's listeners, the state file's flush
// and the `--then` command, all served by one io_context on this thread.
class Daemon {
 public:
  Daemon(const core::Topology& topo, const api::UpOptions& options, UniqueFd report_to,
         const std::optional<std::string>& then)
      : topo_(topo), options_(options), report_to_(std::move(report_to)), then_(then) {}

  int run() {
    if (!build()) return 1;
    const nlohmann::json ready = {
        {"pid", ::getpid()},
        {"operations", ctl_->operation_count()},
        {"bring_up_ms", std::chrono::duration<double, std::milli>(ctl_->bring_up_time()).count()}};
    spdlog::info("lab {} is up: {} kernel operations in {:.1f} ms", name(), ctl_->operation_count(),
                 ready["bring_up_ms"].get<double>());
    report("ready " + ready.dump());
    flush_later();
    start_then_command();
    wait_child();
    stop_on_signals();
    serve();
    if (then_child_.running()) {
      then_child_.signal_group(SIGTERM);
      try {
        then_child_.wait();
      } catch (const SystemError&) {
        // Not ours to wait for any more: nothing to hold the teardown for.
      }
    }
    runs_->close();
    const auto removed = ctl_->teardown();
    lab::remove_lab_dir(name());
    spdlog::info("lab {} removed ({} namespaces)", name(), removed.removed.size());
    return 0;
  }

 private:
  const std::string& name() const { return topo_.name; }

  void report(const std::string& line) {
    if (report_to_) {
      write_all(report_to_.get(), line);
      report_to_.reset();
    }
  }

  // The lab, its run manager and the API's listeners; false (reported, lab removed) when
  // any of them cannot be made.
  bool build() {
    try {
      ctl_ = std::make_unique<api::LabController>(topo_, options_, [this] {
        // Runs inside the shutdown request: once its answer is written nothing is left to
        // do and ioc.run() returns.
        stop_serving();
        signals_.cancel();
      });
      run::RunManagerOptions ro;
      ro.agent_socket = lab::lab_dir(name()) / "agents.sock";
      ro.tcp_listen = options_.agents_tcp;
      ro.token = options_.token;
      ro.spawn_agents = options_.spawn_agents;
      ro.backend = ctl_->backend();
      runs_ = std::make_unique<run::RunManager>(ioc_, *ctl_, ro);
      daemon_ = std::make_unique<run::DaemonController>(*ctl_, *runs_);
      server_ = std::make_unique<api::Server>(ioc_, lab::socket_path(name()), *daemon_);
      if (options_.metrics_listen) {
        metrics_server_ = std::make_unique<api::TcpServer>(ioc_, *options_.metrics_listen, *daemon_, options_.token,
                                                           std::vector<std::string>{"/metrics"});
        spdlog::info("lab {}: metrics on http://{}/metrics", name(), *options_.metrics_listen);
      }
      if (options_.api_listen) {
        api_server_ = api::TcpServer::control_api(ioc_, *options_.api_listen, *daemon_, options_.token);
        spdlog::info("lab {}: control API on http://{}/v1 (bearer token)", name(), *options_.api_listen);
      }
      return true;
    } catch (const std::exception& e) {
      spdlog::error("lab {} could not be built: {}", name(), e.what());
      if (ctl_) ctl_->teardown();
      lab::remove_lab_dir(name());
      report(fmt::format("error {}", e.what()));
      return false;
    }
  }

  // Closes the listeners and cancels the timers: ioc.run() returns once what is in
  // progress is done.
  void stop_serving() {
    server_->close();
    if (metrics_server_) metrics_server_->close();
    if (api_server_) api_server_->close();
    flush_timer_.cancel();
    child_exits_.cancel();
  }

  // The state file's writes, every 200 ms when a `link set` changed the lab.
  void flush_later() {
    flush_timer_.expires_after(std::chrono::milliseconds(200));
    flush_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      try {
        ctl_->persist_if_dirty();
      } catch (const std::exception& e) {
        spdlog::warn("lab {}: state file not written: {}", name(), e.what());
      }
      flush_later();
    });
  }

  void start_then_command() {
    if (!then_) return;
    try {
      then_child_ = start_then(*then_);
      spdlog::info("lab {} is up; running `{}` (pid {})", name(), *then_, then_child_.pid());
    } catch (const std::exception& e) {
      spdlog::error("{}", e.what());
    }
  }

  // The `--then` command's exit is logged; the lab stays up.
  void wait_child() {
    child_exits_.async_wait([this](const boost::system::error_code& ec, int) {
      if (ec) return;
      std::optional<ExitStatus> status;
      if (then_child_.running()) {
        try {
          status = then_child_.try_wait();
        } catch (const SystemError& e) {
          spdlog::warn("`{}`: {}", *then_, e.what());
        }
      }
      if (status) {
        const auto level = status->success() ? spdlog::level::info : spdlog::level::warn;
        spdlog::log(level, "`{}` {}; lab {} stays up until this controller is stopped", *then_, status->describe(),
                    name());
      }
      wait_child();
    });
  }

  void stop_on_signals() {
    signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      spdlog::info("signal {}: tearing lab {} down", sig, name());
      if (then_child_.running()) then_child_.signal_group(SIGTERM);
      runs_->close();
      stop_serving();
    });
  }

  void serve() {
    // This thread is the lab's control plane: the API, the runs' messages, the arbiter's
    // windows and grants, prefill dispatch. A cluster's control plane has CPUs of its own;
    // in the lab it shares them with every node's agent, so it goes ahead of them when they
    // contend. Its own load is small, and at nice 0 there its grants and window closes
    // waited for the CPU (bench/results/2026-11-26-bubbletea.md, "Priorities on the shared
    // CPUs"). The engine thread sets its own (-20).
    if (const auto why = set_this_thread_nice(kControlPlaneNice); !why.empty())
      spdlog::warn("lab {}: cannot raise the controller's priority to nice {} ({}); on a busy machine its grants may "
                   "wait for the CPU",
                   name(), kControlPlaneNice, why);
    // A request that breaks its handler is logged, and the lab goes on being served (and is
    // torn down at the end), rather than the daemon exiting with the lab left behind.
    run_surviving(ioc_, [this](const std::string& what) {
      spdlog::error("lab {}: a handler failed: {}; still serving", name(), printable(what, 400));
    });
  }

  const core::Topology& topo_;
  const api::UpOptions& options_;
  UniqueFd report_to_;  // `up`'s pipe: one line, "ready {...}" or "error ..."
  const std::optional<std::string>& then_;
  boost::asio::io_context ioc_;
  boost::asio::signal_set signals_{ioc_, SIGINT, SIGTERM};
  boost::asio::signal_set child_exits_{ioc_, SIGCHLD};
  ChildProcess then_child_;
  boost::asio::steady_timer flush_timer_{ioc_};  // state-file writes, off the request path
  std::unique_ptr<api::Server> server_;
  std::unique_ptr<api::TcpServer> metrics_server_;  // --metrics
  std::unique_ptr<api::TcpServer> api_server_;      // --api
  std::unique_ptr<api::LabController> ctl_;
  std::unique_ptr<run::RunManager> runs_;
  std::unique_ptr<run::DaemonController> daemon_;
};

}  // namespace

int run_controller(const core::Topology& topo, const api::UpOptions& options, UniqueFd report_to,
                   const std::optional<std::string>& then) {
  // What the controller creates as root (run folders, agents' logs) is not for others to
  // write, whatever umask `up` was called with; the lab folder and sockets set their modes.
  ::umask(022);
  return Daemon(topo, options, std::move(report_to), then).run();
}

}  // namespace wanlab::daemon
