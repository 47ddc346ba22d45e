#pragma once
// The userspace engine's model of one directed WAN link, as a pure state machine on an
// injected clock (nanoseconds). A packet goes through:
//   1. a drop-tail queue (limit in packets or bytes), waiting for the serializer;
//   2. the serializer: one packet at a time at the link rate, byte-accurate, back to back
//      (a rate change, or a rate of 0 for an outage, applies to the packet on the wire
//      from the moment of the change: nothing is flushed);
//   3. loss on the wire (Bernoulli, or Gilbert-Elliott bursts): the packet used its wire
//      time and then vanishes;
//   4. propagation: released `delay + j(t)` after its last bit left the serializer. The
//      jitter j(t) is a delay variation that changes continuously: linear between random
//      knots, uniform in [-jitter, +jitter], spaced 4 x jitter apart. Its slope is at most
//      1/2, so a packet can never overtake the one ahead of it, at any packet rate, and the
//      mean delay stays the configured one. (Independent per-packet jitter clamped to keep
//      order, as netem does, drifts toward delay + jitter when packets are closer together
//      than the jitter.) A release is still never earlier than the previous one, which
//      covers in-place parameter changes.
// The model holds opaque packet handles (indices into the engine's packet pool) and does
// no allocation after construction. A handle may stand for several packets on the wire (a
// GSO super-frame's segments, gso.hpp): it takes their bytes on the serializer, counts as
// that many packets against a queue limit and in the counters, and is lost if any of its
// packets is (the engine gives a lossy link single packets).
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "wanlab/common/units.hpp"

namespace wanlab::shaping {

/// Gilbert-Elliott loss: a two-state Markov chain evaluated per packet. In the good state
/// packets are lost with probability 1-k, in the bad state with 1-h; p = P(good->bad),
/// r = P(bad->good). Bernoulli loss is p = 0 with 1-k = the loss rate.
struct LossModel {
  Probability p{};          // good -> bad
  Probability r{};          // bad -> good
  Probability loss_good{};  // 1 - k
  Probability loss_bad{};   // 1 - h
  static LossModel bernoulli(Probability loss) { return {{}, {}, loss, {}}; }
  /// No packet can be lost while in the good state (the bad one is unreachable or lossless).
  bool lossless() const { return loss_good.ppb == 0 && (p.ppb == 0 || loss_bad.ppb == 0); }
  /// Mean loss rate in the stationary state.
  double mean() const;
  /// Standard deviation of the fraction lost among `packets` consecutive packets from the
  /// stationary state (large-count approximation). Bursts correlate losses, so this is
  /// wider than the binomial sqrt(m(1-m)/n): the bad state's runs add
  /// 2 (b-g)^2 pi_b pi_g lambda / (1 - lambda) per packet, lambda = 1 - p - r.
  double sd_of_mean(std::uint64_t packets) const;
};

struct LinkModelParams {
  Rate rate{};
  Duration delay{};
  Duration jitter{};
  LossModel loss{};
  QueueLimit queue{QueueLimit::Unit::packets, 1000};
};

struct LinkModelCounters {
  std::uint64_t packets_in = 0, bytes_in = 0;
  std::uint64_t packets_out = 0, bytes_out = 0;
  std::uint64_t payload_bytes_out = 0;  // TCP/UDP payload of the packets sent (the engine counts it)
  std::uint64_t dropped_queue = 0;  // drop-tail (and pool exhaustion, counted by the engine)
  std::uint64_t dropped_loss = 0;
  std::uint64_t queued_packets = 0, queued_bytes = 0;  // waiting for or on the serializer
  std::uint64_t in_flight_packets = 0;                 // serialized, propagating
};

class LinkModel {
 public:
  /// `capacity`: the most packets the model may hold at once (queue + propagation); the
  /// engine sizes its pool to match. `seed` makes jitter and loss reproducible.
  LinkModel(const LinkModelParams& params, std::size_t capacity, std::uint64_t seed);

  /// Parameters change in place at `now`: queued and propagating packets stay.
  void set_params(const LinkModelParams& params, Nanos now);
  const LinkModelParams& params() const { return params_; }

