#pragma once
// An arbiter driven by an idealized network, on a virtual clock: the transfers its policy
// lets onto a link share the link's rate equally (fluid, no packets), a transfer's bytes
// leave at its share, and it is delivered one-way `delay` after its last byte. The arbiter
// sees progress at every event, as the lab's sampled counters show it. This is the
// reference the tests hold the policies to; the flow-level simulator refines it (per-flow
// TCP ceilings, compute).
#include <functional>
#include <limits>
#include <vector>

#include "wanlab/arbiter/arbiter.hpp"

namespace wanlab::arbiter {

struct FluidTransfer {
  TransferSpec spec;
  Nanos ready = 0;
  /// Sends nothing before this time even when granted (a flow that ignores its window's
  /// start, or never sends: kNever).
  Nanos silent_until = 0;
};

struct CapacityStep {
  Nanos at = 0;
  LinkId link;
  double rate_bps = 0;
};

struct FluidResult {
  std::vector<TransferId> ids;   // per transfer, in input order
  std::vector<Nanos> delivered;  // per transfer; -1 when it never was
};

/// Runs every transfer to delivery (or until `horizon`). Links must be declared on `arb`.
/// `sample` > 0 also reports progress at least that often (as the lab's sampling does).
FluidResult run_fluid(Arbiter& arb, const std::vector<FluidTransfer>& transfers, Nanos delay,
                      const std::vector<CapacityStep>& steps = {}, Nanos horizon = 3'600'000'000'000,
                      Nanos sample = 0);

}  // namespace wanlab::arbiter
