#pragma once
// The simulated DP all-reduce: a ring among the replicas of a stage
// (program::Op::allreduce). With every step taking the same time c, rank r starts step k at
// max over d <= k of (entry of rank r-d) + k c, so every rank ends at max(entries) +
// 2(n-1) c: the collective starts when its last rank enters, all ranks step together, and
// each ring hop carries 2(n-1) chunks. It is run that way: one transfer per ring hop with
// all its steps' bytes, ending when the last hop's bytes have left their link plus 2(n-1)
// one-way delays of the slowest hop (ev::CollectiveEnd). A hop inside a DC is a flow; one
// across DCs, with Bursts::paced and a TCP window, is a message of the pair's connections
// (HopSender), sent as TCP sends it (slow start, HyStart, CUBIC, the link's drop-tail
// queue), as the lab's agents write their steps to those connections and as the ns-3
// reference sends them; else a flow at the connections' window over the RTT.
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "wanlab/common/program.hpp"
#include "wanlab/sim/sim_context.hpp"

namespace wanlab::sim {

class RailFabrics;

/// Who starts an all-reduce's WAN hop as a message (the simulator: on the pair's
/// connections, as it starts a pipeline message).
class HopSender {
 public:
  /// Message `message` (Message::collective set, delay 0) starts now.
  virtual void send_hop(std::uint32_t message, Nanos now) = 0;

 protected:
  ~HopSender() = default;
};

class Collectives {
 public:
  struct Place {  // where a TP group runs
    std::size_t dc = 0;
    std::size_t node = 0;  // global node index
  };
  struct Collective {
    std::vector<std::uint32_t> members;  // groups, ring order
    std::vector<Nanos> entry;            // when each entered (kNotYet: not yet)
    int entered = 0;
    int iteration = 0;
    int hops_left = 0;
    Nanos last_finish = 0;
    Nanos step_delay = 0;
    std::size_t steps = 0;
    double hop_payload = 0;  // all TP ranks' bytes of each hop, every step together
  };

  /// `places`: every TP group's, by group.
  Collectives(SimContext& ctx, std::vector<Place> places);

  /// Group `group` enters the all-reduce `op` (its ring of workers, TP rank 0 of each),
  /// its `seq`-th of iteration `iteration`. The last to enter starts the ring's flows, and
  /// ev::CollectiveEnd comes when they are done. Returns the collective's index. Throws
  /// std::invalid_argument for a ring that lacks the group or crosses a DC pair without a
  /// WAN link.
  std::uint32_t enter(std::uint32_t group, int iteration, int seq, const program::Op& op, Nanos now);
  /// One of the collective's hops has left its last link at `now`.
  void hop_done(std::uint32_t collective, Nanos now);
  /// WAN hops go as messages through `sender` (Bursts::paced with a TCP window).
  void use_sender(HopSender* sender) { sender_ = sender; }
  /// The DCs' rails (sim/rails.hpp), when some DC has them: ring hops across them take rail
  /// links, and with OCS wait for the all-reduce's circuits.
  void use_rails(RailFabrics* rails) { rails_ = rails; }
  /// Hop `index` (member index to the next) of `collective`, held for its circuits, starts.
  void start_rail_hop(std::uint32_t collective, std::uint32_t index, Nanos now);
  const Collective& operator[](std::uint32_t collective) const { return all_[collective]; }

 private:
  void start_hops(std::uint32_t ci, const program::Op& op, Nanos now);

  SimContext& ctx_;
  RailFabrics* rails_ = nullptr;
  HopSender* sender_ = nullptr;
  std::vector<Place> places_;
  std::vector<Collective> all_;
  std::map<std::tuple<int, int, int>, std::uint32_t> open_;  // (ring's first worker, iteration, seq)
};

}  // namespace wanlab::sim
