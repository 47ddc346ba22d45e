#pragma once
// `wanlab dashboard`: a live web page of one lab, served over HTTP (Boost.Beast) by its own
// process, which reads the lab's controller over its Unix socket once a second:
//   GET /                 the page (controller/dashboard/web/, compiled in)
//   GET /api/lab          the controller's status document (DCs, links: the map)
//   GET /events           server-sent events: one "tick" a second, {t, links: [{src, dst,
//                         mbit_s, queue_packets, rate_mbit_s, drops}], windows: the running
//                         run's arbiter windows of the last minute, windows_now_s, run: {id, phase,
//                         iterations, iterations_done, iteration_s, workers: [{worker, dc,
//                         stage, iteration}]}}
//   GET /api/tick         the last tick, as JSON (scripts, tests)
//   GET /api/wait?s=N     answers after N s (at most 30): the page's test hook, which holds
//                         the page's load event while the charts fill (docs/metrics.md)
// The page draws with its own script (SVG, no library). A listen address that is not
// loopback needs a token: every request must then carry ?token=TOKEN (the page passes its
// own on).
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

namespace wanlab::dashboard {

struct DashboardOptions {
  std::filesystem::path controller_socket;  // the lab's controller.sock
  std::string listen = "127.0.0.1:8080";
  std::string token;
  std::chrono::milliseconds interval{1000};
};

/// Link throughput from two scrapes of /metrics (Mbit/s per directed link), and the tick's
/// other fields from the controller's answers; `windows` is GET /v1/windows's answer (or
/// just its array). Pure: the server calls it, tests too.
nlohmann::json make_tick(const std::string& metrics_before, const std::string& metrics_now, double seconds_between,
                         const nlohmann::json& windows, double unix_time);

class Dashboard {
 public:
  /// Listens (throws std::invalid_argument for a bad or unguarded address, std::runtime_error
  /// where it cannot) and starts polling the controller on `ioc`.
  Dashboard(boost::asio::io_context& ioc, DashboardOptions options);
  ~Dashboard();
  Dashboard(const Dashboard&) = delete;
  Dashboard& operator=(const Dashboard&) = delete;
  std::uint16_t port() const;
  void close();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

/// The compiled-in page files: path ("/", "/dashboard.js"...) -> (content type, body); nullptr
/// for none.
const std::pair<std::string, std::string>* asset(const std::string& path);

}  // namespace wanlab::dashboard
