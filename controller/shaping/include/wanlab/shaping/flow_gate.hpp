#pragma once
// Flow gating in the userspace engine, as pure code (no sockets, injected clock): which
// declared flow a frame belongs to, and each flow's gate with the packets it holds.
//
// Classification: one open-addressing table per distinct source-port mask, keyed by
// (saddr, daddr, sport & mask), plus one per mask for matches with daddr 0 (any
// destination), keyed by (saddr, sport & mask); built when the flows are declared, so a
// lookup costs a few probes and allocates nothing. A frame that matches several declared
// flows belongs to the one declared first.
//
// Gates: a closed gate holds its flow's packets in a fixed-capacity FIFO (allocated when
// the flows are declared); once it is full, each arrival drops the oldest packet held
// (drop-front: a TCP sender's latest packets, its retransmissions among them, are the ones
// that let it resume when the gate opens; dropping arrivals instead can keep only new data
// past a hole whose retransmission was dropped, stalling the flow until its backed-off
// retransmission timer fires, seconds later).
// An open gate hands its held packets, in order, to the link's queue as far as that queue
// has room (feed(): at once when it opens, then each time the link frees room), and the
// flow's new packets wait behind them until none are left. Handing them over all at once
// would drop most of them at a queue that the flow whose window just closed still fills,
// the retransmissions at the tail with them: the same multi-second stall. The gates hold
// opaque packet handles (the engine's pool slots): whoever gets a handle back owns it.
// Flows no longer declared hand their held packets back at once (there is no gate left to
// keep their later packets behind them).
//
// Counters (FlowCounters): `packets`/`bytes` count what the link model released onto the
// wire (after serialization and propagation; lost on the wire or dropped by the link's
// queue is not sent), `first_out_ns`/`last_out_ns` the times of those releases;
// `admitted_bytes`, `first_admitted_ns`/`last_admitted_ns` what passed the gate into the
// link's queue and when (the window's view: the link's bottleneck starts there); `dropped`
// counts packets dropped by a full gate only (the link's own drops are the link's);
// `held_packets` counts the packets a gate holds now, closed or draining.
#include <cstdint>
#include <optional>
#include <vector>

#include "wanlab/shaping/link_model.hpp"
#include "wanlab/shaping/link_shaper.hpp"

namespace wanlab::shaping {

/// What classification looks at: IPv4 addresses and the TCP/UDP source port (host order).
struct FlowKey {
  std::uint32_t saddr = 0;
  std::uint32_t daddr = 0;
  std::uint16_t sport = 0;
};

/// The key of an Ethernet frame carrying IPv4 TCP or UDP (IP options skipped by IHL), or
/// nullopt: not IPv4, another protocol, a non-first fragment, or too short.
std::optional<FlowKey> frame_flow_key(const std::uint8_t* frame, std::uint32_t len);

/// Maps keys to declared flows (by their index in the declaration).
class FlowClassifier {
 public:
  static constexpr int kNone = -1;
  FlowClassifier() = default;
  explicit FlowClassifier(const std::vector<GatedFlow>& flows);
  /// The index of the first declared flow that has a match for `k`, or kNone.
  int classify(const FlowKey& k) const;

 private:
  struct Entry {
    std::uint32_t saddr = 0;
    std::uint32_t daddr = 0;
    std::uint16_t sport = 0;
    std::int32_t flow = kNone;  // kNone: an empty slot
  };
  struct Table {  // linear probing, power-of-two size, at most half full
    std::vector<Entry> slots;
    void insert(const Entry& e);
    int find(std::uint32_t saddr, std::uint32_t daddr, std::uint16_t sport) const;
  };
  struct Group {  // the matches of one source-port mask
    std::uint16_t mask = 0;
    Table exact;     // daddr given
    Table wildcard;  // daddr 0: any destination (daddr stored as 0)
  };
  std::vector<Group> groups_;
};

/// The declared flows of one link and their gates.
class FlowGates {
 public:
  enum class Verdict { pass, held, held_dropping_oldest };

  /// Every gate closed; each holds at most `hold_capacity` packets (at least 1).
  FlowGates(const std::vector<GatedFlow>& flows, std::size_t hold_capacity);

  std::size_t size() const { return flows_.size(); }
  /// The index of the declared flow with this id, or FlowClassifier::kNone.
  int index_of(int id) const;
  int classify(const FlowKey& k) const { return classifier_.classify(k); }
  /// Classifies a frame (FlowClassifier::kNone for one no declared flow matches).
  int classify_frame(const std::uint8_t* frame, std::uint32_t len) const {
    const auto k = frame_flow_key(frame, len);
    return k ? classifier_.classify(*k) : FlowClassifier::kNone;
  }

  /// A packet of flow `index` arrives: it passes when the gate is open and holds nothing,
  /// and is held otherwise (closed, or still handing held packets over); a full gate then
  /// drops the oldest packet it holds, whose handle goes to `dropped` for the caller to free.
  Verdict admit(int index, std::uint32_t handle, std::uint32_t bytes, std::uint32_t& dropped) {
    Flow& f = flows_[static_cast<std::size_t>(index)];
    if (f.c.open && f.count == 0) return Verdict::pass;
    if (f.count == f.held.size()) {
      f.c.dropped++;
      dropped = f.held[f.head].handle;
      f.held[f.head] = {handle, bytes};  // the ring stays full: the new packet is its last
      f.head = (f.head + 1) % f.held.size();
      return Verdict::held_dropping_oldest;
    }
    f.held[(f.head + f.count) % f.held.size()] = {handle, bytes};
    f.count++;
    return Verdict::held;
  }

