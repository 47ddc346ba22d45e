#pragma once
// What a run needs of its lab: run::RunManager's view of the LabController. The topology,
// the WAN rates' scale, the links' and the backend's counters, the flow gates that carry
// the arbiter's windows, and the run's record in the lab's state file.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "wanlab/core/topology.hpp"
#include "wanlab/lab/state.hpp"
#include "wanlab/shaping/link_shaper.hpp"

namespace wanlab::api {

class RunLab {
 public:
  virtual ~RunLab() = default;
  /// The topology as built (link parameters change under replays and `link set`).
  virtual const core::Topology& topology() const = 0;
  /// Scales every WAN link's rate (a run's `scale`); 1 restores the configured rates.
  virtual void set_rate_scale(double scale) = 0;
  /// Counters of every WAN link now (src, dst, counters).
  virtual std::vector<std::tuple<std::size_t, std::size_t, shaping::LinkCounters>> link_counters() = 0;
  /// The backend's own counters by name, and how its thread is scheduled (empty: none).
  virtual std::vector<std::pair<std::string, std::uint64_t>> backend_counters() = 0;
  virtual std::string backend_scheduling() = 0;
  /// Flow gating on WAN link (src, dst) (DC indices): shaping::LinkShaper's, on the link in
  /// force. Throw std::runtime_error where the backend cannot gate or the lab is torn down.
  virtual bool gates_flows() const = 0;
  virtual void set_flows(std::size_t src, std::size_t dst, const std::vector<shaping::GatedFlow>& flows) = 0;
  virtual void set_gate(std::size_t src, std::size_t dst, int flow, bool open) = 0;
  virtual std::vector<shaping::FlowCounters> flow_counters(std::size_t src, std::size_t dst) = 0;
  /// The lab's rails (shaping::RailSwitch), where the topology has them: a run's circuit
  /// plan per DC with rails, its port rates' scale, and the switch's counters. A lab
  /// without rails has none (set_rail_plan throws std::runtime_error).
  virtual bool has_rails() const { return false; }
  virtual void set_rail_plan(std::size_t dc, shaping::RailPlan plan) {
    (void)plan;
    throw std::runtime_error("DC " + std::to_string(dc) + ": this lab switches no rails");
  }
  virtual void set_rail_scale(double /*scale*/) {}
  virtual std::vector<shaping::RailSwitchStats> rail_stats() { return {}; }
  /// The run in progress (nullopt: none), written to the state file at once.
  virtual void record_run(std::optional<lab::RunRecord> run) = 0;
  /// The recorded run's progress, written with the lab's next state flush.
  virtual void note_run_progress(int iterations_done, const std::string& phase) = 0;
};

}  // namespace wanlab::api
