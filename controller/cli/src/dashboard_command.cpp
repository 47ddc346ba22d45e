// dashboard: the live page of a lab (dashboard/dashboard.hpp, docs/metrics.md).
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "commands.hpp"
#include "lab_lookup.hpp"
#include "wanlab/dashboard/dashboard.hpp"
#include "wanlab/lab/state.hpp"

namespace wanlab::cli {

int cmd_dashboard(const DashboardArgs& a) {
  std::string lab_name;
  try {
    lab_name = find_lab(a.lab).topology.name;
  } catch (const std::exception& e) {
    fmt::print(stderr, "wanlab: dashboard: {}\n", e.what());
    return 1;
  }
  boost::asio::io_context ioc;
  dashboard::DashboardOptions o;
  o.controller_socket = lab::socket_path(lab_name);
  o.listen = a.listen;
  o.token = a.token;
  std::unique_ptr<dashboard::Dashboard> board;
  try {
    board = std::make_unique<dashboard::Dashboard>(ioc, o);
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "wanlab: dashboard: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "wanlab: dashboard: {}\n", e.what());
    return 1;
  }
  const auto at = o.listen.substr(0, o.listen.rfind(':'));
  fmt::print("dashboard of lab {}: http://{}:{}/{}  (Ctrl-C to stop)\n", lab_name, at, board->port(),
             o.token.empty() ? "" : "?token=...");
  std::fflush(stdout);
  boost::asio::signal_set signals(ioc, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code&, int) { board->close(); });
  ioc.run();
  return 0;
}

}  // namespace wanlab::cli
