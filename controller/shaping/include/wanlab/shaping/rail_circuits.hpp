#pragma once
// The circuits of one DC's optical rails in the lab (docs/rails.md), as a pure state machine
// on an injected clock (nanoseconds): which frames may cross now, which wait at their sender,
// and when the rails switch to another configuration. The rail switch (rail_switch.hpp) asks
// it about every frame; unit tests drive it on a virtual clock.
//
// A configuration is one phase's circuits (arbiter::RailPhase): out[node] = the node whose
// port each node's port sends to on every rail (all rails of a DC carry the same phase, as
// in the simulator). A frame from node a to node b crosses when the configuration in place
// has the circuit a -> b. A circuit's reverse direction carries only small frames (at most
// kReverseBytes of payload: TCP's ACKs and handshakes, the data plane's 16-byte notices),
// which the lab's transport needs and a one-way circuit would not give it; a data segment
// from b to a waits for a configuration with b -> a. While the rails switch, nothing crosses.
//
// What cannot cross waits in one FIFO (at its sender, as the simulator's held transfers do)
// until a configuration that connects it is up. A frame that no configuration connects is
// refused (dropped: no circuit will ever carry it).
//
// When to switch: as the simulator's rails (sim/rails.hpp), at a phase boundary: when frames
// wait and the circuits in place have drained, the policy (arbiter::RailPolicy::next, given
// the waiting frames' phases, oldest first) picks the configuration, which is up after the
// fabric's reconfiguration latency. "Drained" is read off the frames, since the switch does
// not see messages: no data frame of the configuration is inside the switch, no data frame
// came for `guard`, and every TCP flow that crossed it has had all its data acknowledged (or
// no data frame came for kRailAckWait: a delayed ACK does not hold the rails 40 ms).
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "wanlab/arbiter/rail_policy.hpp"
#include "wanlab/common/units.hpp"

namespace wanlab::shaping {

/// Frames with at most this much payload cross a circuit in its reverse direction.
inline constexpr std::uint32_t kReverseBytes = 64;
/// How long the circuits stay without a data frame, all data acknowledged, before they count
/// as drained (a sender's gap between two writes of one message is far shorter).
inline constexpr Nanos kRailDrainGuard = 1'000'000;
/// The longest a flow with unacknowledged data keeps the circuits from counting as drained.
inline constexpr Nanos kRailAckWait = 2'000'000;

/// What a run sets on a DC's rails: the policy and its configurations.
struct RailPlan {
  std::string policy = "packet";  // packet | static | phase (arbiter::make_rail_policy)
  std::vector<arbiter::RailPhase> configs;  // the first is in place from the start
  std::vector<std::vector<int>> out;        // per config, per node: the node it sends to, -1: none
};

/// A frame's TCP identity and sequence space, as the rail switch reads it (tcp: false for
/// anything else).
struct RailFrameInfo {
  bool tcp = false;
  std::uint32_t src_ip = 0, dst_ip = 0;
  std::uint16_t sport = 0, dport = 0;
  std::uint32_t seq = 0, ack = 0;
  bool has_ack = false;
  std::uint32_t payload = 0;  // L4 payload bytes (any protocol)
};

struct RailCircuitStats {
  std::string policy = "packet";
  bool circuits = false;
  std::vector<std::string> phases;
  std::string current;               // the configuration in place ("" without circuits)
  std::uint64_t reconfigurations = 0;
  Nanos reconfiguring_ns = 0;
  std::uint64_t held_frames = 0;     // frames that waited for their circuits (ever)
  std::uint64_t waiting_now = 0;
  std::uint64_t held_dropped = 0;    // arrived while the FIFO was full
  std::uint64_t no_circuit = 0;      // refused: no configuration connects them
};

class RailCircuits {
 public:
  /// `nodes` of the DC; `latency`: its reconfiguration; `hold_frames`: the waiting FIFO's size.
  RailCircuits(int nodes, Nanos latency, std::size_t hold_frames = 65536, Nanos guard = kRailDrainGuard);

  /// Sets the run's plan (packet rails: no circuits). Frames still waiting are returned to
  /// the caller, which releases them as the new plan says (classify() again).
  std::vector<std::uint32_t> set_plan(RailPlan plan, Nanos now);
  void set_latency(Nanos latency) { latency_ = latency; }
  bool circuits() const { return circuits_; }

  enum class Verdict { pass, held, dropped };
  /// A frame (pool handle `handle`) from node a to node b arrives at `now`. pass: it crosses
  /// now (the caller calls entered()/left() around its time inside the switch); held: kept
  /// here until release_ready() gives it back; dropped: refused or the FIFO is full (the
  /// caller frees it).
  Verdict classify(std::uint32_t handle, int a, int b, const RailFrameInfo& f, Nanos now);
  /// Whether a frame of `payload` bytes counts as data inside the switch: the caller calls
  /// left() when such a frame that crossed (passed, or released by advance()) leaves it.
  bool counts(std::uint32_t payload) const { return circuits_ && payload > kReverseBytes; }
  void left() {
    if (inside_ > 0) --inside_;
  }

  /// Advances to `now`: completes a switch that is due and, at a phase boundary, starts the
  /// next. Appends the handles that may cross now (the new configuration's, in arrival order).
  void advance(Nanos now, std::vector<std::uint32_t>& release);
  /// When advance() next has something to do (kNever: not before another frame).
  Nanos next_event() const;

  RailCircuitStats stats() const;

 private:
  struct Waiting {
    std::uint32_t handle;
    int config;
    bool data;
  };
  struct Flow {
    std::uint32_t sent_end = 0;  // highest sequence number sent + 1
    std::uint32_t acked = 0;
    bool outstanding = false;
  };
  static std::uint64_t flow_key(std::uint32_t a, std::uint32_t b, std::uint16_t pa, std::uint16_t pb) {
    return (static_cast<std::uint64_t>(a ^ (b << 8) ^ (b >> 24)) << 32) ^ (static_cast<std::uint64_t>(pa) << 16) ^ pb;
  }
  // The configuration that lets a frame of `payload` bytes cross from a to b: the one in
  // place where it does, else the first; -1 where none does.
  int config_for(int a, int b, std::uint32_t payload) const;
  bool connects(int config, int a, int b, std::uint32_t payload) const;
  void track(const RailFrameInfo& f, Nanos now);
  bool drained(Nanos now) const;
  void maybe_switch(Nanos now);

  int nodes_;
  Nanos latency_;
  std::size_t hold_frames_;
  Nanos guard_;
  bool circuits_ = false;
  RailPlan plan_;
  std::unique_ptr<arbiter::RailPolicy> policy_;
  int current_ = -1;
  int target_ = -1;
  bool switching_ = false;
  Nanos switch_done_ = 0;
  std::deque<Waiting> waiting_;
  std::int64_t inside_ = 0;     // data frames of the configuration inside the switch
  std::int64_t outstanding_ = 0;  // flows with data not yet acknowledged
  Nanos last_data_ = 0;
  std::unordered_map<std::uint64_t, Flow> flows_;
  RailCircuitStats stats_;
  std::vector<arbiter::RailPhase> scratch_;
};

}  // namespace wanlab::shaping
