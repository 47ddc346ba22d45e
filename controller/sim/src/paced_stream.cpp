// SimOptions::Bursts::paced, streamed pieces (SimOptions::paced_stream_ns): when every
// message entering a link is past slow start and its window holds all the rest of it (when
// its ACKs come back cannot hold it up), the piece that opens is paced_stream_ns long (or
// ends with a message's last byte), the messages keep their pace through it, and the link
// sends it as it fills: once the link gets to it, one flow sends what is in at the link's
// pace, and from when it has caught up, at the pace the bytes enter (stream_check()). So
// its bytes leave when an exact FIFO would send them; its ACKs come back as plain pieces'
// would (streamed_acks()).
#include <algorithm>
#include <cmath>

#include "wanlab/sim/paced_link.hpp"
#include "wanlab/workload/execute.hpp"

namespace wanlab::sim {

bool PacedBursts::stream(std::size_t link, Nanos now) {
  auto& L = links_[link];
  const auto& opt = ctx_.opt;
  if (opt.paced_stream_ns <= opt.paced_piece_ns || L.from != now) return false;
  Nanos until = piece_boundary(now + opt.paced_stream_ns - opt.paced_piece_ns);
  double pace = 0;  // all of them, bytes per ns
  for (const auto id : L.entering) {
    const auto& m = ctx_.messages[id];
    const auto& c = m.conn->tcp;
    const double r = rate(m);
    const double left = rest(m);
    // (One credited from before now, its ACKs having opened its window then, enters
    // from there: a plain piece.)
    if (m.resending || m.lost > 0 || !(c.cwnd >= c.ssthresh) || !(r > 0) || !(left <= room(m)) ||
        (m.since != kNotYet && m.since < now))
      return false;
    until = std::min(until, now + std::max<Nanos>(1, static_cast<Nanos>(std::ceil(left / r))));
    pace += r;
  }
  if (until - now <= opt.paced_piece_ns) return false;  // no longer than a plain piece
  auto& net = ctx_.net;
  if (opt.queue_overflow) {
    // The queue must not fill within it: what finds the queue full is lost, and only
    // plain pieces meet the queue's limit.
    double backlog = L.queued;
    if (L.server != kNone && net.active(L.server)) backlog -= net.sent(L.server, now);
    const double growth = std::max(0.0, pace - net.link_rate(ctx_.wan[link]) / 8e9) * static_cast<double>(until - now);
    if (backlog + growth > ctx_.queue_limit_bytes(link)) return false;
  }
  Piece p;
  p.open = true;
  p.opened = now;
  for (const auto id : L.entering) {
    auto& m = ctx_.messages[id];
    const double r = rate(m);
    m.stream_rate = r;
    p.bytes += std::min(r * static_cast<double>(until - now), rest(m));
    p.weight += ctx_.weight_of(m);
  }
  // The pace it fills at on average (a message's last byte may come before the end).
  p.stream_pace = p.bytes / static_cast<double>(until - now);
  L.queued += p.bytes;
  L.pieces.push_back(std::move(p));
  L.streaming = true;
  L.next_cut = until;
  ctx_.events.push(until, ev::PacedCut{static_cast<std::uint32_t>(link), ++L.gen});
  serve(link, now);
  return true;
}

// The link gets to the open streamed piece: its flow sends what is in at the link's pace,
// then follows the bytes as they enter.
void PacedBursts::stream_start(std::size_t link, Piece& p, Nanos now) {
  auto& L = links_[link];
  auto& net = ctx_.net;
  if (L.stream_bundle == kNone) L.stream_bundle = net.add_bundle({ctx_.wan[link]});
  p.served_at = now;
  const bool caught = p.stream_pace * static_cast<double>(now - p.opened) < 1;  // nothing in yet
  if (caught) p.caught_at = now;
  L.server =
      net.start_in(L.stream_bundle, p.bytes, p.weight, caught ? p.stream_pace * 8e9 / p.weight : kUnlimited, now);
  ctx_.set_owner(L.server, {false, false, 0, link, p.bytes / workload::kWireOverhead, true});
  reserve_acks(link, caught ? std::min(ctx_.wan_rate[link], p.stream_pace * 8e9) : SimContext::kFullRate, now);
  if (!caught)
    ctx_.events.push(now + ctx_.opt.paced_piece_ns, ev::StreamCheck{static_cast<std::uint32_t>(link), L.gen});
}

// Has the link caught up with the open streamed piece it sends? Then it sends at the pace
// the piece fills; else look again when it would have (at the rates now), or a plain
// piece's length later if it is not faster than the piece fills.
void PacedBursts::stream_check(std::size_t link, Nanos now) {
  auto& L = links_[link];
  auto& net = ctx_.net;
  if (L.pieces.empty() || L.server == kNone) return;
  auto& p = L.pieces.front();
  if (!p.open || p.served_at == kNotYet || p.caught_at != kNotYet) return;
  const double in = p.stream_pace * static_cast<double>(now - p.opened);
  const double out = net.sent(L.server, now);
  if (out >= in - 1) {
    p.caught_at = now;
    net.set_bundle_ceiling(L.stream_bundle, p.stream_pace * 8e9 / p.weight, now);
    reserve_acks(link, std::min(ctx_.wan_rate[link], p.stream_pace * 8e9), now);
    return;
  }
  const double r = net.rate_bps(L.server) / 8e9;
  Nanos at = now + ctx_.opt.paced_piece_ns;
  if (r > p.stream_pace)
    at = std::min(at, now + std::max<Nanos>(1, static_cast<Nanos>(std::ceil((in - out) / (r - p.stream_pace)))));
  ctx_.events.push(at, ev::StreamCheck{static_cast<std::uint32_t>(link), L.gen});
}

// The streamed piece is cut (at its planned end, or sooner): what entered is what it
// holds. Not reached yet: a piece like the others. Being sent: the link sends the rest at
// its own pace (all of it is in). Sent already (the flow ended at this instant): it has
// left.
void PacedBursts::stream_cut(std::size_t link, Piece&& p, Nanos now) {
  auto& L = links_[link];
  auto& net = ctx_.net;
  auto& open = L.pieces.back();
  L.queued += p.bytes - open.bytes;
  const double predicted = open.bytes;
  const bool on_link = open.served_at != kNotYet;
  const bool sent = open.sent;
  p.opened = open.opened;
  p.served_at = open.served_at;
  p.caught_at = open.caught_at;
  p.streamed = true;
  open = std::move(p);
  if (!on_link) return;
  if (sent) {
    // Its flow moved the predicted bytes: the totals count what entered.
    auto& totals = ctx_.totals;
    totals[link].wire_bytes += open.bytes - predicted;
    totals[link].payload_bytes += (open.bytes - predicted) / workload::kWireOverhead;
    if (ctx_.opt.acks && ctx_.reverse[link] != kNoLink)
      totals[ctx_.reverse[link]].wire_bytes += (open.bytes - predicted) * kAckFraction;
    piece_left(link, now);
    serve(link, now);
    check_idle(link);
    return;
  }
  ctx_.owners[L.server].payload = open.bytes / workload::kWireOverhead;
  if (open.bytes - net.sent(L.server, now) > 1) {
    net.set_bundle_ceiling(L.stream_bundle, kUnlimited, now);
    reserve_acks(link, SimContext::kFullRate, now);
  }
  net.set_bytes(L.server, open.bytes, now);
}

// A streamed piece has left: its ACKs come back as those of plain pieces would, what
// entered in each paced_piece_ns a round trip after it left. Each part entered at its pace
// from when the piece opened (until its last byte). A byte left when it entered once the
// link had caught up with the piece; before, at the link's rate from when it got to the
// piece; if the link never caught up, or sent the last bytes after the cut, as late as
// sending the rest by now at the link's rate puts it (an exact FIFO's departures, as for
// plain pieces: piece_left()).
void PacedBursts::streamed_acks(std::size_t link, Piece& p, Nanos now) {
  const double r = ctx_.net.link_rate(ctx_.wan[link]) / 8e9;
  const Nanos rtt = ctx_.wan_rtt[link];
  const auto entered = [&](std::size_t i, Nanos t) {
    return std::min(p.parts[i].second, p.rates[i] * static_cast<double>(t - p.opened));
  };
  double before = 0;        // the piece's bytes in before `from`
  Nanos from_left = kNotYet;  // when the slice before left (its ACKs' end: this one's start)
  for (Nanos from = p.opened; from < p.at;) {
    const Nanos to = std::min(piece_boundary(from), p.at);
    auto parts = take_parts();
    double bytes = 0;
    for (std::size_t i = 0; i < p.parts.size(); ++i) {
      const double b = entered(i, to) - entered(i, from);
      if (b > 0) parts.emplace_back(p.parts[i].first, b);
      bytes += b;
    }
    before += bytes;
    const Nanos behind = now - static_cast<Nanos>(r > 0 ? (p.bytes - before) / r : 0);
    Nanos left = behind;
    if (p.caught_at != kNotYet) {
      left = to >= p.caught_at ? to : std::min(p.caught_at, p.served_at + static_cast<Nanos>(r > 0 ? before / r : 0));
      if (now > p.at) left = std::max(left, behind);
    }
    left = std::max(left, to);
    if (from_left == kNotYet) from_left = left;
    links_[link].fluid_end = std::max(links_[link].fluid_end, left);
    if (parts.empty()) {
      give_parts(std::move(parts));
    } else {
      Nanos at = std::max(now, piece_boundary(left + rtt - 1));
      if (!links_[link].acks.empty()) at = std::max(at, links_[link].acks.back().at);
      add_acks(link, at, to, left + rtt, from_left + rtt, std::move(parts));
    }
    from_left = left;
    from = to;
  }
  give_parts(std::move(p.parts));
}

}  // namespace wanlab::sim
