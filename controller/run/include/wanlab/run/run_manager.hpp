#pragma once
// Scenario runs inside the controller daemon: serves the agents' control channel, starts
// one agent per node in the node's namespace (local labs) or waits for agents to connect
// (containers), drives a RunCoordinator, samples the WAN links' counters, and writes the
// run folder (summary.json, timeline.json, links.csv, scenario.json).
//
// Threads: everything runs on the daemon's io_context (channel callbacks, the 100 ms tick,
// the HTTP handlers), so one mutex is enough to keep the HTTP thread and it apart.
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "wanlab/api/handler.hpp"
#include "wanlab/api/lab_controller.hpp"
#include "wanlab/api/run_lab.hpp"

namespace wanlab::run {

struct RunManagerOptions {
  std::filesystem::path agent_socket;   // Unix socket agents connect to
  std::optional<std::string> tcp_listen;  // "HOST:PORT" for agents in containers or elsewhere
  std::string token;                    // bearer token agents must present over TCP
  bool spawn_agents = true;             // start one agent per node inside its namespace
  std::filesystem::path agent_binary;   // wanlab-agent; found next to wanlab when empty
  std::string backend;                  // the lab's shaping backend, for summaries
};

/// Where wanlab-agent is: $WANLAB_AGENT, next to this executable, or ../agents/ of it (a
/// build tree). Throws std::runtime_error listing where it looked.
std::filesystem::path find_agent_binary();

class RunManager {
 public:
  RunManager(boost::asio::io_context& ioc, api::RunLab& lab, RunManagerOptions options);
  ~RunManager();
  RunManager(const RunManager&) = delete;
  RunManager& operator=(const RunManager&) = delete;

  nlohmann::json start(const api::RunRequest& request);
  nlohmann::json status(const std::string& id);
  nlohmann::json list();
  nlohmann::json abort(const std::string& id);
  /// Aborts a run in progress, stops listening, kills agents it started.
  void close();
  /// The runs' Prometheus series (wanlab_run_*, wanlab_arbiter_*), appended to `out`.
  void write_metrics(api::MetricsText& out);
  /// The running run's windows (api::Controller::windows).
  nlohmann::json windows(double horizon_s);

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

/// The daemon's API: the lab's requests go to the LabController, runs to the RunManager.
class DaemonController final : public api::Controller {
 public:
  DaemonController(api::LabController& lab, RunManager& runs) : lab_(lab), runs_(runs) {}
  nlohmann::json status() override;
  nlohmann::json set_link(const std::string& src, const std::string& dst, const api::LinkChange& c) override {
    return lab_.set_link(src, dst, c);
  }
  nlohmann::json shutdown() override {
    runs_.close();
    return lab_.shutdown();
  }
  nlohmann::json set_rails(const std::string& dc, const api::RailsChange& c) override { return lab_.set_rails(dc, c); }
  nlohmann::json start_replay(const api::ReplayRequest& r) override { return lab_.start_replay(r); }
  nlohmann::json replays() override { return lab_.replays(); }
  nlohmann::json stop_replays(const std::optional<std::pair<std::string, std::string>>& l) override {
    return lab_.stop_replays(l);
  }
  nlohmann::json start_run(const api::RunRequest& r) override { return runs_.start(r); }
  nlohmann::json runs() override { return runs_.list(); }
  nlohmann::json run_status(const std::string& id) override { return runs_.status(id); }
  nlohmann::json abort_run(const std::string& id) override { return runs_.abort(id); }
  /// The lab's series and the runs', then how long the previous scrape took to write.
  std::string metrics() override;
  nlohmann::json windows(double horizon_s) override { return runs_.windows(horizon_s); }

 private:
  api::LabController& lab_;
  RunManager& runs_;
  double last_render_s_ = -1;  // the API's thread only
};

}  // namespace wanlab::run
