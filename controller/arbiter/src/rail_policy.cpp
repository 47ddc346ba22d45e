// The rail reconfiguration policies (rail_policy.hpp; docs/rails.md has what each does).
#include "wanlab/arbiter/rail_policy.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace wanlab::arbiter {
namespace {

// Electrical packet rails: no circuits, the baseline.
class PacketRails final : public RailPolicy {
 public:
  std::string name() const override { return "packet"; }
  bool circuits() const override { return false; }
  std::vector<RailPhase> configurations(std::span<const RailPhase>, std::span<const RailPhase>) const override {
    return {};
  }
  std::optional<RailPhase> next(RailPhase, std::span<const RailPhase>) const override { return std::nullopt; }
};

// One configuration for the whole run: the ring of the DP all-reduce. Traffic of any other
// phase has no circuit, so a plan with pipeline sends across the rails is refused.
class StaticRails final : public RailPolicy {
 public:
  std::string name() const override { return "static"; }
  bool circuits() const override { return true; }
  std::vector<RailPhase> configurations(std::span<const RailPhase>, std::span<const RailPhase>) const override {
    return {RailPhase::dp_allreduce};
  }
  std::optional<RailPhase> next(RailPhase, std::span<const RailPhase>) const override { return std::nullopt; }
};

// Opus: each phase gets the circuits it needs, switched at phase boundaries (when the
// phase's traffic has drained and another's waits), to the phase that has waited longest.
class PhaseRails final : public RailPolicy {
 public:
  std::string name() const override { return "phase"; }
  bool circuits() const override { return true; }
  std::vector<RailPhase> configurations(std::span<const RailPhase> present,
                                        std::span<const RailPhase> asked) const override {
    return asked.empty() ? std::vector<RailPhase>(present.begin(), present.end())
                         : std::vector<RailPhase>(asked.begin(), asked.end());
  }
  std::optional<RailPhase> next(RailPhase current, std::span<const RailPhase> waiting) const override {
    if (waiting.empty() || waiting.front() == current) return std::nullopt;
    return waiting.front();
  }
};

}  // namespace

std::string to_string(RailPhase phase) {
  switch (phase) {
    case RailPhase::pp_forward:
      return "pp-forward";
    case RailPhase::pp_backward:
      return "pp-backward";
    case RailPhase::dp_allreduce:
      return "dp-allreduce";
  }
  return "?";
}

std::optional<RailPhase> parse_rail_phase(std::string_view name) {
  for (const auto p : kRailPhases)
    if (to_string(p) == name) return p;
  return std::nullopt;
}

const std::vector<std::string>& rail_phase_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto p : kRailPhases) out.push_back(to_string(p));
    return out;
  }();
  return names;
}

std::vector<std::string> rail_policy_names() {
  return {"packet", "static", "phase"};
}

std::unique_ptr<RailPolicy> make_rail_policy(const std::string& name) {
  if (name == "packet") return std::make_unique<PacketRails>();
  if (name == "static") return std::make_unique<StaticRails>();
  if (name == "phase") return std::make_unique<PhaseRails>();
  std::string known;
  for (const auto& n : rail_policy_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument(fmt::format("unknown rail policy \"{}\"; known: {}", name, known));
}

}  // namespace wanlab::arbiter
