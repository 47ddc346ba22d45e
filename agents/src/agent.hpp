#pragma once
// One agent: the process of one emulated GPU server (a lab node). It follows the run
// protocol of docs/protocol.md: `assign` (bind the data port) -> `ready`; `connect` (open
// the data connections) -> `connected`; `start` (run every stage worker from a common
// instant) -> `progress` per worker and iteration, then one `report` per worker; `abort`
// stops a run at once; `bye` ends it.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "data_plane.hpp"
#include "worker.hpp"

namespace wanlab::agent {

struct AgentOptions {
  std::string node;
  int gpus = 0;             // real GPUs this agent can use (cuda compute)
  std::string gpu_reason;   // why there are none
  bool once = false;        // the run ends this agent (one the controller started for it)
  /// Runs (on the agent's thread) when a once-agent's run ended: ok false after an abort.
  std::function<void(bool ok)> on_finished;
};

class Agent {
 public:
  using Send = std::function<void(nlohmann::json)>;
  Agent(AgentOptions options, Send send);
  ~Agent();
  /// The hello this agent introduces itself with.
  nlohmann::json hello() const;
  /// A message from the controller (any thread); work happens on the agent's own thread.
  void on_message(const nlohmann::json& msg);
  /// The controller connection is gone: a run in progress is aborted (its workers' peers
  /// are aborted by the controller too), and a once-agent in one is finished (ok false).
  void on_disconnected(const std::string& reason);

 private:
  struct Run;
  struct Layout;
  void post(std::function<void()> task);
  void loop();
  void handle(const nlohmann::json& msg);
  // A run's steps: its assignment (prepare: connections, data plane, workers), its start.
  void on_assign(const nlohmann::json& msg, const std::string& run_id);
  void prepare(Run& r);
  void plan_connections(Run& r, const Layout& l, int salt, int& expected_in);
  void setup_data_plane(Run& r, const Layout& l, int expected_in);
  void add_workers(Run& r, Layout& l, const std::string& compute, int iterations);
  void on_start(const nlohmann::json& msg, const std::string& run_id);
  void abort_run(const std::string& why);
  void setup_prefill(Run& r, const nlohmann::json& spec, bool cuda);
  void start_prefill(Run& r, std::chrono::steady_clock::time_point start);
  void on_prefill_message(Run& r, const nlohmann::json& m);
  static int slot_of_worker(Run& r, const Worker* w);
  void fail(const std::string& run, const std::string& message);

  AgentOptions options_;
  Send send_;
  std::unique_ptr<Run> run_;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace wanlab::agent
