#pragma once
// How WAN links are shaped at run time: in-place parameter changes and live counters.
// Backends: kernel (HTB + netem through netlink) and userspace (the engine in the controller).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "wanlab/common/units.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/shaping/rail_switch.hpp"

namespace wanlab::shaping {

struct LinkCounters {
  std::uint64_t packets = 0;     // sent on the link
  std::uint64_t bytes = 0;
  std::uint64_t drops = 0;       // queue overflow and emulated loss
  std::uint64_t overlimits = 0;  // times the rate held a packet back
  std::uint64_t queued_packets = 0;
  std::uint64_t queued_bytes = 0;
  // The userspace engine also tells these apart (the kernel backend leaves them 0).
  std::uint64_t packets_in = 0;
  std::uint64_t bytes_in = 0;
  std::uint64_t dropped_queue = 0;
  std::uint64_t dropped_loss = 0;
  std::uint64_t in_flight_packets = 0;
  std::uint64_t payload_bytes = 0;  // TCP/UDP payload sent on the link
};

/// Traffic of a gated flow: IPv4 TCP/UDP packets from `saddr` to `daddr` (0: any
/// destination) whose source port p has (p & sport_mask) == sport. Addresses host order.
struct FlowMatch {
  std::uint32_t saddr = 0;
  std::uint32_t daddr = 0;
  std::uint16_t sport = 0;
  std::uint16_t sport_mask = 0;
  bool operator==(const FlowMatch&) const = default;
};

/// A flow the arbiter grants windows to on one link: its id (unique on the link, >= 0) and
/// the packets that belong to it.
struct GatedFlow {
  int id = 0;
  std::vector<FlowMatch> matches;
};

/// What a gated flow did. Times are CLOCK_MONOTONIC (steady_clock) ns; -1 where the backend
/// cannot tell (the kernel backend counts bytes only: the run manager samples).
struct FlowCounters {
  int id = 0;
  bool open = false;
  std::uint64_t packets = 0;       // sent on the link (left it, toward the destination)
  std::uint64_t bytes = 0;
  /// Passed the gate into the link's queue: what the link's window carries. Backends that
  /// cannot tell the two apart count the same here as in `bytes`.
  std::uint64_t admitted_bytes = 0;
  std::uint64_t held_packets = 0;  // waiting at the gate now
  std::uint64_t dropped = 0;       // dropped by a full gate (one per arrival at a full gate)
  // Times on the backend's steady clock, in ns (none: not yet).
  std::optional<Nanos> opened_ns;         // when the gate last opened
  std::optional<Nanos> first_out_ns;      // first packet sent since it last opened
  std::optional<Nanos> last_out_ns;       // last packet sent, ever
  std::optional<Nanos> first_admitted_ns; // first packet into the link's queue since it last opened
  std::optional<Nanos> last_admitted_ns;  // last packet into the link's queue, ever
};

class LinkShaper {
 public:
  virtual ~LinkShaper() = default;
  virtual std::string backend() const = 0;
  /// Whether delay, jitter and loss are applied (rate and queue limit always are).
  virtual bool applies_delay() const = 0;
  /// Applies `link.params` (already updated in `topo`) in place: queues are kept.
  virtual void apply(const core::Topology& topo, const core::WanLink& link) = 0;
  virtual LinkCounters counters(const core::Topology& topo, const core::WanLink& link) = 0;

  // Flow gating: the data plane's side of the arbiter's windows. Packets of a flow whose
  // gate is closed are held back (queued, in order, up to the link's queue limit; beyond
  // it the oldest held packet is dropped) and enter the link's own queue and rate once it
  // opens, as fast as that queue has room. Traffic that
  // matches no gated flow is never held.
  /// Whether this backend gates flows.
  virtual bool gates_flows() const { return false; }
  /// Declares the gated flows of `link`, every gate closed, replacing earlier ones (an empty
  /// list ends gating on the link; packets held for removed flows are released).
  virtual void set_flows(const core::Topology& topo, const core::WanLink& link, const std::vector<GatedFlow>& flows);
  /// Opens or closes one declared flow's gate in place (nothing is flushed). Throws
  /// std::out_of_range for a flow that was not declared.
  virtual void set_gate(const core::Topology& topo, const core::WanLink& link, int flow, bool open);
  virtual std::vector<FlowCounters> flow_counters(const core::Topology& topo, const core::WanLink& link);

  /// Backend-wide counters worth showing in `status` (name, value); none by default.
  virtual std::vector<std::pair<std::string, std::uint64_t>> stats() const { return {}; }
  /// How the backend's own thread is scheduled (the userspace engine's: "SCHED_FIFO 50");
  /// empty where it has none.
  virtual std::string scheduling() const { return {}; }

  // The lab's rails (rail_switch.hpp), where the topology has them: the userspace backend's.
  /// Whether this lab's DCs with rails are switched here.
  virtual bool has_rails() const { return false; }
  /// A run's circuit plan for DC `dc`'s rails (RailSwitch::set_plan).
  virtual void set_rail_plan(std::size_t dc, RailPlan plan);
  /// DC `dc`'s OCS reconfiguration latency, in place (RailSwitch::set_latency).
  virtual void set_rail_latency(std::size_t dc, Duration latency);
  /// The rails' port rates x `scale` (a run's scale; 1 restores them).
  virtual void set_rail_scale(double /*scale*/) {}
  virtual std::vector<RailSwitchStats> rail_stats() const { return {}; }
};

}  // namespace wanlab::shaping