  /// Opens or closes the gate of flow `index` at `now` (then feed() what it holds). Opening
  /// an open gate or closing a closed one changes nothing; closing one that still holds
  /// packets keeps them.
  void set_open(int index, bool open, Nanos now) {
    Flow& f = flows_[static_cast<std::size_t>(index)];
    if (f.c.open == open) return;
    f.c.open = open;
    if (f.count > 0) open ? ++draining_ : --draining_;
    if (!open) return;
    f.c.opened_ns = now;
    f.c.first_out_ns.reset();
    f.c.first_admitted_ns.reset();
  }

  /// A packet of flow `index` passed its gate into the link's queue at `now`.
  void entered(int index, std::uint32_t bytes, Nanos now) { entered(flows_[static_cast<std::size_t>(index)].c, bytes, now); }

  /// Whether an open gate still holds packets.
  bool draining() const { return draining_ > 0; }
  /// Offers the packets open gates hold, each gate's in order, to `enter(handle, bytes)`
  /// until it refuses one (the link's queue is full: that packet stays first in line) or
  /// none are left. Gates take turns at being first (round robin while the link is full).
  template <class Enter>
  void feed(Enter&& enter, Nanos now) {
    const std::size_t n = flows_.size();
    if (n == 0) return;
    for (std::size_t k = 0; k < n && draining_ > 0; ++k) {
      Flow& f = flows_[(next_feed_ + k) % n];
      if (!f.c.open || f.count == 0) continue;
      while (f.count > 0) {
        const HeldPacket p = f.held[f.head];
        if (!enter(p.handle, p.bytes)) {
          next_feed_ = (next_feed_ + k + 1) % n;  // the next gate is first next time
          return;
        }
        entered(f.c, p.bytes, now);
        f.head = (f.head + 1) % f.held.size();
        f.count--;
      }
      draining_--;
    }
    next_feed_ = (next_feed_ + 1) % n;
  }

  /// A packet of flow `index` left the link (onto the wire) at `now`.
  void sent(int index, std::uint32_t bytes, Nanos now) {
    FlowCounters& c = flows_[static_cast<std::size_t>(index)].c;
    c.packets++;
    c.bytes += bytes;
    if (!c.first_out_ns && c.opened_ns) c.first_out_ns = now;
    c.last_out_ns = now;
  }

  /// Takes over from the gates these replace: the held packets and counters of each flow
  /// still declared (same id; its gate stays closed), in order; `release` gets the held
  /// packets of flows no longer declared, flow by flow in arrival order. Allocates where a
  /// flow holds more than this capacity (never drops).
  template <class Release>
  void adopt(FlowGates& old, Release&& release) {
    old.draining_ = 0;
    for (auto& of : old.flows_) {
      const int i = index_of(of.c.id);
      if (i == FlowClassifier::kNone) {
        drain(of, release);
        continue;
      }
      Flow& f = flows_[static_cast<std::size_t>(i)];
      const bool open = f.c.open;
      f.c = of.c;
      f.c.open = open;
      if (of.count > f.held.size()) f.held.resize(of.count);
      while (of.count > 0) {
        f.held[(f.head + f.count) % f.held.size()] = of.held[of.head];
        f.count++;
        of.head = (of.head + 1) % of.held.size();
        of.count--;
      }
    }
  }

  /// Hands back every held packet (gating ends), flow by flow in arrival order.
  template <class Release>
  void release_all(Release&& release) {
    for (auto& f : flows_) drain(f, release);
    draining_ = 0;
  }

  /// Counters in declaration order; `out` is resized (no allocation once it has the size).
  void counters(std::vector<FlowCounters>& out) const;
  std::uint64_t held_packets() const;
  std::uint64_t hold_capacity() const;  // packets all gates together may hold
  std::uint64_t open_gates() const;

 private:
  static void entered(FlowCounters& c, std::uint32_t bytes, Nanos now) {
    // A frame the kernel stamped before the gate opened, handled after: it passed at the opening.
    const Nanos at = c.opened_ns && *c.opened_ns > now ? *c.opened_ns : now;
    c.admitted_bytes += bytes;
    if (!c.first_admitted_ns && c.opened_ns) c.first_admitted_ns = at;
    c.last_admitted_ns = at;
  }
  struct HeldPacket {
    std::uint32_t handle = 0;
    std::uint32_t bytes = 0;
  };
  struct Flow {
    FlowCounters c;                // c.held_packets is filled in by counters()
    std::vector<HeldPacket> held;  // ring: `count` packets from `head`
    std::size_t head = 0, count = 0;
  };
  template <class Release>
  static void drain(Flow& f, Release& release) {
    while (f.count > 0) {
      const HeldPacket p = f.held[f.head];
      f.head = (f.head + 1) % f.held.size();
      f.count--;
      release(p.handle, p.bytes);
    }
    f.head = 0;
  }

  FlowClassifier classifier_;
  std::vector<Flow> flows_;
  std::size_t draining_ = 0;   // open gates that hold packets
  std::size_t next_feed_ = 0;  // the gate feed() offers first
};

}  // namespace wanlab::shaping
