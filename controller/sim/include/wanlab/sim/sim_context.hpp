#pragma once
// What the simulator's parts share (simulator.cpp's event loop, the burst models, the
// collectives): the run's options, the fluid network with the WAN and LAN links, the event
// queue, the messages in flight, the pairs' connections and what the result reports.
// One SimContext per simulate() call; the parts hold a reference to it.
#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "wanlab/arbiter/arbiter.hpp"
#include "wanlab/sim/event_queue.hpp"
#include "wanlab/sim/flow_network.hpp"
#include "wanlab/sim/simulator.hpp"
#include "wanlab/sim/tcp_model.hpp"
#include "wanlab/workload/plan.hpp"

namespace wanlab::sim {

inline constexpr std::uint32_t kNone = 0xffffffffu;
inline constexpr std::size_t kNoLink = static_cast<std::size_t>(-1);

struct Connection;

/// One message of a simulated send: TP rank 0's, standing for every TP rank's share.
struct Message {
  std::uint32_t src = 0, dst = 0;  // groups
  Connection* conn = nullptr;      // the pair's connections, from when its flow is started
  std::uint32_t slot = 0;          // the receiver's recv op
  int iteration = 0;
  std::size_t span = 0;  // the sender's send span
  double payload = 0;    // all TP ranks' shares
  std::size_t link = kNoLink;  // topology link, WAN messages only
  Nanos delay = 0;
  arbiter::TransferId transfer = 0;  // none for an all-reduce hop
  std::uint32_t collective = kNone;  // an all-reduce's WAN hop (Bursts::paced): its collective
  std::uint32_t flow = kNone;
  double ceiling = kUnlimited;  // per connection, bit/s
  double cwnd = 0;              // slow start: bytes per connection
  bool granted = false;
  bool burst = false;  // fits in its connections' windows: queued whole at the link
  bool paused = false;
  bool windowed = false;  // holds or held a window, not yet delivered
  int parts = 0;          // a burst's parts queued, on the link or waiting to be sent again
  double lost = 0;        // wire bytes lost to a full queue, waiting for their retransmission
  // Bursts::paced: the message enters its link's queue from when it starts, paced and
  // within its connections' window.
  bool paced = false;
  double entered = 0;      // wire bytes sent into the queue (less what it dropped), as of the last cut
  Nanos entry_end = kNotYet;   // when its last byte entered
  Nanos first_loss = kNotYet;  // when the queue first dropped some of it (`lost`: how much)
  bool resending = false;  // its lost bytes are entering again
  bool entering = false;   // in its link's `entering` list (entering, not paused)
  Nanos since = kNotYet;       // the next cut credits it from here, not from the last cut (it could
                           // not send before: its window was full; or it started since)
  double stream_rate = -1;  // >= 0: its pace for the streamed piece now open
};

/// The connections of one (sender, receiver) pair: a message is written to them after the
/// ones before it (the agents' data plane queues messages per pair), so its flow starts
/// when the previous message's has left; and their TCP windows.
struct Connection {
  SlowStartWindow slow;  // SimOptions::slow_start (shared and fifo bursts)
  bool busy = false;
  TcpWindow tcp;  // Bursts::paced, per connection
  std::deque<std::pair<std::uint32_t, std::vector<FlowNetwork::LinkId>>> queue;  // message, path
};

/// Who a flow of the network is.
struct FlowOwner {
  bool collective = false;
  bool ack = false;  // the ACKs of a data flow (`link`: the reverse link they cross)
  std::uint32_t index = 0;  // message or collective
  std::size_t link = kNoLink;  // WAN link it crosses, for the totals
  double payload = 0;
  bool paced = false;  // serves the first piece of `link`'s paced queue
  std::uint32_t rail = kNone;  // the rail fabric it crosses (sim/rails.hpp), kNone: none
};

class SimContext {
 public:
  /// Checks the options and builds the network: every topology link, and each node's LAN
  /// links up and down when the LAN is limited. Throws std::invalid_argument for bad
  /// options or an unknown policy.
  SimContext(const workload::Plan& plan, const SimOptions& options);

  const workload::Plan& plan;
  const SimOptions& opt;
  const workload::Scenario& sc;
  const int tp;
  const int k;
  const double window;  // bytes one TCP connection keeps in flight; 0: no ceiling
  std::unique_ptr<arbiter::Policy> policy;  // until the arbiter takes it
  bool exclusive = false;

  FlowNetwork net;
  EventQueue events;

  // Per topology link:
  std::vector<FlowNetwork::LinkId> wan;
  std::vector<double> wan_rate;  // its rate now (traces), before ACK shares
  std::vector<double> acks_for;  // the data rate whose ACKs hold their share of the reverse link
                                 // (Bursts::paced; kFullRate: the link's own; 0: none)
  std::vector<Nanos> wan_delay, wan_rtt;
  std::vector<std::size_t> reverse;  // its reverse link (kNoLink: none)
  std::vector<double> wan_ceiling;   // window / RTT per connection, bit/s
  std::vector<double> pace_cap;      // a windowed run's SO_MAX_PACING_RATE, bytes per ns per connection
  std::vector<std::vector<std::size_t>> link_of;  // [src DC][dst DC]
  bool lan_limited = false;
  Nanos lan_delay = 0;
  std::vector<std::size_t> node_base;  // per DC: its first node's global index
  std::vector<FlowNetwork::LinkId> node_up, node_down;

  std::vector<Message> messages;
  std::vector<FlowOwner> owners;       // by flow
  std::vector<LinkTotals> totals;      // per topology link
  std::vector<workload::WireTimes> wire;   // by arbiter transfer id
  SimStats stats;

  /// reserve_acks()'s mark for a link that sends at its own rate.
  static constexpr double kFullRate = -1;

  /// The TP group of `worker`, which must be TP rank 0 of a worker of the plan.
  std::uint32_t group_of(int worker) const;
  /// Connections one flow of `m` stands for.
  double weight_of(const Message& m) const { return static_cast<double>(tp) * (m.link == kNoLink ? 1 : k); }
  void set_owner(std::uint32_t flow, FlowOwner o) {
    if (owners.size() <= flow) owners.resize(flow + 1);
    owners[flow] = o;
  }
  /// A WAN transfer's bytes on the link: the first time they start. (Every WAN message but
  /// an all-reduce hop is an arbiter transfer, asked for when it is sent.)
  void on_wire(const Message& m, Nanos now) {
    if (m.link == kNoLink || m.collective != kNone) return;
    if (!wire[m.transfer].first) wire[m.transfer].first = now;
  }
  /// The ACKs of `wire` bytes of data on WAN link `link`, as a flow on the reverse link at
  /// kAckFraction of the data's rate (at most the forward link's rate, or `ceiling_bps`,
  /// the data's own ceiling over all its connections).
  void start_acks(std::size_t link, double wire, double ceiling_bps, Nanos now);
  /// A WAN link's rate in the network: its own (a trace's step), less the share the paced
  /// ACKs of its reverse link hold.
  void apply_rate(std::size_t link, Nanos now);
  /// The lab's queue limit at the link's rate now: the topology's, or the default for that
  /// rate (1.5 x the bandwidth-delay product, in full frames), as the lab sets it with each
  /// rate it applies.
  double queue_limit_bytes(std::size_t link);

 private:
  void build_network();

  std::vector<core::WanLink> wan_queue_link_;  // per topology link: its parameters, for its queue limit
  std::vector<std::pair<double, double>> queue_limit_;  // per topology link: (rate, queue limit in bytes at it)
};

}  // namespace wanlab::sim
