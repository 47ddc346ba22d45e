// SimOptions::Bursts::paced: pieces and ACKs (paced_link.hpp; streamed pieces:
// paced_stream.cpp).
#include "wanlab/sim/paced_link.hpp"

#include <algorithm>
#include <cmath>

#include "wanlab/workload/execute.hpp"

namespace wanlab::sim {
PacedBursts::PacedBursts(SimContext& ctx, BurstHost& host) : ctx_(ctx), host_(host), links_(ctx.wan.size()) {}

// A message starts entering its link's queue (its connections are its alone now).
bool PacedBursts::start(std::uint32_t id, const std::vector<FlowNetwork::LinkId>& /*path*/, Nanos now,
                        Nanos sent_from) {
  auto& m = ctx_.messages[id];
  m.burst = true;
  m.paced = true;
  m.entered = 0;
  acks_in(m.link, now);  // those of its connections' earlier messages, before it enters
  m.conn->tcp.start(ctx_.window, ctx_.opt.initial_window_bytes, ctx_.wan_rtt[m.link]);
  ctx_.on_wire(m, now);
  // Long pieces: no cut, it enters inside the piece now open, from when its connections
  // were free.
  const bool coarse = long_pieces(links_[m.link]);
  if (!coarse) cut(m.link, now);
  m.since = coarse && sent_from != kNotYet ? sent_from : now;
  enter(id);
  schedule(m.link, now);
  return true;
}

void PacedBursts::handle(const Event& event, Nanos now) {
  switch (event.index()) {
    case variant_index<ev::PacedCut>(): {
      const auto& e = std::get<ev::PacedCut>(event);
      if (e.gen == links_[e.link].gen) {
        links_[e.link].next_cut = kNotYet;
        cut(e.link, now);
        schedule(e.link, now);
      }
      break;
    }
    case variant_index<ev::PacedResend>(): resend(std::get<ev::PacedResend>(event).message, now); break;
    case variant_index<ev::PacedAck>(): ack_event(std::get<ev::PacedAck>(event).link, now); break;
    case variant_index<ev::StreamCheck>(): {
      const auto& c = std::get<ev::StreamCheck>(event);
      if (c.gen == links_[c.link].gen) stream_check(c.link, now);
      break;
    }
    default: break;
  }
}

// The sender has found out: what was lost is no longer in flight, and enters again.
void PacedBursts::resend(std::uint32_t id, Nanos now) {
  auto& m = ctx_.messages[id];
  acks_in(m.link, now);
  if (!long_pieces(links_[m.link])) cut(m.link, now);
  m.conn->tcp.inflight -= m.lost / ctx_.weight_of(m);
  m.lost = 0;
  m.first_loss = kNotYet;
  m.entry_end = kNotYet;
  m.resending = true;
  if (!m.paused && !m.entering) {  // else when its window opens again
    m.since = now;
    enter(id);
  }
  schedule(m.link, now);
}

// The piece on the link has left (or, streamed and open, its flow has sent all that was in).
bool PacedBursts::flow_done(const FlowOwner& owner, Nanos now) {
  auto& L = links_[owner.link];
  L.server = kNone;
  if (L.pieces.front().open) {  // streamed and sent as it filled: its cut is now
    L.pieces.front().sent = true;
    return false;
  }
  piece_left(owner.link, now);
  serve(owner.link, now);
  check_idle(owner.link);
  return false;
}

void PacedBursts::pause(std::uint32_t id, Nanos now) {
  auto& m = ctx_.messages[id];
  if (m.entry_end != kNotYet) return;
  cut(m.link, now);
  m.paused = true;
  if (m.entering) {
    m.entering = false;
    std::erase(links_[m.link].entering, id);
  }
  schedule(m.link, now);
}

void PacedBursts::resume(std::uint32_t id, Nanos now) {
  auto& m = ctx_.messages[id];
  cut(m.link, now);
  m.paused = false;
  if (m.entry_end == kNotYet) enter(id);
  schedule(m.link, now);
}

double PacedBursts::entered(std::uint32_t id, Nanos now) {
  const auto& m = ctx_.messages[id];
  if (acks_in(m.link, now)) schedule(m.link, now);
  return entered_by(m, now);
}

void PacedBursts::end_of_pass(Nanos now) {
  for (const auto link : idle_check_)
    if (links_[link].server == kNone && links_[link].pieces.empty()) reserve_acks(link, 0, now);
  idle_check_.clear();
}

void PacedBursts::finish(Nanos now) {
  for (std::size_t link = 0; link < links_.size(); ++link) acks_in(link, now);
}

// The message enters its link's queue from the next cut on (a paused one is not in the
// list: the cuts visit only the messages that can send).
void PacedBursts::enter(std::uint32_t id) {
  auto& m = ctx_.messages[id];
  if (m.entering) return;
  m.entering = true;
  links_[m.link].entering.push_back(id);
}

// What the messages entering `link`'s queue sent since the last cut becomes a piece.
void PacedBursts::cut(std::size_t link, Nanos now) {
  auto& L = links_[link];
  acks_in(link, now);
  const Nanos from = L.from;
  const Nanos dt = now - from;
  L.from = now;
  const bool streamed = L.streaming;  // the open piece is on the link already
  L.streaming = false;
  if (!streamed && (L.entering.empty() || dt <= 0)) return;
  const bool coarse = long_pieces(L);
  // Messages whose last byte entered, when (long pieces: its own instant, else now).
  std::vector<std::pair<std::uint32_t, Nanos>> in;
  Piece p = take_piece(link, from, now, streamed, coarse, in);
  if (p.bytes <= 0 && in.empty() && !streamed) {
    give_parts(std::move(p.parts));
    return;
  }
  if (ctx_.opt.queue_overflow && p.bytes > 0 && !streamed)  // (a streamed piece: the queue was empty)
    drop_tail(link, p, now);
  for (const auto& [id, at] : in) {
    ctx_.messages[id].entering = false;
    ctx_.messages[id].entry_end = now;
  }
  std::erase_if(L.entering, [&](std::uint32_t id) { return !ctx_.messages[id].entering; });
  // One with bytes lost waits for its resend (ev::PacedResend); the others are in.
  std::erase_if(in, [&](const auto& e) { return ctx_.messages[e.first].lost > 0; });
  for (const auto& [id, at] : in) p.last.push_back(id);
  if (streamed) {
    stream_cut(link, std::move(p), now);
  } else {
    L.queued += p.bytes;
    L.pieces.push_back(std::move(p));
    serve(link, now);
  }
  // A message queued behind one that has entered goes next on its connections (with
  // long pieces, from when the last byte went in).
  for (const auto& [id, at] : in) host_.release_connections(id, now, coarse ? at : -1);
}

// The bytes each message entering the link sent from `from` (or its own start) to `now`.
PacedBursts::Piece PacedBursts::take_piece(std::size_t link, Nanos from, Nanos now, bool streamed, bool coarse,
                              std::vector<std::pair<std::uint32_t, Nanos>>& in) {
  auto& L = links_[link];
  Piece p;
  p.at = now;
  p.parts = take_parts();
  Nanos first_in = now;  // when its first bytes began to enter
  for (const auto id : L.entering) {
    auto& m = ctx_.messages[id];
    const double left = rest(m);
    const Nanos start = m.since != kNotYet ? m.since : from;
    m.since = kNotYet;
    const double pace = rate(m);
    m.stream_rate = -1;
    double add = std::min(pace * static_cast<double>(now - start), room(m));
    if (add >= left * (1 - 1e-12)) {
      add = left;
      in.emplace_back(id, coarse && pace > 0
                              ? std::clamp(start + static_cast<Nanos>(std::ceil(left / pace)), start, now)
                              : now);
    }
    if (!(add > 0)) continue;
    first_in = std::min(first_in, start);
    m.entered += add;
    m.conn->tcp.inflight += add / ctx_.weight_of(m);
    p.bytes += add;
    p.weight += ctx_.weight_of(m);
    p.parts.emplace_back(id, add);
    if (streamed) p.rates.push_back(pace);
  }
  // Its bytes began to enter at the first start among its parts (a sender held up by a
  // full window goes on from its ACKs, after the cut before).
  p.opened = p.bytes > 0 ? first_in : from;
  return p;
}

// Drop-tail: what the queue has no room for is lost, from each message in proportion to
// what it sent. What is sent again is not lost again (as with Bursts::fifo).
void PacedBursts::drop_tail(std::size_t link, Piece& p, Nanos now) {
  auto& L = links_[link];
  auto& net = ctx_.net;
  double backlog = L.queued;
  if (L.server != kNone && net.active(L.server)) backlog -= net.sent(L.server, now);
  const double space = std::max(0.0, ctx_.queue_limit_bytes(link) - backlog);
  double droppable = 0;
  for (const auto& [id, add] : p.parts)
    if (!ctx_.messages[id].resending) droppable += add;
  if (!(p.bytes > space + 1 && droppable > 0)) return;
  const double f = std::min(1.0, (p.bytes - space) / droppable);
  for (auto& [id, add] : p.parts) {
    auto& m = ctx_.messages[id];
    if (m.resending) continue;
    const double lost = add * f;
    if (!(lost > 0)) continue;
    if (m.first_loss == kNotYet) {
      // Its ACKs tell the sender, a round trip after the loss (the full queue's delay
      // included), and it sends what was lost by then again (the lost bytes stay in flight
      // until then, as for TCP; waiting for the message's last byte instead could wait for
      // ever, its window full of lost bytes).
      m.first_loss = now;
      ++ctx_.stats.overflows;
      const double r = ctx_.wan_rate[link];
      const Nanos queueing = r > 0 ? static_cast<Nanos>(ctx_.queue_limit_bytes(link) * 8e9 / r) : 0;
      ctx_.events.push(now + ctx_.wan_rtt[link] + queueing, ev::PacedResend{id});
    }
    auto& c = m.conn->tcp;
    c.on_loss(now);
    m.lost += lost;
    m.entered -= lost;
    c.resent += lost / ctx_.weight_of(m);
    add -= lost;
    p.bytes -= lost;
    ctx_.stats.overflow_bytes += lost;
  }
  p.bytes = std::max(0.0, p.bytes);
}

// The next cut: the next piece boundary, or sooner a message's last byte in (long pieces:
// a piece's length from now, and a cut once scheduled stands). (A window that fills before
// the boundary is not cut there: the piece just holds no more of that message.)
void PacedBursts::schedule(std::size_t link, Nanos now) {
  auto& L = links_[link];
  acks_in(link, now);
  if (L.streaming) return;  // its cut is planned; whatever must come sooner cuts first
  arm_acks(link);
  const bool coarse = long_pieces(L);
  if (coarse && L.next_cut != kNotYet) return;  // long pieces: on their own clock
  // A cut visits every message entering the link: with many at once (thousands of GPUs
  // under fair), pieces get longer, paced_piece_ns_per_message each, so the work per
  // simulated second stays bounded (long_pieces()).
  const Nanos len = piece_length(L);
  Nanos next = coarse ? now + len : piece_boundary(now);
  bool moving = false;  // none moving (paused, window full): the next ACK or grant schedules
  for (const auto id : L.entering) {
    const auto& m = ctx_.messages[id];
    const double space = room(m);
    const double pace = rate(m);
    if (!(space > 0) || !(pace > 0)) continue;
    moving = true;
    if (coarse) break;  // long pieces end on their clock, not at a message's last byte
    const double left = rest(m);
    if (left <= space) next = std::min(next, now + std::max<Nanos>(1, static_cast<Nanos>(std::ceil(left / pace))));
  }
  if (!moving) return;
  if (!coarse && stream(link, now)) return;
  L.next_cut = next;
  ctx_.events.push(next, ev::PacedCut{static_cast<std::uint32_t>(link), ++L.gen});
}

// The link sends its queue's first piece when it has none on the wire.
void PacedBursts::serve(std::size_t link, Nanos now) {
  auto& L = links_[link];
  while (L.server == kNone && !L.pieces.empty()) {
    auto& p = L.pieces.front();
    if (p.open) {
      if (p.served_at == kNotYet) stream_start(link, p, now);
      break;
    }
    if (!(p.bytes > 0)) {
      piece_left(link, now);
      continue;
    }
    if (L.piece_bundle == kNone) L.piece_bundle = ctx_.net.add_bundle({ctx_.wan[link]});
    L.server = ctx_.net.start_in(L.piece_bundle, p.bytes, p.weight, kUnlimited, now);
    p.served_at = now;
    ctx_.set_owner(L.server, {false, false, 0, link, p.bytes / workload::kWireOverhead, true});
    reserve_acks(link, SimContext::kFullRate, now);
  }
}

// A link whose queue may be empty: its ACKs' share goes back when settle() is done with
// the instant, if it has nothing to send then (a streamed piece cut now is followed by the
// next at once).
void PacedBursts::check_idle(std::size_t link) {
  if (ctx_.opt.acks && ctx_.acks_for[link] != 0) idle_check_.push_back(link);
}

// While a paced link sends its queue, the ACKs of what it sends take kAckFraction of the
// rate it sends at on the reverse link: its own rate (kFullRate; the rate a piece's own ACK
// flow would get there), or a streamed piece's pace. Its pieces follow each other without
// an ACK flow each; their bytes count when each piece has left. 0: idle.
void PacedBursts::reserve_acks(std::size_t link, double data_bps, Nanos now) {
  if (!ctx_.opt.acks || ctx_.reverse[link] == kNoLink || ctx_.acks_for[link] == data_bps) return;
  ctx_.acks_for[link] = data_bps;
  ctx_.apply_rate(ctx_.reverse[link], now);
}

// The first piece is off the link: the messages whose last bytes it held are delivered a
// one-way delay later, and its ACKs reach the senders a round trip after its bytes left.
//
// When did they leave? The link sent the piece once it was whole (cut), but an exact FIFO
// sends each byte as soon as the bytes before it are out, the piece's first ones while the
// rest still enter: its last byte leaves at the cut, or once the link has sent what was
// ahead of the piece (the last piece's departure, or the piece's start) and the piece
// itself, at the rate it got. Its ACKs go from then. (From the flow's own end, every ACK of
// a sender below the link's rate would come a piece's transmission late and then on the
// next piece boundary: RTT samples up to a piece long, and paces that slow.)
void PacedBursts::piece_left(std::size_t link, Nanos now) {
  auto& L = links_[link];
  auto p = std::move(L.pieces.front());
  L.pieces.pop_front();
  L.queued = L.pieces.empty() ? 0.0 : L.queued - p.bytes;
  Nanos dep = now;  // when an exact FIFO would have sent its last byte
  if (!p.streamed && p.served_at != kNotYet) {
    dep = std::max(p.at, std::max(p.opened, L.fluid_end) + (now - p.served_at));
    L.fluid_end = dep;
  }
  for (const auto id : p.last) {
    const auto& m = ctx_.messages[id];
    if (m.collective == kNone) ctx_.wire[m.transfer].last = now;
    ctx_.events.push(now + m.delay, ev::Deliver{id});
  }
  if (p.parts.empty()) {
    give_parts(std::move(p.parts));
    return;
  }
  if (p.streamed) {
    streamed_acks(link, p, now);
    return;
  }
  // At the next piece boundary after a round trip (ACKs handled a piece at a time, like
  // everything else here: at most paced_piece_ns late; the RTT sample is the round trip
  // itself).
  // (Not before now: with pieces longer than the round trip, the bytes' ACKs can be back
  // before the link is done with the piece in the model; they are taken in from now.)
  const Nanos took = p.served_at != kNotYet ? now - p.served_at : 0;  // the link sent it over this long
  add_acks(link, std::max(now, piece_boundary(dep + ctx_.wan_rtt[link] - 1)), p.at, dep + ctx_.wan_rtt[link],
           dep - took + ctx_.wan_rtt[link], std::move(p.parts));
}

void PacedBursts::add_acks(std::size_t link, Nanos at, Nanos sent, Nanos back, Nanos first_back, Parts&& parts) {
  auto& L = links_[link];
  L.acks.push_back({at, sent, back, first_back, std::move(parts)});
  // (Behind others: the first one's event, if it needs one, is planned already.)
  if (!L.streaming && L.acks.size() == 1) arm_acks(link);
}

// ACKs in (ev::PacedAck): a sender whose window was full goes on from when its ACKs came,
// at its pace; with one waiting, the next cut is planned again with the new paces.
//
// Each batch of ACKs has an event of its own, but not while the link sends a streamed
// piece (stream()): its senders keep their pace and have room for all they send, so the
// batches are taken in, each at its own instant, at the piece's cut (or when the link's
// senders are looked at before: a plan for the next cut, the arbiter's sample).
void PacedBursts::ack_event(std::size_t link, Nanos now) {
  auto& L = links_[link];
  if (L.armed <= now) L.armed = kNotYet;
  const bool waiting = waits_for_acks(L);
  acks_in(link, now);
  if (waiting) schedule(link, now);
  if (!L.streaming) arm_acks(link);
}

// The ACK batches due by `now`, each at its own instant: less in flight, an RTT sample, the
// window grows (TcpWindow::on_ack), and the senders may go on. True if a sender whose
// window was full may go on (from then: `since`). (acks_in() in the header: whether one is
// due at all, inline, as it mostly is not.)
bool PacedBursts::take_acks(std::size_t link, Nanos now) {
  auto& L = links_[link];
  // Only a sender whose window was full needs a cut scheduled; the others' new pace
  // applies from the next one (at most a piece later).
  auto& blocked = acks_blocked_;
  blocked.clear();
  for (const auto id : L.entering)
    if (!(room(ctx_.messages[id]) > 0)) blocked.push_back(id);
  bool freed = false;
  while (!L.acks.empty() && L.acks.front().at <= now) {
    auto a = std::move(L.acks.front());
    L.acks.pop_front();
    for (const auto& [id, bytes] : a.parts) {
      const auto& m = ctx_.messages[id];
      m.conn->tcp.on_ack(bytes / ctx_.weight_of(m), a.at, a.sent, a.back, a.first_back);
    }
    for (auto& id : blocked)
      if (id != kNone && room(ctx_.messages[id]) > 0) {
        ctx_.messages[id].since = a.at;
        id = kNone;
        freed = true;
      }
    give_parts(std::move(a.parts));
  }
  return freed;
}

// The first batch of ACKs still to come gets its event when a sender entering the link
// waits for it (its window full). The others need none: nothing reads a window before its
// link's due ACKs are taken in (acks_in(), each batch at its own instant, first thing in a
// cut, a plan for the next cut, a sample for the arbiter, a message that starts or comes
// back), and a sender with room keeps its pace until the next cut.
void PacedBursts::arm_acks(std::size_t link) {
  auto& L = links_[link];
  if (L.acks.empty() || L.armed == L.acks.front().at || !waits_for_acks(L)) return;
  L.armed = L.acks.front().at;
  ctx_.events.push(L.armed, ev::PacedAck{static_cast<std::uint32_t>(link)});
}

// A piece's list of parts, from those given back (a paced run makes one per piece).
PacedBursts::Parts PacedBursts::take_parts() {
  if (parts_pool_.empty()) return {};
  auto v = std::move(parts_pool_.back());
  parts_pool_.pop_back();
  return v;
}

void PacedBursts::give_parts(Parts&& v) {
  v.clear();
  parts_pool_.push_back(std::move(v));
}

// Bytes of a paced message in its link's queue (or through it) by `now`.
double PacedBursts::entered_by(const Message& m, Nanos now) const {
  if (m.entry_end != kNotYet || m.paused) return m.entered;
  const auto& L = links_[m.link];
  const Nanos start = m.since != kNotYet ? m.since : L.from;
  const double more = std::min(rate(m) * static_cast<double>(std::max<Nanos>(0, now - start)), room(m));
  return m.entered + more;
}

}  // namespace wanlab::sim
