#pragma once
// The bridge between a plan's WAN messages and the arbiter, written once for every executor
// that asks the arbiter for windows (the lab's run windows, the simulator, the ns-3
// reference): the transfer a stage boundary's message becomes, and the windows.csv that
// lists the windows it got.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "wanlab/arbiter/arbiter.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/workload/plan.hpp"

namespace wanlab::workload {

/// One stage boundary's WAN message of one pipeline, as its TP ranks send it together.
struct WanMessage {
  int src = 0;  // a sending worker (any TP rank of its group)
  int dst = 0;  // a receiving worker (the same TP rank of the next group)
  arbiter::TransferKind kind = arbiter::TransferKind::activation;  // transfer_kind(tag)
  int microbatch = 0;
  int iteration = 0;
  double payload_bytes = 0;      // of every crossing TP rank together
  int ranks = 1;                 // the TP ranks whose messages cross the WAN together
  Nanos needed_at = 0;  // when the receiver would need it (compute_before)
};

/// Whether a pipeline message's tag (activation_tag, gradient_tag) carries gradients: odd
/// tags do, even ones activations. The lab's windows, the simulator and the reference read
/// kinds by it.
constexpr bool is_gradient_tag(std::uint32_t tag) {
  return tag % 2 != 0;
}

/// The kind of a pipeline message by its tag (is_gradient_tag).
constexpr arbiter::TransferKind transfer_kind(std::uint32_t tag) {
  return is_gradient_tag(tag) ? arbiter::TransferKind::gradient : arbiter::TransferKind::activation;
}

/// The arbiter's request for `m`: its link (the DCs of src and dst), wire bytes (the payload
/// with kWireOverhead, at least 1), kind, pipeline, stages, micro-batch, needed_at, and its
/// connections: `ranks` times the scenario's connections per WAN peer.
arbiter::TransferSpec transfer_request(const Plan& plan, const WanMessage& m);

/// When a window's bytes first entered its link and when the last left it (none: they
/// have not, or never did).
struct WireTimes {
  std::optional<Nanos> first;
  std::optional<Nanos> last;
};

/// windows.csv: one row per window the arbiter gave (in the order they ended), times in
/// seconds since `origin` with 6 decimals (empty for none), the wire times of `wire(window)`
/// (left empty for a revoked window).
std::string windows_csv(const core::Topology& topo, const std::vector<arbiter::WindowRecord>& windows,
                        const std::function<WireTimes(const arbiter::WindowRecord&)>& wire, Nanos origin = 0);

}  // namespace wanlab::workload
