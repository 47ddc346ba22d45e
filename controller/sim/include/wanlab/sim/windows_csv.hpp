#pragma once
// windows.csv of a simulated run: the arbiter's windows (workload::windows_csv) with the wire
// times the simulator kept (SimResult::wire). The ns-3 reference's runs too.
#include <string>

#include "wanlab/core/topology.hpp"
#include "wanlab/sim/simulator.hpp"

namespace wanlab::sim {

std::string windows_csv(const core::Topology& topo, const SimResult& result);

}  // namespace wanlab::sim
