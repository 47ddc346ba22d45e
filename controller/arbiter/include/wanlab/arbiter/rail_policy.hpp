#pragma once
// Reconfiguration policies of a DC's photonic rails (docs/rails.md): when an optical
// circuit switch (OCS) changes its circuits, and to which configuration. Pure, like the
// bandwidth policies: the simulator's rail fabric (sim/rails.hpp) asks, the policy answers.
// A new policy is one class and one line in make_rail_policy().
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace wanlab::arbiter {

/// The parallelism phases whose traffic crosses a DC's rails, each needing its own circuits:
/// the pipeline's activations (stage s to s+1), its activation gradients (s+1 to s), and
/// the DP all-reduce's ring (replica r to r+1 of a stage).
enum class RailPhase { pp_forward, pp_backward, dp_allreduce };
inline constexpr RailPhase kRailPhases[] = {RailPhase::pp_forward, RailPhase::pp_backward, RailPhase::dp_allreduce};

/// "pp-forward", "pp-backward", "dp-allreduce".
std::string to_string(RailPhase phase);
std::optional<RailPhase> parse_rail_phase(std::string_view name);
/// Every phase's name, in kRailPhases order.
const std::vector<std::string>& rail_phase_names();

class RailPolicy {
 public:
  virtual ~RailPolicy() = default;
  virtual std::string name() const = 0;
  /// Whether the rails switch circuits; false: electrical packet switching, where every
  /// port reaches every other at once and nothing waits (the baseline).
  virtual bool circuits() const = 0;
  /// The phases that get a circuit configuration, the first one set up before the run.
  /// `present`: the phases whose traffic crosses the rails, in an iteration's order
  /// (kRailPhases); `asked`: the scenario's list (empty: the policy's choice), each present.
  /// Every present phase must be configured: the caller refuses one that is not.
  virtual std::vector<RailPhase> configurations(std::span<const RailPhase> present,
                                                std::span<const RailPhase> asked) const = 0;
  /// With no traffic on the circuits and `waiting` held at its senders (the phase of each
  /// held transfer, oldest first, never empty): the configuration to switch to, or
  /// nullopt to keep `current`.
  virtual std::optional<RailPhase> next(RailPhase current, std::span<const RailPhase> waiting) const = 0;
};

/// The rail policies this build knows: packet, static, phase.
std::vector<std::string> rail_policy_names();
/// Throws std::invalid_argument naming the known ones for an unknown name.
std::unique_ptr<RailPolicy> make_rail_policy(const std::string& name);

}  // namespace wanlab::arbiter
