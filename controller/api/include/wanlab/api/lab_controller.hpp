#pragma once
// A running lab, owned by the controller daemon: builds it (state on disk first, then the
// plan), serves status and in-place link changes, replays traces, and tears it down.
//
// Threads: the API (the daemon's io thread) and one thread per trace replay call in. One
// mutex guards the topology, the state and the shaper (the kernel backend's netlink socket
// is not thread-safe); another guards the set of replays. They are never held together,
// and a replay thread is joined (stopped) only with neither held, since its steps take the
// first.
//
// Replays. A replay step changes the link exactly as `link set` does (the topology, so
// `status` shows the values in force, then the shaper, in place) but does not rewrite the
// state file: an fsync per step would cost milliseconds where /run is on disk. The state
// file catches up when a replay ends or is stopped, and with every `link set`.
// A `link set` on a link being replayed applies at once; the replay's next step sets the
// parameters it names again (its answer says so).
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "wanlab/api/handler.hpp"
#include "wanlab/api/lab_backend.hpp"
#include "wanlab/api/metrics.hpp"
#include "wanlab/api/run_lab.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/lab/state.hpp"
#include "wanlab/lab/teardown.hpp"
#include "wanlab/replay/runner.hpp"
#include "wanlab/shaping/engine.hpp"
#include "wanlab/shaping/link_shaper.hpp"

namespace wanlab::api {

struct UpOptions {
  std::string backend = "auto";  // auto | kernel | userspace
  bool netem = false;            // decided by the caller (netlink::netem_available())
  std::uint64_t seed = 1;        // the userspace engine's jitter and loss
  int replay_priority = 1;       // SCHED_FIFO priority of replay threads (0: ordinary scheduling)
  ThreadSched engine_sched = shaping::default_engine_sched();  // the userspace engine thread's (--engine-sched)
  // Agents (used by the daemon's run manager).
  std::optional<std::string> agents_tcp{};  // also accept agents on HOST:PORT (containers)
  std::string token{};                      // bearer token agents present over TCP
  // Serve GET /metrics over TCP on HOST:PORT too (`up --metrics`); a non-loopback address
  // needs `token`, which scrapers then present.
  std::optional<std::string> metrics_listen{};
  // Serve the whole control API over TCP on HOST:PORT too (`up --api`, a swarm lab's
  // managers): every request must present `token`.
  std::optional<std::string> api_listen{};
  bool spawn_agents = true;               // start agents in the nodes' namespaces for runs
  // Router-only lab (lab/router_only.hpp, containers): no namespaces are made; this process's
  // own namespace is the WAN router, on the interfaces that hold the DC gateways' addresses.
  bool router_only = false;
  // With router_only, a Docker Swarm stack's router (lab/router_only.hpp, find_swarm_router_ports):
  // ports by the DC's subnet, the /22 routed on each, node hardware addresses learnt.
  bool swarm = false;
  // Every node's TCP congestion control (lab/host_tcp.hpp decides it); none: the host's.
  std::optional<std::string> tcp_congestion{};
};

/// auto picks kernel where netem exists, userspace elsewhere and for a topology with rails
/// (the rail switch is the userspace engine's).
std::string resolve_backend(const std::string& requested, bool netem, bool rails = false);

class LabController final : public Controller, public RunLab {
 public:
  /// Builds the lab, then starts the replay of every link that names a trace (the traces
  /// must be valid: `up` checks them first). On failure removes everything it made, then
  /// throws.
  /// `on_shutdown` runs after a shutdown request has torn the lab down (the daemon stops
  /// serving there).
  LabController(core::Topology topo, const UpOptions& options, std::function<void()> on_shutdown = {});
  /// The same on `lab_backend` (null: netlink_backend(), this kernel's).
  LabController(core::Topology topo, const UpOptions& options, std::unique_ptr<LabBackend> lab_backend,
                std::function<void()> on_shutdown = {});
  ~LabController() override;

  nlohmann::json status() override;
  nlohmann::json set_link(const std::string& src, const std::string& dst, const LinkChange& change) override;
  nlohmann::json shutdown() override;
  /// The lab's Prometheus series: links, the userspace engine, replays (api/metrics.hpp).
  void write_metrics(MetricsText& out);
  std::string metrics() override;
  /// Writes the state file if a `link set` changed the lab since the last write (the
  /// daemon calls this periodically, keeping the file off the request path).
  void persist_if_dirty();
  /// The run in progress (nullopt: none), written to the state file at once, so that a
  /// command that finds this controller dead can end the run (lab::end_orphaned_run).
  void record_run(std::optional<lab::RunRecord> run) override;
  /// The recorded run's progress and this controller's sign of life (now), written with the
  /// next persist_if_dirty().
  void note_run_progress(int iterations_done, const std::string& phase) override;
  nlohmann::json start_replay(const ReplayRequest& request) override;
  nlohmann::json replays() override;
  nlohmann::json stop_replays(const std::optional<std::pair<std::string, std::string>>& link) override;

