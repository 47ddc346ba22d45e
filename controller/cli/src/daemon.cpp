// The controller daemon's main loop (daemon.hpp).
#include "daemon.hpp"

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

namespace wanlab::cli {
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

}  // namespace

int run_controller(const core::Topology& topo, const api::UpOptions& options, UniqueFd report_to,
                   const std::optional<std::string>& then) {
  const auto& name = topo.name;
  // What the controller creates as root (run folders, agents' logs) is not for others to
  // write, whatever umask `up` was called with; the lab folder and sockets set their modes.
  ::umask(022);
  boost::asio::io_context ioc;
  boost::asio::signal_set signals(ioc, SIGINT, SIGTERM);
  boost::asio::signal_set child_exits(ioc, SIGCHLD);
  ChildProcess then_child;
  boost::asio::steady_timer flush_timer(ioc);  // state-file writes, off the request path
  std::unique_ptr<api::Server> server;
  std::unique_ptr<api::TcpServer> metrics_server;  // --metrics
  std::unique_ptr<api::TcpServer> api_server;      // --api
  std::unique_ptr<api::LabController> ctl;
  std::unique_ptr<run::RunManager> runs;
  std::unique_ptr<run::DaemonController> daemon;
  auto report = [&](const std::string& line) {
    if (report_to) {
      write_all(report_to.get(), line);
      report_to.reset();
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
      then_child = start_then(*then);
      spdlog::info("lab {} is up; running `{}` (pid {})", name, *then, then_child.pid());
    } catch (const std::exception& e) {
      spdlog::error("{}", e.what());
    }
  }
  std::function<void()> wait_child = [&] {
    child_exits.async_wait([&](const boost::system::error_code& ec, int) {
      if (ec) return;
      std::optional<ExitStatus> status;
      if (then_child.running()) {
        try {
          status = then_child.try_wait();
        } catch (const SystemError& e) {
          spdlog::warn("`{}`: {}", *then, e.what());
        }
      }
      if (status) {
        const auto level = status->success() ? spdlog::level::info : spdlog::level::warn;
        spdlog::log(level, "`{}` {}; lab {} stays up until this controller is stopped", *then, status->describe(), name);
      }
      wait_child();
    });
  };
  wait_child();
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    spdlog::info("signal {}: tearing lab {} down", sig, name);
    if (then_child.running()) then_child.signal_group(SIGTERM);
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
  if (then_child.running()) {
    then_child.signal_group(SIGTERM);
    try {
      then_child.wait();
    } catch (const SystemError&) {
      // Not ours to wait for any more: nothing to hold the teardown for.
    }
  }
  runs->close();
  const auto removed = ctl->teardown();
  lab::remove_lab_dir(name);
  spdlog::info("lab {} removed ({} namespaces)", name, removed.removed.size());
  return 0;
}

}  // namespace wanlab::cli
