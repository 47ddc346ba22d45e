#include "wanlab/sim/flow_network.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace wanlab::sim {

namespace {
constexpr double kBytesPerNsPerBps = 1.0 / 8e9;
// Two levels within this relative distance are the same level (equal shares computed in
// different orders differ in the last bits).
constexpr double kSameLevel = 1e-12;
// A flow within this fraction of the bundle's virtual time of its mark is done (rounding in
// rate x time): the finish time is rounded up to a whole ns, so it is normally past it.
constexpr double kDoneSlack = 1e-12;
}  // namespace

FlowNetwork::LinkId FlowNetwork::add_link(double rate_bps) {
  if (!(rate_bps >= 0)) throw std::invalid_argument(fmt::format("flow network: link rate {} bit/s", rate_bps));
  links_.push_back(Link{rate_bps * kBytesPerNsPerBps, {}, 0, 0, 0});
  return static_cast<LinkId>(links_.size() - 1);
}

void FlowNetwork::set_rate(LinkId link, double rate_bps, Nanos /*now*/) {
  if (!(rate_bps >= 0)) throw std::invalid_argument(fmt::format("flow network: link rate {} bit/s", rate_bps));
  auto& l = links_.at(link);
  l.capacity = rate_bps * kBytesPerNsPerBps;
  // Every bundle on it fills again, an empty one too (it keeps the rate of its last
  // filling until a flow starts on it).
  for (const auto b : l.bundles) {
    bundles_[b].refill = true;
    if (bundles_[b].weight > 0) touch(b);
  }
}

double FlowNetwork::link_rate(LinkId link) const {
  return links_.at(link).capacity / kBytesPerNsPerBps;
}

std::uint32_t FlowNetwork::bundle_for(const std::vector<LinkId>& path, double ceiling) {
  const auto key = std::make_pair(path, ceiling);
  if (const auto it = bundle_of_.find(key); it != bundle_of_.end()) return it->second;
  const auto id = add_bundle(path);
  bundles_[id].ceiling = ceiling;
  bundle_of_.emplace(key, id);
  return id;
}

void FlowNetwork::catch_up(Bundle& b, Nanos now) {
  if (now > b.v_at && b.rate > 0 && std::isfinite(b.rate)) b.v += b.rate * static_cast<double>(now - b.v_at);
  b.v_at = std::max(b.v_at, now);
}

void FlowNetwork::touch(std::uint32_t bundle) {
  dirty_.push_back(bundle);
}

FlowNetwork::FlowId FlowNetwork::start(const std::vector<LinkId>& path, double bytes, double weight, double ceiling_bps,
                                       Nanos now) {
  if (!(bytes >= 0) || !(weight > 0) || !(ceiling_bps >= 0))
    throw std::invalid_argument(
        fmt::format("flow network: flow of {} bytes, weight {}, ceiling {} bit/s", bytes, weight, ceiling_bps));
  return start_on(bundle_for(path, ceiling_bps * kBytesPerNsPerBps), bytes, weight, now);
}

std::uint32_t FlowNetwork::add_bundle(const std::vector<LinkId>& path) {
  for (const auto l : path)
    if (l >= links_.size()) throw std::invalid_argument(fmt::format("flow network: no link {}", l));
  const auto id = static_cast<std::uint32_t>(bundles_.size());
  bundles_.emplace_back();
  bundles_.back().links = path;
  for (const auto l : path) links_[l].bundles.push_back(id);
  return id;
}

FlowNetwork::FlowId FlowNetwork::start_in(std::uint32_t bundle, double bytes, double weight, double ceiling_bps,
                                          Nanos now) {
  if (!(bytes >= 0) || !(weight > 0) || !(ceiling_bps >= 0) || bundle >= bundles_.size())
    throw std::invalid_argument(fmt::format("flow network: flow of {} bytes, weight {}, ceiling {} bit/s in bundle {}",
                                            bytes, weight, ceiling_bps, bundle));
  auto& b = bundles_[bundle];
  if (b.ceiling != ceiling_bps * kBytesPerNsPerBps) {
    drop_stale_top(b);
    if (!b.heap.empty())
      throw std::invalid_argument(fmt::format("flow network: bundle {} has flows: its ceiling cannot change", bundle));
    set_bundle_ceiling(bundle, ceiling_bps, now);
  }
  return start_on(bundle, bytes, weight, now);
}

