#pragma once
// The simulator's events: one struct per kind, together in one std::variant, and the
// queue that hands them out in time order (those of one instant in the order they were
// pushed, so a run is the same every time).
#include <cstdint>
#include <queue>
#include <type_traits>
#include <variant>
#include <vector>

#include "wanlab/sim/flow_network.hpp"

namespace wanlab::sim {

namespace ev {
struct Wake {  // a worker's compute op is over (or the run starts): it goes on
  std::uint32_t group = 0;
};
struct Deliver {  // a message's last byte reaches its receiver
  std::uint32_t message = 0;
};
struct CollectiveEnd {  // every hop of an all-reduce is done
  std::uint32_t collective = 0;
};
struct PostedSend {  // a rendezvous send's receiver has posted its recv, and the sender heard
  std::uint32_t pending = 0;  // the Simulation's pending send
};
struct Deadline {};  // the arbiter's next deadline may be due
struct Tick {};      // the arbiter hears of the windowed flows' progress
struct Capacity {    // a link trace's next rate step
  std::uint32_t trace = 0;
  std::uint32_t step = 0;
};
struct SlowStart {  // a shared flow's slow-start window doubles
  std::uint32_t message = 0;
};
struct Retransmit {  // Bursts::fifo: a burst's part lost to a full queue is sent again
  std::uint32_t message = 0;
};
struct PacedCut {  // Bursts::paced: what entered a link's queue becomes a piece
  std::uint32_t link = 0;
  std::uint32_t gen = 0;  // stale unless the link's cut generation is still this one
};
struct PacedResend {  // Bursts::paced: the sender has heard of its loss, and sends it again
  std::uint32_t message = 0;
};
struct PacedAck {  // Bursts::paced: ACKs a waiting sender needs come back
  std::uint32_t link = 0;
};
struct StreamCheck {  // Bursts::paced: has the link caught up with the streamed piece?
  std::uint32_t link = 0;
  std::uint32_t gen = 0;
};
struct RailsReady {  // a rail fabric's circuits are set up (sim/rails.hpp)
  std::uint32_t fabric = 0;
};
}  // namespace ev

using Event = std::variant<ev::Wake, ev::Deliver, ev::CollectiveEnd, ev::Deadline, ev::Tick, ev::Capacity,
                           ev::SlowStart, ev::Retransmit, ev::PacedCut, ev::PacedResend, ev::PacedAck,
                           ev::StreamCheck, ev::PostedSend, ev::RailsReady>;

/// The index of event kind T in Event (for a switch over event.index()).
template <class T, std::size_t I = 0>
constexpr std::size_t variant_index() {
  if constexpr (std::is_same_v<std::variant_alternative_t<I, Event>, T>)
    return I;
  else
    return variant_index<T, I + 1>();
}

class EventQueue {
 public:
  struct Timed {
    Nanos at = 0;
    std::uint64_t seq = 0;  // push order: ties at one instant go first in, first out
    Event event;
    bool operator>(const Timed& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };

  void push(Nanos at, Event event) { heap_.push({at, seq_++, event}); }
  bool empty() const { return heap_.empty(); }
  std::size_t size() const { return heap_.size(); }
  /// The first event's time. Only when not empty().
  Nanos next_at() const { return heap_.top().at; }
  /// Takes the first event out. Only when not empty().
  Timed pop() {
    auto e = heap_.top();
    heap_.pop();
    return e;
  }

 private:
  std::priority_queue<Timed, std::vector<Timed>, std::greater<>> heap_;
  std::uint64_t seq_ = 0;
};

}  // namespace wanlab::sim
