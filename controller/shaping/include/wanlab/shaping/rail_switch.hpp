#pragma once
// The lab's photonic rails (docs/rails.md): one thread of the controller that is every rails
// DC's scale-out fabric. Each node has one port per rail (lab::plan_rails: a veth `rail<r>`
// in the node, its other end in the DC's rail-switch namespace); the switch reads the frames
// its ports receive (memory-mapped AF_PACKET rings) and sends each to the port of its
// destination address on the same rail, through two link models (link_model.hpp): the
// sender's port up to the switch and the switch down to the receiver's port, each at the
// fabric's port rate (x the run's scale), the second adding the topology's LAN delay.
// Addresses are resolved by the switch itself (it answers ARP for the rail's addresses with
// the ports' hardware addresses, core::rail_mac), so nothing floods.
//
// Electrical packet rails pass every frame. On OCS rails under a run's circuit plan
// (set_plan: a configuration per phase, learned from the programs), RailCircuits
// (rail_circuits.hpp) decides per frame: it crosses, waits at its sender's port for its
// circuit, or is refused; reconfigurations take the fabric's latency, during which nothing
// crosses. Before a run sets a plan, and after it, OCS rails have no circuit: data frames are
// refused (counted as no_circuit).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "wanlab/common/thread.hpp"
#include "wanlab/netlink/netlink.hpp"
#include "wanlab/shaping/rail_circuits.hpp"

namespace wanlab::shaping {

/// One DC's rails as the switch builds them.
struct RailFabricConfig {
  std::size_t dc = 0;  // the DC's index in the topology
  const netlink::Netns* ns = nullptr;  // its rail-switch namespace
  int nodes = 0, rails = 0;
  Rate port_rate{};
  Duration delay{};        // the topology's LAN delay, switch to port
  Duration reconfiguration{};  // OCS: how long a change of circuits takes (a run's plan decides whether it switches)
};

struct RailSwitchStats {
  std::size_t dc = 0;
  std::uint64_t rx_frames = 0, forwarded = 0, arp_replies = 0, not_for_rails = 0;
  std::uint64_t dropped_queue = 0, pool_exhausted = 0, rx_ring_dropped = 0;
  std::uint64_t bytes = 0;  // frames' bytes delivered to their ports
  RailCircuitStats circuits;
};

class RailSwitch {
 public:
  /// Opens every port's packet socket (throws if one cannot be); start() runs the thread.
  RailSwitch(std::vector<RailFabricConfig> fabrics, const ThreadSched& sched, std::uint64_t seed);
  ~RailSwitch();
  RailSwitch(const RailSwitch&) = delete;
  RailSwitch& operator=(const RailSwitch&) = delete;
  void start();
  void stop();

  /// The DCs (topology indices) with rails here.
  std::vector<std::size_t> dcs() const;
  /// A run's circuit plan for DC `dc` (a packet plan: none), applied by the thread before it
  /// returns; frames that waited under the previous plan are classified anew. Throws
  /// std::invalid_argument for a DC without rails or a malformed plan.
  void set_plan(std::size_t dc, RailPlan plan);
  /// Every port's rate is the fabric's port rate x `scale` (a run's scale; 1 restores it).
  void set_rate_scale(double scale);
  /// DC `dc`'s OCS reconfiguration latency, in place.
  void set_latency(std::size_t dc, Duration latency);
  /// Counters as of at most 10 ms ago.
  std::vector<RailSwitchStats> stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wanlab::shaping