  enum class Verdict { queued, dropped_queue };
  /// A packet of `bytes` (wire bytes: frame without FCS), or `segments` packets of `bytes`
  /// together, arrives at `now`. Advance the model to `now` first (advance()) so events
  /// happen in time order.
  Verdict arrive(std::uint32_t handle, std::uint32_t bytes, Nanos now, std::uint32_t segments = 1);

  /// Processes every event up to `now`: serializations that completed (losses decided),
  /// entering propagation.
  void advance(Nanos now);
  /// The next packet to release at or before `now`, if any (call repeatedly).
  std::optional<std::uint32_t> release(Nanos now);
  /// When the next packet is due for release (kNever when none propagates).
  Nanos next_release() const { return flight_.empty() ? kNever : flight_.front().release; }
  /// Handles of packets lost on the wire since the last call (their slots can be reused).
  /// The vector is reused: consume before the next advance().
  std::vector<std::uint32_t>& lost() { return lost_; }
  /// When the model next needs attention: a serialization completes or a release is due.
  Nanos next_event() const;

  const LinkModelCounters& counters() const { return counters_; }
  LinkModelCounters& counters() { return counters_; }
  std::size_t capacity() const { return capacity_; }
  /// Raises the capacity (for a change to a larger rate x delay); never shrinks. Allocates,
  /// so the engine calls it only when parameters change, not per packet.
  void reserve(std::size_t capacity);

 private:
  struct Queued {
    std::uint32_t handle;
    std::uint32_t bytes;
    std::uint32_t segments;
    Nanos arrival;
  };
  struct Flying {
    std::uint32_t handle;
    std::uint32_t bytes;
    std::uint32_t segments;
    Nanos release;
  };
  template <class T>
  class Ring {  // fixed-capacity FIFO
   public:
    explicit Ring(std::size_t cap) : buf_(cap + 1) {}
    bool empty() const { return head_ == tail_; }
    std::size_t size() const { return (tail_ + buf_.size() - head_) % buf_.size(); }
    bool full() const { return size() + 1 == buf_.size(); }
    T& front() { return buf_[head_]; }
    const T& front() const { return buf_[head_]; }
    const T& back() const { return buf_[(tail_ + buf_.size() - 1) % buf_.size()]; }
    void push(const T& v) {
      buf_[tail_] = v;
      tail_ = (tail_ + 1) % buf_.size();
    }
    void pop() { head_ = (head_ + 1) % buf_.size(); }
    /// Larger capacity, same contents in the same order.
    void grow(std::size_t cap) {
      if (cap + 1 <= buf_.size()) return;
      std::vector<T> bigger(cap + 1);
      std::size_t n = 0;
      for (std::size_t i = head_; i != tail_; i = (i + 1) % buf_.size()) bigger[n++] = buf_[i];
      buf_ = std::move(bigger);
      head_ = 0;
      tail_ = n;
    }

   private:
    std::vector<T> buf_;
    std::size_t head_ = 0, tail_ = 0;
  };

  void start_service(Nanos start);
  Nanos serialization_end(std::uint32_t bytes, Nanos start) const;
  bool lose();
  bool lose(std::uint32_t segments);
  Nanos propagation_delay(Nanos at);
  Nanos knot_value();

  LinkModelParams params_;
  std::size_t capacity_;
  Ring<Queued> queue_;
  Ring<Flying> flight_;
  // The packet on the serializer (queue_.front() when busy_).
  bool busy_ = false;
  Nanos service_start_ = 0;
  Nanos service_end_ = kNever;
  double service_bits_left_at_start_ = 0;  // bits of the front packet still to send at service_start_
  Nanos last_release_ = 0;
  Nanos last_service_end_ = 0;
  bool bad_state_ = false;
  Nanos knot_t0_ = 0, knot_t1_ = -1, knot_v0_ = 0, knot_v1_ = 0;  // jitter knots (t1 < t0: unset)
  std::mt19937_64 rng_;
  std::vector<std::uint32_t> lost_;
  LinkModelCounters counters_;
};

}  // namespace wanlab::shaping
