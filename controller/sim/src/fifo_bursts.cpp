// SimOptions::Bursts::fifo (and the burst model factory).
#include <algorithm>

#include "wanlab/sim/burst_model.hpp"
#include "wanlab/sim/paced_link.hpp"
#include "wanlab/workload/execute.hpp"

namespace wanlab::sim {

std::unique_ptr<BurstModel> make_burst_model(SimContext& ctx, BurstHost& host) {
  switch (ctx.opt.bursts) {
    case SimOptions::Bursts::shared: return std::make_unique<SharedBursts>();
    case SimOptions::Bursts::fifo: return std::make_unique<FifoBursts>(ctx);
    case SimOptions::Bursts::paced: return std::make_unique<PacedBursts>(ctx, host);
  }
  return std::make_unique<SharedBursts>();
}

FifoBursts::FifoBursts(SimContext& ctx)
    : ctx_(ctx),
      busy_(ctx.wan.size(), false),
      queue_(ctx.wan.size()),
      queued_bytes_(ctx.wan.size(), 0.0),
      flow_(ctx.wan.size(), kNone) {}

bool FifoBursts::start(std::uint32_t id, const std::vector<FlowNetwork::LinkId>& path, Nanos now, Nanos /*sent_from*/) {
  auto& m = ctx_.messages[id];
  m.burst = true;
  enqueue(id, m.payload * workload::kWireOverhead, &path, now, false);
  return true;
}

void FifoBursts::handle(const Event& event, Nanos now) {
  const auto* e = std::get_if<ev::Retransmit>(&event);
  if (!e) return;
  auto& m = ctx_.messages[e->message];
  const double bytes = m.lost;
  m.lost = 0;
  --m.parts;
  enqueue(e->message, bytes, nullptr, now, /*resent=*/true);
}

// A burst reaches its link's queue: what the queue has no room for is lost and sent again
// after a retransmission timeout (SimOptions::queue_overflow); the rest waits its turn.
// What is sent again (`resent`) comes back in slow start, clocked by its ACKs, and is not
// lost again. `path`: the message's path when it starts at once (the first part), else
// the WAN link alone.
void FifoBursts::enqueue(std::uint32_t id, double bytes, const std::vector<FlowNetwork::LinkId>* path, Nanos now,
                         bool resent) {
  auto& m = ctx_.messages[id];
  const auto link = m.link;
  auto& net = ctx_.net;
  if (ctx_.opt.queue_overflow && !ctx_.exclusive && !resent) {
    double backlog = queued_bytes_[link];
    if (const auto f = flow_[link]; f != kNone && net.active(f)) backlog += net.bytes(f) - net.sent(f, now);
    const double room = std::max(0.0, ctx_.queue_limit_bytes(link) - backlog);
    if (bytes > room + 1) {
      const double lost = bytes - room;
      bytes = room;
      ++ctx_.stats.overflows;
      ctx_.stats.overflow_bytes += lost;
      // Linux's RTO: the smoothed RTT (with the queue's delay) plus its 200 ms floor.
      const double rate = ctx_.wan_rate[link];
      const Nanos queueing = rate > 0 ? static_cast<Nanos>(backlog * 8e9 / rate) : 0;
      const Nanos rto = ctx_.wan_rtt[link] + queueing + 200'000'000;
      m.lost += lost;
      ++m.parts;
      ctx_.events.push(now + rto, ev::Retransmit{id});
    }
  }
  if (bytes <= 0) return;  // all of it lost: only the retransmission is left
  ++m.parts;
  if (busy_[link]) {
    queue_[link].emplace_back(id, bytes);
    queued_bytes_[link] += bytes;
    return;
  }
  start_burst(id, bytes, path, now);
}

// A burst's turn at its link (its connections were free when it queued).
void FifoBursts::start_burst(std::uint32_t id, double bytes, const std::vector<FlowNetwork::LinkId>* path, Nanos now) {
  auto& m = ctx_.messages[id];
  busy_[m.link] = true;
  const double wire = m.payload * workload::kWireOverhead;
  m.flow = ctx_.net.start(path ? *path : std::vector<FlowNetwork::LinkId>{ctx_.wan[m.link]}, bytes,
                          static_cast<double>(ctx_.tp) * ctx_.k, kUnlimited, now);
  ctx_.on_wire(m, now);
  flow_[m.link] = m.flow;
  ctx_.set_owner(m.flow, {false, false, id, m.link, wire > 0 ? m.payload * bytes / wire : 0});
  ctx_.start_acks(m.link, bytes, kUnlimited, now);
}

bool FifoBursts::flow_done(const FlowOwner& owner, Nanos now) {
  auto& m = ctx_.messages[owner.index];
  busy_[m.link] = false;
  flow_[m.link] = kNone;
  if (!queue_[m.link].empty()) {
    const auto [next, bytes] = queue_[m.link].front();
    queue_[m.link].pop_front();
    queued_bytes_[m.link] -= bytes;
    start_burst(next, bytes, nullptr, now);
  }
  // A part of it is still to be sent again: its connections wait with it.
  return --m.parts <= 0;
}

}  // namespace wanlab::sim
