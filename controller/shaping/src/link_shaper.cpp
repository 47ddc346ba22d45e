#include "wanlab/shaping/link_shaper.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace wanlab::shaping {

namespace {
[[noreturn]] void no_gates(const LinkShaper& s) {
  throw std::runtime_error("the " + s.backend() + " shaping backend does not gate flows");
}
}  // namespace

void LinkShaper::set_flows(const core::Topology&, const core::WanLink&, const std::vector<GatedFlow>&) {
  no_gates(*this);
}
void LinkShaper::set_gate(const core::Topology&, const core::WanLink&, int, bool) {
  no_gates(*this);
}
void LinkShaper::set_rail_latency(std::size_t dc, Duration) {
  throw std::runtime_error(fmt::format("the {} backend does not switch the rails of DC {}", backend(), dc));
}
void LinkShaper::set_rail_plan(std::size_t dc, RailPlan) {
  throw std::runtime_error(fmt::format("the {} backend does not switch the rails of DC {} (the lab's rails are the "
                                       "userspace engine's)",
                                       backend(), dc));
}
std::vector<FlowCounters> LinkShaper::flow_counters(const core::Topology&, const core::WanLink&) {
  no_gates(*this);
}

}  // namespace wanlab::shaping