FlowNetwork::FlowId FlowNetwork::start_on(std::uint32_t bi, double bytes, double weight, Nanos now) {
  auto& b = bundles_[bi];
  catch_up(b, now);
  FlowId id;
  if (free_.empty()) {
    id = static_cast<FlowId>(flows_.size());
    flows_.emplace_back();
  } else {
    id = free_.back();
    free_.pop_back();
  }
  auto& f = flows_[id];
  f = Flow{.gen = f.gen + 1};  // a new generation: heap entries of the id's last flow are stale
  f.bundle = bi;
  f.weight = weight;
  f.bytes = bytes;
  f.start_v = b.v;
  f.finish_v = b.v + bytes / weight;
  f.active = true;
  b.heap.push({f.finish_v, id, f.gen});
  b.weight += weight;
  ++active_;
  ++stats_.flows;
  touch(bi);
  return id;
}

void FlowNetwork::set_ceiling(FlowId flow, double ceiling_bps, Nanos now) {
  if (!(ceiling_bps >= 0)) throw std::invalid_argument(fmt::format("flow network: ceiling {} bit/s", ceiling_bps));
  auto& f = flows_.at(flow);
  if (!f.active) return;
  const double ceiling = ceiling_bps * kBytesPerNsPerBps;
  auto& old = bundles_[f.bundle];
  if (old.ceiling == ceiling) return;
  catch_up(old, now);
  const double sent_now = std::min(f.bytes, f.start_sent + (old.v - f.start_v) * f.weight);
  old.weight = std::max(0.0, old.weight - f.weight);
  old.refill = true;
  touch(f.bundle);
  const auto path = old.links;  // bundle_for may grow bundles_
  const auto bi = bundle_for(path, ceiling);
  auto& b = bundles_[bi];
  catch_up(b, now);
  ++f.gen;
  f.bundle = bi;
  f.start_sent = sent_now;
  f.start_v = b.v;
  f.finish_v = b.v + (f.bytes - sent_now) / f.weight;
  b.heap.push({f.finish_v, flow, f.gen});
  b.weight += f.weight;
  touch(bi);
}

void FlowNetwork::set_bundle_ceiling(std::uint32_t bundle, double ceiling_bps, Nanos now) {
  if (!(ceiling_bps >= 0) || bundle >= bundles_.size())
    throw std::invalid_argument(fmt::format("flow network: ceiling {} bit/s for bundle {}", ceiling_bps, bundle));
  auto& b = bundles_[bundle];
  const double ceiling = ceiling_bps * kBytesPerNsPerBps;
  if (b.ceiling == ceiling) return;
  catch_up(b, now);
  b.ceiling = ceiling;
  b.refill = true;
  touch(bundle);
}

void FlowNetwork::set_bytes(FlowId flow, double bytes, Nanos now) {
  auto& f = flows_.at(flow);
  if (!(bytes >= 0)) throw std::invalid_argument(fmt::format("flow network: flow {} of {} bytes", flow, bytes));
  if (!f.active) return;
  auto& b = bundles_[f.bundle];
  catch_up(b, now);
  const double sent_now = std::min(f.bytes, f.start_sent + (b.v - f.start_v) * f.weight);
  f.bytes = std::max(bytes, sent_now);
  ++f.gen;
  f.finish_v = f.start_v + (f.bytes - f.start_sent) / f.weight;
  b.heap.push({f.finish_v, flow, f.gen});
  touch(f.bundle);  // same weight: update() only plans its next finish again
}

void FlowNetwork::release(FlowId flow) {
  auto& f = flows_.at(flow);
  if (f.active) throw std::invalid_argument(fmt::format("flow network: flow {} released while active", flow));
  if (f.released) throw std::invalid_argument(fmt::format("flow network: flow {} released twice", flow));
  f.released = true;
  free_.push_back(flow);
}

