#include "wanlab/sim/collectives.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "wanlab/sim/rails.hpp"
#include "wanlab/workload/execute.hpp"
#include "wanlab/common/ring.hpp"

namespace wanlab::sim {

Collectives::Collectives(SimContext& ctx, std::vector<Place> places) : ctx_(ctx), places_(std::move(places)) {}

std::uint32_t Collectives::enter(std::uint32_t gi, int iteration, int seq, const program::Op& op, Nanos now) {
  const auto key = std::make_tuple(op.ring.front(), iteration, seq);
  auto it = open_.find(key);
  if (it == open_.end()) {
    Collective c;
    for (const int w : op.ring) c.members.push_back(ctx_.group_of(w));
    c.entry.assign(c.members.size(), kNotYet);
    c.iteration = iteration;
    c.steps = 2 * (op.ring.size() - 1);
    all_.push_back(std::move(c));
    it = open_.emplace(key, static_cast<std::uint32_t>(all_.size() - 1)).first;
  }
  const auto ci = it->second;
  auto& c = all_[ci];
  const auto pos = std::find(c.members.begin(), c.members.end(), gi);
  if (pos == c.members.end())
    throw std::invalid_argument(
        fmt::format("simulate: worker {} runs an all-reduce whose ring lacks it", static_cast<int>(gi) * ctx_.tp));
  c.entry[static_cast<std::size_t>(pos - c.members.begin())] = now;
  if (++c.entered < static_cast<int>(c.members.size())) return ci;
  open_.erase(it);
  start_hops(ci, op, now);
  return ci;
}

// Everyone is in: one flow or message per ring hop carrying all of its steps.
void Collectives::start_hops(std::uint32_t ci, const program::Op& op, Nanos now) {
  auto& c = all_[ci];
  auto& net = ctx_.net;
  const auto n = c.members.size();
  const double hop_payload =
      static_cast<double>(c.steps) * static_cast<double>(program::ring_chunk_bytes(op.bytes, n)) * ctx_.tp;
  c.hop_payload = hop_payload;
  Nanos step_delay = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& a = places_[c.members[i]];
    const auto& b = places_[c.members[program::ring_next(i, n)]];
    if (a.node == b.node) continue;
    if (rails_ && rails_->on_rails(c.members[i], c.members[(i + 1) % n])) {
      step_delay = std::max(step_delay, ctx_.lan_delay);
      ++c.hops_left;
      const auto index = static_cast<std::uint32_t>(i);
      if (rails_->admit(c.members[i], arbiter::RailPhase::dp_allreduce, {true, ci, index}, now))
        start_rail_hop(ci, index, now);
      continue;
    }
    if (a.dc == b.dc) {
      step_delay = std::max(step_delay, ctx_.lan_delay);
      if (!ctx_.lan_limited) continue;
      const auto f = net.start({ctx_.node_up[a.node], ctx_.node_down[b.node]}, hop_payload * workload::kWireOverhead,
                               ctx_.tp, kUnlimited, now);
      ctx_.set_owner(f, {true, false, ci, kNoLink, hop_payload});
    } else {
      const auto link = ctx_.link_of[a.dc][b.dc];
      const auto& topo = ctx_.plan.topology;
      if (link == kNoLink)
        throw std::invalid_argument(fmt::format("simulate: lab {} has no WAN link from DC {} to DC {}", topo.name,
                                                topo.dcs[a.dc].name, topo.dcs[b.dc].name));
      step_delay = std::max(step_delay, ctx_.wan_delay[link]);
      if (sender_) {
        Message m;
        m.src = c.members[i];
        m.dst = c.members[program::ring_next(i, n)];
        m.iteration = c.iteration;
        m.payload = hop_payload;
        m.link = link;
        m.ceiling = ctx_.wan_ceiling[link];
        m.collective = ci;
        m.granted = true;  // all-reduce traffic is not windowed
        const auto id = static_cast<std::uint32_t>(ctx_.messages.size());
        ctx_.messages.push_back(m);
        ++c.hops_left;
        sender_->send_hop(id, now);
        continue;
      }
      const double weight = static_cast<double>(ctx_.tp) * ctx_.k;
      const auto f =
          net.start({ctx_.wan[link]}, hop_payload * workload::kWireOverhead, weight, ctx_.wan_ceiling[link], now);
      ctx_.set_owner(f, {true, false, ci, link, hop_payload});
      ctx_.start_acks(link, hop_payload * workload::kWireOverhead,
                      ctx_.wan_ceiling[link] * static_cast<double>(ctx_.tp) * ctx_.k, now);
    }
    ++c.hops_left;
  }
  c.step_delay = step_delay;
  c.last_finish = now;
  if (c.hops_left == 0) ctx_.events.push(now + static_cast<Nanos>(c.steps) * step_delay, ev::CollectiveEnd{ci});
}

void Collectives::start_rail_hop(std::uint32_t ci, std::uint32_t index, Nanos now) {
  const auto& c = all_[ci];
  const auto a = c.members[index];
  const auto b = c.members[(index + 1) % c.members.size()];
  const auto f = ctx_.net.start(rails_->path(a, b), c.hop_payload * workload::kWireOverhead, ctx_.tp, kUnlimited, now);
  FlowOwner o{true, false, ci, kNoLink, c.hop_payload};
  o.rail = rails_->fabric_of(a);
  ctx_.set_owner(f, o);
}

void Collectives::hop_done(std::uint32_t ci, Nanos now) {
  auto& c = all_[ci];
  c.last_finish = std::max(c.last_finish, now);
  if (--c.hops_left == 0)
    ctx_.events.push(c.last_finish + static_cast<Nanos>(c.steps) * c.step_delay, ev::CollectiveEnd{ci});
}

}  // namespace wanlab::sim
