#include "wanlab/shaping/link_shaper.hpp"

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
std::vector<FlowCounters> LinkShaper::flow_counters(const core::Topology&, const core::WanLink&) {
  no_gates(*this);
}

}  // namespace wanlab::shaping
