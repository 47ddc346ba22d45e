#pragma once
// The simulated photonic rails of the DCs whose topology fabric is "rails" (docs/rails.md).
//
// Rail k joins GPU k of every node of a DC; each GPU has one port of the fabric's port rate
// on its rail. The simulator runs TP rank 0 of each TP group for all its ranks (simulator.hpp),
// and rank t of every group sits on GPU (the group's first GPU + t), so a group's traffic
// to a group whose first GPU has the same index crosses its tp rails side by side: one link
// up and one down per group, of tp x the port rate (x the scenario's scale). Traffic between
// groups whose first GPUs differ would change rails, which a rail fabric does not do: refused.
//
// Electrical packet rails (switching "packet", or the rail policy "packet") are those links
// and nothing more. With an OCS (switching "ocs"), a port sends to one port at a time: a
// configuration is one phase's circuits (arbiter::RailPhase: the pipeline's sends one way,
// or the other way, or the DP all-reduce's ring), each port sending to at most one port
// and receiving from at most one (a phase that needs more is refused). While a
// configuration holds, only its phase's traffic moves; the traffic of another phase waits
// at its sender (it is not relayed through another GPU) until the policy
// (arbiter::RailPolicy) switches to a configuration that connects it. A switch starts only
// when no traffic is on the circuits (a phase boundary) and takes the fabric's
// reconfiguration latency on the simulated clock, during which nothing crosses the rails.
// All rails of a DC switch together (they carry the same phase: the symmetry above).
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "wanlab/arbiter/rail_policy.hpp"
#include "wanlab/sim/flow_network.hpp"
#include "wanlab/sim/sim_context.hpp"
#include "wanlab/sim/workers.hpp"

namespace wanlab::sim {

class RailFabrics {
 public:
  /// Something held at its sender: a message, or hop `index` (from member index to the
  /// next) of collective `id`.
  struct Waiter {
    bool hop = false;
    std::uint32_t id = 0;
    std::uint32_t index = 0;
  };

  /// The rails of the plan's DCs, or nullptr when no DC has rails (the simulator then runs
  /// exactly as without this part). Adds the rail links to ctx.net. Throws
  /// core::ConfigError (naming the scenario file and "/rails...") for a rail policy that
  /// names a phase the program lacks or leaves out one it has, and std::invalid_argument for
  /// traffic that would change rails or a phase needing two circuits from one port.
  static std::unique_ptr<RailFabrics> make(SimContext& ctx, const Workers& workers);

  /// Whether traffic from group a to group b crosses rails (one DC with rails, two nodes).
  bool on_rails(std::uint32_t a, std::uint32_t b) const {
    return fabric_of_[a] >= 0 && fabric_of_[a] == fabric_of_[b] && node_[a] != node_[b];
  }
  /// The rail fabric group `a` is on (on_rails() only).
  std::uint32_t fabric_of(std::uint32_t a) const { return static_cast<std::uint32_t>(fabric_of_[a]); }
  std::vector<FlowNetwork::LinkId> path(std::uint32_t a, std::uint32_t b) const { return {up_[a], down_[b]}; }

  /// Traffic of `phase` from group a (on_rails) wants to start at `now`: true when its
  /// circuits are up (it counts as on the rails until done()); false when it is held: it
  /// comes back from ready() once they are.
  bool admit(std::uint32_t a, arbiter::RailPhase phase, Waiter w, Nanos now);
  /// Traffic admitted on fabric `fabric` has left the rails.
  void done(std::uint32_t fabric, Nanos now);
  /// ev::RailsReady: fabric `fabric`'s new configuration is up; what it releases, to start now.
  std::vector<Waiter> ready(std::uint32_t fabric, Nanos now);

  std::vector<RailStats> stats() const;

 private:
  struct Fabric {
    std::size_t dc = 0;
    bool circuits = false;
    Nanos latency = 0;
    std::vector<arbiter::RailPhase> configs;
    arbiter::RailPhase current = arbiter::RailPhase::dp_allreduce;
    arbiter::RailPhase target = arbiter::RailPhase::dp_allreduce;
    bool switching = false;
    int active = 0;
    std::deque<std::pair<arbiter::RailPhase, Waiter>> waiting;
    int reconfigurations = 0;
    Nanos reconfiguring_ns = 0;
    std::uint64_t held = 0;
  };

  RailFabrics(SimContext& ctx, std::unique_ptr<arbiter::RailPolicy> policy) : ctx_(ctx), policy_(std::move(policy)) {}
  void maybe_switch(std::uint32_t fabric, Nanos now);

  SimContext& ctx_;
  std::unique_ptr<arbiter::RailPolicy> policy_;
  std::vector<Fabric> fabrics_;
  std::vector<int> fabric_of_;                  // by group: its fabric, -1: none
  std::vector<std::size_t> node_;               // by group: global node
  std::vector<FlowNetwork::LinkId> up_, down_;  // by group (groups on rails only)
  std::vector<arbiter::RailPhase> phases_;      // scratch: the waiting phases, oldest first
};

}  // namespace wanlab::sim
