#pragma once
// SimOptions::Bursts::paced: a WAN message within its connections' windows enters its
// link's FIFO queue as its TCP connections send it (tcp_model.hpp's window, Linux's pacing
// rate, in windowed runs at most the lab's SO_MAX_PACING_RATE), and its ACKs come back a
// round trip after its bytes left the queue. See SimOptions::bursts for the model; here:
//
//   - pieces (paced_link.cpp): what the messages entering a link put in between two cuts
//     (a message's start or end, or paced_piece_ns, longer with many messages at once) is
//     one piece; its bytes interleave, so it leaves as one flow, and a message whose last
//     byte is in it is off the link when it is. Drop-tail at the queue's limit;
//   - ACKs (paced_link.cpp): each piece's ACKs reach its senders a round trip after an
//     exact FIFO would have sent its bytes, and open their windows (TcpWindow::on_ack);
//     while a link sends, its ACKs hold kAckFraction of its rate on the reverse link;
//   - streams (paced_stream.cpp): SimOptions::paced_stream_ns, long pieces that the link
//     sends as they fill.
#include <algorithm>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "wanlab/sim/burst_model.hpp"
#include "wanlab/workload/plan.hpp"

namespace wanlab::sim {

class PacedBursts final : public BurstModel {
 public:
  /// Pieces get long (paced_piece_ns_per_message per message entering a link at once) from
  /// this many paced_piece_ns on. Below, 1 ms pieces are cheap enough, and long pieces of a
  /// few paced_piece_ns were off the 1 ms result by more than longer ones (bench/README.md,
  /// "Speed").
  static constexpr std::int64_t kLongPieces = 4;

  using Parts = std::vector<std::pair<std::uint32_t, double>>;  // message, wire bytes

  // A WAN link's FIFO queue, as the pieces that entered it. Its ACKs leave when an exact
  // FIFO would have sent its bytes (piece_left()).
  struct Piece {
    double bytes = 0;
    double weight = 0;                // connections that put bytes in it
    Nanos at = 0;                     // when it was cut (its bytes entered just before)
    Parts parts;
    std::vector<std::uint32_t> last;  // messages whose last bytes it holds
    bool open = false;                // streamed: still filling while the link sends it
    Nanos opened = 0;                 // when its first bytes began to enter
    Nanos served_at = kNotYet;        // when the link got to it
    Nanos caught_at = kNotYet;        // streamed: when the link caught up with it, from when it
                                      // sends at stream_pace (kNotYet: not yet, or never)
    double stream_pace = 0;           // streamed: bytes per ns it fills at
    bool sent = false;                // streamed and open: its flow has ended
    bool streamed = false;            // cut from a streamed piece: `rates` are its parts' paces
    std::vector<double> rates;
  };
  struct Ack {  // a piece's ACKs reaching its senders
    Nanos at = 0;    // when they are taken in (on the pieces' grid)
    Nanos sent = 0;  // when their bytes entered (the piece's cut)
    Nanos back = 0;  // when they came back: the RTT sample is back - sent
    Nanos first_back = 0;  // when the first of them came back (the link sent the piece from then)
    Parts parts;
  };
  struct Link {
    std::vector<std::uint32_t> entering;  // messages entering the queue now
    Nanos from = 0;                       // the last cut
    std::deque<Piece> pieces;             // cut, waiting or on the link (the first)
    double queued = 0;                    // their bytes
    std::deque<Ack> acks;                 // pieces off the link whose ACKs are on their way
    std::uint32_t server = kNone;         // the flow sending the first piece
    std::uint32_t gen = 0;                // cut events of another generation are stale
    Nanos next_cut = kNotYet;             // the cut scheduled (kNotYet: none)
    bool streaming = false;               // the open piece is sent as it fills (stream())
    Nanos armed = kNotYet;                // the ACKs due then have their event
    std::uint32_t stream_bundle = kNone;  // the flow network's bundle for streamed pieces
    Nanos fluid_end = 0;                  // when an exact FIFO would have sent all that left
    std::uint32_t piece_bundle = kNone;   // and for the others (no ceiling: found once, not per piece)
  };

  PacedBursts(SimContext& ctx, BurstHost& host);

  bool start(std::uint32_t message, const std::vector<FlowNetwork::LinkId>& path, Nanos now, Nanos sent_from) override;
  void handle(const Event& event, Nanos now) override;
  bool flow_done(const FlowOwner& owner, Nanos now) override;
  void pause(std::uint32_t message, Nanos now) override;
  void resume(std::uint32_t message, Nanos now) override;
  double entered(std::uint32_t message, Nanos now) override;
  void end_of_pass(Nanos now) override;
  bool pending() const override { return !idle_check_.empty(); }
  void finish(Nanos now) override;

