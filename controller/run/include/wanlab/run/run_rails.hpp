#pragma once
// A lab run's circuit plan for the rails of its DCs (docs/rails.md), learned from the
// programs as the simulator learns it (sim/rails.hpp): which pairs of nodes each phase's
// traffic joins across a DC's rails, one configuration per phase the policy keeps. Pure.
#include <cstddef>
#include <map>

#include <nlohmann/json.hpp>

#include "wanlab/shaping/rail_switch.hpp"
#include "wanlab/workload/plan.hpp"

namespace wanlab::run {

/// Per DC with rails (topology index): its plan. Electrical packet rails, or the packet
/// policy, get a packet plan (no circuits). Throws core::ConfigError (the scenario file,
/// "/rails...") for a policy that names a phase the program lacks, leaves out one it has,
/// or switches circuits where no DC has OCS rails, and std::invalid_argument for traffic
/// that would change rails or an OCS phase needing two circuits from one port.
std::map<std::size_t, shaping::RailPlan> rail_plans(const workload::Plan& plan);

/// summary.json `rails` of a lab run (the simulator's keys where they mean the same; docs/rails.md):
/// per DC with rails, its fabric, policy, circuits, phases, reconfigurations (in all and per
/// iteration), the time switching and its share of `run_s`, frames that waited for their
/// circuits, and the switch's drops and frames forwarded since `start` (its counters then).
nlohmann::json rails_json(const core::Topology& topo, const std::vector<shaping::RailSwitchStats>& start,
                          const std::vector<shaping::RailSwitchStats>& stats, int iterations, double run_s);

}  // namespace wanlab::run