double FlowNetwork::sent(FlowId flow, Nanos now) const {
  const auto& f = flows_.at(flow);
  if (!f.active) return f.bytes;
  const auto& b = bundles_[f.bundle];
  double v = b.v;
  if (now > b.v_at && b.rate > 0) {
    if (!std::isfinite(b.rate)) return f.bytes;
    v += b.rate * static_cast<double>(now - b.v_at);
  }
  return std::clamp(f.start_sent + (v - f.start_v) * f.weight, 0.0, f.bytes);
}

double FlowNetwork::rate_bps(FlowId flow) const {
  const auto& f = flows_.at(flow);
  if (!f.active) return 0;
  return bundles_[f.bundle].rate * f.weight / kBytesPerNsPerBps;
}

void FlowNetwork::drop_stale_top(Bundle& b) {
  while (!b.heap.empty()) {
    const auto& top = b.heap.top();
    const auto& f = flows_[top.flow];
    if (f.active && f.gen == top.gen && &bundles_[f.bundle] == &b) return;
    b.heap.pop();
  }
}

void FlowNetwork::schedule(std::uint32_t bi, Nanos now) {
  auto& b = bundles_[bi];
  drop_stale_top(b);
  if (b.heap.empty()) b.weight = 0;  // no rounding residue left behind
  if (b.heap.empty() || !(b.rate > 0)) {
    finishes_.erase(bi);
    return;
  }
  Nanos at = now;
  if (std::isfinite(b.rate)) {
    const double left = (b.heap.top().finish_v - b.v) / b.rate;
    at = now + std::max<Nanos>(0, static_cast<Nanos>(std::ceil(left)));
  }
  finishes_.set(bi, at);
}

void FlowNetwork::update(Nanos now) {
  if (dirty_.empty()) return;
  const auto mark = ++update_mark_;
  auto& comp = comp_;
  auto& comp_links = comp_links_;
  auto& stack = stack_;
  for (const auto seed : dirty_) {
    if (bundles_[seed].mark == mark) continue;
    // The connected part of the network this change touches.
    comp.clear();
    comp_links.clear();
    bundles_[seed].mark = mark;
    stack.assign(1, seed);
    while (!stack.empty()) {
      const auto bi = stack.back();
      stack.pop_back();
      comp.push_back(bi);
      for (const auto li : bundles_[bi].links) {
        auto& l = links_[li];
        if (l.mark == mark) continue;
        l.mark = mark;
        comp_links.push_back(li);
        for (const auto other : l.bundles) {
          auto& ob = bundles_[other];
          // (An emptied one comes along too: its share goes back to the others.)
          if (ob.mark != mark && (ob.weight > 0 || ob.weight != ob.filled_weight || ob.refill)) {
            ob.mark = mark;
            stack.push_back(other);
          }
        }
      }
    }
    // Flows that ended and flows that began since the last filling, on the same bundles
    // with the same connections in all (one piece of a queue followed by the next): every
    // bundle's weight is what the last filling saw, so the rates stand and only the next
    // finishes move.
    if (std::none_of(comp.begin(), comp.end(), [&](std::uint32_t bi) {
          const auto& b = bundles_[bi];
          return b.refill || b.weight != b.filled_weight;
        })) {
      ++stats_.unchanged;
      for (const auto bi : comp) {
        catch_up(bundles_[bi], now);
        schedule(bi, now);
      }
      continue;
    }
    if (comp.size() == 1) {
      fill_one(comp.front(), now);
      continue;
    }
    fill(now);
  }
  dirty_.clear();
}

