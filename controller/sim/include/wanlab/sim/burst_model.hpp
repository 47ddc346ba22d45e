#pragma once
// How a WAN message whose bytes per connection fit in its connections' window crosses its
// link (SimOptions::Bursts): one small interface, one class per model.
//   - shared (SharedBursts): it takes none; the message is a max-min fair flow like the
//     others (simulator.cpp), capped at the window over the RTT;
//   - fifo (FifoBursts, fifo_bursts.cpp): the message waits whole in the link's FIFO queue,
//     served one burst after the other at the full rate, drop-tail with retransmissions;
//   - paced (PacedBursts, paced_link.hpp): its TCP connections send it into the link's
//     FIFO queue, cut into pieces, with ACKs, CUBIC and streamed pieces.
// Longer messages, LAN messages and the all-reduce's hops are shared flows in every model;
// only the paced model takes the all-reduce's WAN hops too, whatever their size
// (collectives.hpp).
#include <cstdint>
#include <memory>
#include <vector>

#include "wanlab/sim/sim_context.hpp"

namespace wanlab::sim {

/// What a burst model asks of the simulator that runs it.
class BurstHost {
 public:
  /// The message's connections are free for the next message queued on them (which may
  /// start sending from `free_from` when >= 0).
  virtual void release_connections(std::uint32_t message, Nanos now, Nanos free_from) = 0;

 protected:
  ~BurstHost() = default;
};

class BurstModel {
 public:
  virtual ~BurstModel() = default;
  /// A WAN message within its connections' windows, its connections free now: true if the
  /// model sends it (a burst), false if it goes as a shared flow. `path`: its path;
  /// `sent_from` (paced): when its connections were free, if before now.
  virtual bool start(std::uint32_t message, const std::vector<FlowNetwork::LinkId>& path, Nanos now,
                     Nanos sent_from) = 0;
  /// One of the model's own events (fifo: Retransmit; paced: PacedCut, PacedResend,
  /// PacedAck, StreamCheck); others are ignored.
  virtual void handle(const Event& /*event*/, Nanos /*now*/) {}
  /// A flow the model started has moved its last byte (`owner`: set_owner()'s). True if
  /// its message (owner.index) is off the link: deliver it and free its connections.
  virtual bool flow_done(const FlowOwner& /*owner*/, Nanos /*now*/) { return true; }
  /// The arbiter revokes (pause) or grants again (resume) the window of a message the
  /// model carries (Message::paced).
  virtual void pause(std::uint32_t /*message*/, Nanos /*now*/) {}
  virtual void resume(std::uint32_t /*message*/, Nanos /*now*/) {}
  /// Wire bytes of a message it carries that the lab's gate counters would show by `now`.
  virtual double entered(std::uint32_t /*message*/, Nanos /*now*/) { return 0; }
  /// The end of a pass over an instant (settle()), after the arbiter's events.
  virtual void end_of_pass(Nanos /*now*/) {}
  /// Whether end_of_pass() has something left to do at this instant.
  virtual bool pending() const { return false; }
  /// The run is over at `now`: what is due is taken in (for the report).
  virtual void finish(Nanos /*now*/) {}
};

/// Bursts::shared: no message is a burst.
class SharedBursts final : public BurstModel {
 public:
  bool start(std::uint32_t, const std::vector<FlowNetwork::LinkId>&, Nanos, Nanos) override { return false; }
};

/// Bursts::fifo: a message within its connections' windows leaves at once and waits whole
/// in the link's FIFO queue; the link serves such bursts in arrival order, each at the full
/// rate. What finds the queue full (SimOptions::queue_overflow, policies without exclusive
/// windows) is lost and sent again after a retransmission timeout.
class FifoBursts final : public BurstModel {
 public:
  explicit FifoBursts(SimContext& ctx);
  bool start(std::uint32_t message, const std::vector<FlowNetwork::LinkId>& path, Nanos now, Nanos sent_from) override;
  void handle(const Event& event, Nanos now) override;
  bool flow_done(const FlowOwner& owner, Nanos now) override;

 private:
  void enqueue(std::uint32_t id, double bytes, const std::vector<FlowNetwork::LinkId>* path, Nanos now, bool resent);
  void start_burst(std::uint32_t id, double bytes, const std::vector<FlowNetwork::LinkId>* path, Nanos now);

  SimContext& ctx_;
  // Per topology link:
  std::vector<bool> busy_;  // a burst is being served
  std::vector<std::deque<std::pair<std::uint32_t, double>>> queue_;  // bursts (message, wire bytes) waiting, in arrival order
  std::vector<double> queued_bytes_;  // their bytes
  std::vector<std::uint32_t> flow_;   // the burst on the link, or kNone
};

/// The model SimOptions::bursts names.
std::unique_ptr<BurstModel> make_burst_model(SimContext& ctx, BurstHost& host);

}  // namespace wanlab::sim