  /// Scales every WAN link's rate (a run's `scale`: bytes and rates shrink together, so a
  /// large model's timing fits a small machine). Configured rates, traces and `link set`
  /// keep their meaning; the shaper gets rate x scale. 1 restores them.
  void set_rate_scale(double scale) override;
  /// Counters of every WAN link now (src, dst, counters), for run sampling.
  std::vector<std::tuple<std::size_t, std::size_t, shaping::LinkCounters>> link_counters() override;
  /// The backend's own counters (`status` backend_counters; the userspace engine's), by name.
  std::vector<std::pair<std::string, std::uint64_t>> backend_counters() override;
  /// How the backend's thread is scheduled (the userspace engine's), empty for none.
  std::string backend_scheduling() override;

  // Flow gating on WAN link (src, dst) (DC indices), for the arbiter's windows; see
  // shaping::LinkShaper. Throw std::runtime_error where the backend cannot gate or the lab
  // is torn down.
  bool gates_flows() const override;
  void set_flows(std::size_t src, std::size_t dst, const std::vector<shaping::GatedFlow>& flows) override;
  void set_gate(std::size_t src, std::size_t dst, int flow, bool open) override;
  std::vector<shaping::FlowCounters> flow_counters(std::size_t src, std::size_t dst) override;
  /// A DC's OCS rails' reconfiguration latency, in place (the topology keeps it: status shows it).
  nlohmann::json set_rails(const std::string& dc, const RailsChange& change) override;
  // The rails (shaping::LinkShaper's): RunLab's.
  bool has_rails() const override;
  void set_rail_plan(std::size_t dc, shaping::RailPlan plan) override;
  void set_rail_scale(double scale) override;
  std::vector<shaping::RailSwitchStats> rail_stats() override;

  /// Removes the lab's kernel objects (idempotent), replays stopped first. The state folder
  /// is the caller's.
  lab::TeardownReport teardown();
  /// The topology as built (link parameters change under replays: use status() for them).
  const core::Topology& topology() const override { return topo_; }
  const std::string& backend() const { return state_.backend; }
  std::chrono::nanoseconds bring_up_time() const { return bring_up_time_; }
  std::size_t operation_count() const { return op_count_; }

 private:
  using LinkKey = std::pair<std::size_t, std::size_t>;  // (src, dst) DC indices
  struct ActiveReplay {
    std::string trace_path;
    std::string format;      // csv | mahimahi
    std::string started_at;  // ISO 8601 UTC, milliseconds
    std::unique_ptr<replay::ReplayThread> thread;
  };

  // Caller holds mutex_. Sets `link`'s parameters in the topology and applies them in place
  // (and the reverse link's, whose default queue limit follows this link's delay); rolls the
  // topology back and throws ApiError if the shaper fails.
  void change_link_locked(core::WanLink& link, const core::LinkParams& params);
  // The link as the shaper gets it: the rate scaled by rate_scale_.
  core::WanLink in_force(const core::WanLink& link) const;
  const core::WanLink& gated_link(std::size_t src, std::size_t dst) const;  // caller holds mutex_; throws
  LinkKey link_key(const std::string& src, const std::string& dst) const;  // throws ApiError (404)
  std::string link_name(const LinkKey& k) const;
  void apply_replay_step(const LinkKey& k, const replay::Step& step);
  // Starts a replay of a parsed trace (replacing one on the same link); returns its status.
  nlohmann::json launch_replay(const LinkKey& k, replay::Trace trace, const std::string& path, const std::string& format);
  void stop_all_replays();
  // Rewrites the state file from the topology now. The write (an fsync) happens outside
  // mutex_, so replay steps do not wait for the disk; state_file_mutex_ orders the writers.
  void persist_state();
  std::atomic<bool> state_dirty_{false};
  nlohmann::json replay_json(const LinkKey& k, const ActiveReplay& r) const;

  core::Topology topo_;
  lab::LabState state_;
  std::unique_ptr<LabBackend> lab_;
  std::unique_ptr<shaping::LinkShaper> shaper_;
  std::function<void()> on_shutdown_;
  std::chrono::nanoseconds bring_up_time_{};
  std::size_t op_count_ = 0;
  bool torn_down_ = false;
  mutable std::mutex mutex_;  // topo_, state_, shaper_, torn_down_
  mutable std::mutex replays_mutex_;
  std::mutex state_file_mutex_;  // taken before mutex_, never inside it
  int replay_priority_ = 1;
  double rate_scale_ = 1.0;  // guarded by mutex_
  // Last member: destroyed (threads joined) before everything their steps touch.
  std::map<LinkKey, ActiveReplay> replays_;
};

/// The JSON of a replay's progress (what status lists under "replays"), given its trace,
/// the time now on the replay's clock, and where it came from.
nlohmann::json replay_status_json(const replay::ReplayProgress& progress, const replay::Trace& trace,
                                  Duration now);

/// The status document of a lab (what `wanlab status --json` prints). `shaper` may be
/// null (counters then omitted); `controller_running` tells whether a daemon owns it.
nlohmann::json lab_status(const core::Topology& topo, const lab::LabState& state, shaping::LinkShaper* shaper,
                          bool controller_running);

/// JSON of one link's configured parameters, with the queue limit actually in effect.
nlohmann::json link_json(const core::Topology& topo, const core::WanLink& link);

}  // namespace wanlab::api