  /// A link's queue, as it stands (for tests and reports).
  const Link& link(std::size_t l) const { return links_[l]; }
  /// The message's pace (wire bytes per ns, all its connections): Linux's pacing rate
  /// over all the message's connections, capped in windowed runs at the lab's
  /// SO_MAX_PACING_RATE, the link's rate over the transfer's connections.
  double rate(const Message& m) const {
    if (m.stream_rate >= 0) return m.stream_rate;
    double per_connection = m.conn->tcp.pacing_rate(ctx_.opt.pacing_ratio);
    if (ctx_.exclusive) per_connection = std::min(per_connection, ctx_.pace_cap[m.link]);
    return per_connection * ctx_.weight_of(m);
  }
  /// Bytes the message may still send now: its rest, within its connections' window.
  double room(const Message& m) const {
    return std::max(0.0, std::min(rest(m), m.conn->tcp.room() * ctx_.weight_of(m)));
  }
  /// Wire bytes the message has still to send (what was lost waits for its resend).
  static double rest(const Message& m) { return m.payload * workload::kWireOverhead - m.lost - m.entered; }

 private:
  // paced_link.cpp: pieces and ACKs.
  bool long_pieces(const Link& L) const { return piece_length(L) > ctx_.opt.paced_piece_ns; }
  // With many messages entering a link at once, pieces are long (paced_piece_ns_per_message
  // per message) and cut only on their own clock: a message that starts, comes back or puts
  // its last byte in between two cuts does so within the open piece (from its own instant;
  // the last byte leaves with its piece), so a start or an end costs no visit of every
  // message entering.
  Nanos piece_length(const Link& L) const {
    const Nanos len = static_cast<Nanos>(L.entering.size()) * ctx_.opt.paced_piece_ns_per_message;
    return len >= kLongPieces * ctx_.opt.paced_piece_ns ? len : ctx_.opt.paced_piece_ns;
  }
  Nanos piece_boundary(Nanos t) const { return (t / ctx_.opt.paced_piece_ns + 1) * ctx_.opt.paced_piece_ns; }
  void enter(std::uint32_t id);
  void resend(std::uint32_t id, Nanos now);
  void cut(std::size_t link, Nanos now);
  Piece take_piece(std::size_t link, Nanos from, Nanos now, bool streamed, bool coarse,
                   std::vector<std::pair<std::uint32_t, Nanos>>& in);
  void drop_tail(std::size_t link, Piece& p, Nanos now);
  void schedule(std::size_t link, Nanos now);
  void serve(std::size_t link, Nanos now);
  void check_idle(std::size_t link);
  void reserve_acks(std::size_t link, double data_bps, Nanos now);
  void piece_left(std::size_t link, Nanos now);
  void add_acks(std::size_t link, Nanos at, Nanos sent, Nanos back, Nanos first_back, Parts&& parts);
  void ack_event(std::size_t link, Nanos now);
  bool acks_in(std::size_t link, Nanos now) {
    const auto& L = links_[link];
    return !L.acks.empty() && L.acks.front().at <= now && take_acks(link, now);
  }
  bool take_acks(std::size_t link, Nanos now);
  void arm_acks(std::size_t link);
  // Whether a sender entering the link has its window full (no room to send).
  bool waits_for_acks(const Link& L) const {
    for (const auto id : L.entering)
      if (!(room(ctx_.messages[id]) > 0)) return true;
    return false;
  }
  Parts take_parts();
  void give_parts(Parts&& v);
  double entered_by(const Message& m, Nanos now) const;
  // paced_stream.cpp: streamed pieces.
  bool stream(std::size_t link, Nanos now);
  void stream_start(std::size_t link, Piece& p, Nanos now);
  void stream_check(std::size_t link, Nanos now);
  void stream_cut(std::size_t link, Piece&& p, Nanos now);
  void streamed_acks(std::size_t link, Piece& p, Nanos now);

  SimContext& ctx_;
  BurstHost& host_;
  std::vector<Link> links_;  // per topology link
  // Storage kept from call to call: acks_in()'s blocked senders, pieces' part lists given
  // back, the links check_idle() named at this instant.
  std::vector<std::uint32_t> acks_blocked_;
  std::vector<Parts> parts_pool_;
  std::vector<std::size_t> idle_check_;
};

}  // namespace wanlab::sim