void FlowNetwork::fill(Nanos now) {
  const auto& comp = comp_;
  const auto& comp_links = comp_links_;
  ++stats_.updates;
  stats_.bundles_filled += comp.size();

  // Progressive filling over the component's bundles.
  for (const auto li : comp_links) {
    links_[li].left = links_[li].capacity;
    links_[li].unfrozen = 0;
  }
  auto& open = open_;
  open.clear();
  for (const auto bi : comp) {
    auto& b = bundles_[bi];
    if (!begin_filling(b, now)) continue;
    open.push_back(bi);
    for (const auto li : b.links) links_[li].unfrozen += b.weight;
  }
  while (!open.empty()) {
    double link_level = kUnlimited;
    for (const auto li : comp_links) {
      const auto& l = links_[li];
      if (l.unfrozen > 0) link_level = std::min(link_level, std::max(0.0, l.left) / l.unfrozen);
    }
    double ceiling_level = kUnlimited;
    for (const auto bi : open) ceiling_level = std::min(ceiling_level, bundles_[bi].ceiling);
    const bool by_ceiling = ceiling_level <= link_level;
    const double level = by_ceiling ? ceiling_level : link_level;
    const double cut = std::isfinite(level) ? level * (1 + kSameLevel) : kUnlimited;
    for (const auto bi : open) {
      auto& b = bundles_[bi];
      bool freeze = !std::isfinite(level);
      if (!freeze && by_ceiling) freeze = b.ceiling <= cut;
      if (!freeze && !by_ceiling)
        for (const auto li : b.links) {
          const auto& l = links_[li];
          if (l.unfrozen > 0 && std::max(0.0, l.left) / l.unfrozen <= cut) {
            freeze = true;
            break;
          }
        }
      if (freeze) {
        b.frozen = true;
        b.rate = level;
      }
    }
    // Take the frozen ones' shares off their links (after deciding, so that one pass
    // freezes every bundle at this level).
    for (const auto bi : open) {
      const auto& b = bundles_[bi];
      if (!b.frozen) continue;
      for (const auto li : b.links) {
        auto& l = links_[li];
        if (std::isfinite(l.left)) l.left -= b.rate * b.weight;
        l.unfrozen -= b.weight;
        if (l.unfrozen < 1e-9) l.unfrozen = 0;
      }
    }
    std::erase_if(open, [&](std::uint32_t bi) { return bundles_[bi].frozen; });
  }
  for (const auto bi : comp) schedule(bi, now);
}

bool FlowNetwork::begin_filling(Bundle& b, Nanos now) {
  catch_up(b, now);
  b.filled_weight = b.weight;
  b.refill = false;
  b.rate = 0;
  b.frozen = b.weight <= 0;
  return !b.frozen;
}

void FlowNetwork::fill_one(std::uint32_t bi, Nanos now) {
  // fill() for a bundle alone on its links (a paced link's piece, most of the time): the
  // tightest of its links' capacity over its connections, or its ceiling if no higher.
  ++stats_.updates;
  ++stats_.bundles_filled;
  auto& b = bundles_[bi];
  if (begin_filling(b, now)) {
    double link_level = kUnlimited;
    for (const auto li : b.links) link_level = std::min(link_level, std::max(0.0, links_[li].capacity) / b.weight);
    b.rate = b.ceiling <= link_level ? b.ceiling : link_level;
    b.frozen = true;
  }
  schedule(bi, now);
}

std::vector<FlowNetwork::FlowId> FlowNetwork::take_finished(Nanos now) {
  std::vector<FlowId> out;
  take_finished(now, out);
  return out;
}

void FlowNetwork::take_finished(Nanos now, std::vector<FlowId>& out) {
  out.clear();
  while (!finishes_.empty() && finishes_.top_key() <= now) {
    const std::uint32_t bundle = finishes_.pop();  // this finish is consumed; update() plans the next
    auto& b = bundles_[bundle];
    catch_up(b, now);
    const bool all = !std::isfinite(b.rate);
    for (;;) {
      drop_stale_top(b);
      if (b.heap.empty()) break;
      const auto e = b.heap.top();
      if (!all && e.finish_v > b.v + kDoneSlack * std::max(1.0, std::abs(b.v))) break;
      b.heap.pop();
      auto& f = flows_[e.flow];
      f.active = false;
      b.weight = std::max(0.0, b.weight - f.weight);
      --active_;
      out.push_back(e.flow);
    }
    touch(bundle);
  }
}

}  // namespace wanlab::sim
