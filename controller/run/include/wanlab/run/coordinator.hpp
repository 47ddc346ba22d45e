#pragma once
// A run's coordination with its agents, as a pure state machine: events in (an agent said
// hello, sent a message, went away, time passed), messages out. No sockets, no clock of
// its own: the run manager feeds it, tests drive it directly.
//
// Phases: agents (waiting for one agent per node that hosts workers) -> preparing (each
// got its `assign`, binds its data port, answers `ready`) -> connecting (`connect`: every
// worker opens its data connections, the agent answers `connected` once its incoming ones
// have arrived too) -> running (`start` at a common instant; `progress` per worker and
// iteration; a `report` per worker at the end) -> done. Any `failed`, a lost agent or a
// timeout moves to failed and sends `abort` to every agent still there.
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wanlab/common/program.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/run/results.hpp"
#include "wanlab/run/prefill_service.hpp"
#include "wanlab/workload/plan.hpp"

namespace wanlab::run {

using Clock = std::chrono::steady_clock;

struct Outgoing {
  std::string node;
  nlohmann::json message;
  bool operator==(const Outgoing&) const = default;
};

enum class Phase { agents, preparing, connecting, running, done, failed };
std::string to_string(Phase p);

struct CoordinatorOptions {
  std::uint16_t data_port = 7300;
  std::chrono::milliseconds join_timeout{20000};   // every agent has said hello
  std::chrono::milliseconds setup_timeout{30000};  // ready, then connected
  std::chrono::milliseconds start_delay{300};      // from `start` to the common instant
  /// Longest silence of the whole run (no progress or report from any worker) while running.
  std::chrono::milliseconds stall_timeout{120000};
  /// Agents ask for a window before each WAN send (`want`/`grant`) and say when a WAN
  /// message has arrived (`delivered`): exclusive policies.
  bool windows = false;
  /// Offsets the stripes' source ports within each slot's block (common/flows.hpp), so a
  /// run never reuses the exact ports of the one before.
  int port_salt = 0;
  /// Scenarios with a prefill load: how far ahead (seconds) its arrivals are drawn.
  double prefill_horizon_s = 120;
};

class RunCoordinator {
 public:
  RunCoordinator(std::string run_id, workload::Plan plan, const core::Topology& topo, CoordinatorOptions options,
                 Clock::time_point now);

  std::vector<Outgoing> agent_joined(const std::string& node, const nlohmann::json& hello, Clock::time_point now);
  std::vector<Outgoing> message(const std::string& node, const nlohmann::json& msg, Clock::time_point now);
  std::vector<Outgoing> agent_left(const std::string& node, const std::string& reason, Clock::time_point now);
  std::vector<Outgoing> tick(Clock::time_point now);
  std::vector<Outgoing> abort(const std::string& reason);

  Phase phase() const { return phase_; }
  const std::string& error() const { return error_; }
  const std::string& run_id() const { return run_id_; }
  /// Nodes that host workers (the agents this run needs), "use-0"...
  const std::set<std::string>& nodes() const { return nodes_; }
  /// The common start instant (system clock, ns since the epoch) once running.
  std::optional<std::int64_t> start_unix_ns() const { return start_unix_ns_; }
  /// Per worker, the last iteration it finished (-1: none yet).
  const std::vector<int>& progress() const { return progress_; }
  /// Lowest iteration every worker has finished, +1 (0..iterations).
  int iterations_done() const;
  const std::vector<program::WorkerReport>& reports() const { return reports_; }
  /// The data connections' TCP state at the end, from the reports that carried it.
  const std::vector<TcpSample>& tcp() const { return tcp_; }
  const workload::Plan& plan() const { return plan_; }
  /// The `assign` message of one node (what its agent runs).
  nlohmann::json assignment(const std::string& node) const;

  /// The run's BubbleTea side (scenarios with a prefill load), else null.
  const PrefillService* prefill() const { return prefill_ ? &*prefill_ : nullptr; }

  /// The system clock's "now" in ns, injectable for tests.
  std::int64_t (*unix_now_ns)() = nullptr;

 private:
  std::vector<Outgoing> fail(const std::string& reason);
  std::vector<Outgoing> prefill_message(const std::string& node, const nlohmann::json& m);
  std::vector<Outgoing> to_all(const nlohmann::json& msg) const;
  std::string node_of(int worker) const;

  std::string run_id_;
  workload::Plan plan_;
  const core::Topology& topo_;
  CoordinatorOptions options_;
  Phase phase_ = Phase::agents;
  std::string error_;
  Clock::time_point phase_since_;
  Clock::time_point last_news_;
  std::set<std::string> nodes_;
  std::set<std::string> joined_, ready_, connected_;
  std::map<std::string, std::vector<int>> workers_of_node_;
  std::vector<int> progress_;
  std::vector<bool> reported_;
  std::vector<program::WorkerReport> reports_;
  std::vector<TcpSample> tcp_;
  std::optional<std::int64_t> start_unix_ns_;
  std::optional<PrefillService> prefill_;
};

}  // namespace wanlab::run
