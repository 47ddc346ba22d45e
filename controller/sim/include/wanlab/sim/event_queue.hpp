#pragma once
// The simulator's events: one struct per kind, together in one std::variant, and the
// queue that hands them out in time order (those of one instant in the order they were
// pushed, so a run is the same every time).
#include <cstdint>
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

// A 4-ary min-heap on (time, push order). Every key is unique, so the order events come out
// in is the same for any correct heap. Four children a node: half the levels of a binary
// heap, and in a large paced run (every link's next cut, stale cuts included, its ACKs,
// every worker's next wake) each level is a cache miss.
class EventQueue {
 public:
  struct Timed {
    Nanos at = 0;
    std::uint64_t seq = 0;  // push order: ties at one instant go first in, first out
    Event event;
    bool operator>(const Timed& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };

  void push(Nanos at, const Event& event) {
    heap_.push_back({at, seq_++, event});
    up(heap_.size() - 1);
  }
  bool empty() const { return heap_.empty(); }
  std::size_t size() const { return heap_.size(); }
  /// The first event's time. Only when not empty().
  Nanos next_at() const { return heap_.front().at; }
  /// Takes the first event out. Only when not empty().
  Timed pop() {
    Timed first = heap_.front();
    const Timed last = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) down(last);
    return first;
  }

 private:
  static constexpr std::size_t kArity = 4;
  static bool before(const Timed& a, const Timed& b) { return a.at != b.at ? a.at < b.at : a.seq < b.seq; }
  void up(std::size_t i) {
    const Timed e = heap_[i];
    while (i > 0) {
      const std::size_t parent = (i - 1) / kArity;
      if (!before(e, heap_[parent])) break;
      heap_[i] = heap_[parent];
      i = parent;
    }
    heap_[i] = e;
  }
  // Puts `e` in the root's place and moves it down to where it belongs.
  void down(const Timed& e) {
    const std::size_t n = heap_.size();
    std::size_t i = 0;
    for (;;) {
      const std::size_t first = kArity * i + 1;
      if (first >= n) break;
      const std::size_t end = first + kArity < n ? first + kArity : n;
      std::size_t best = first;
      for (std::size_t c = first + 1; c < end; ++c)
        if (before(heap_[c], heap_[best])) best = c;
      if (!before(heap_[best], e)) break;
      heap_[i] = heap_[best];
      i = best;
    }
    heap_[i] = e;
  }

  std::vector<Timed> heap_;
  std::uint64_t seq_ = 0;
};

}  // namespace wanlab::sim
