#include "wanlab/bubbletea/dispatcher.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "wanlab/workload/metrics.hpp"

namespace wanlab::bubbletea {
namespace {

constexpr Ns kForever = std::numeric_limits<Ns>::max() / 4;
// Reservations that ended this long ago cannot matter to a new placement any more.
constexpr Ns kKeepReservations = 1'000'000'000;

}  // namespace

std::vector<Gpu> dispatcher_gpus(const workload::PrefillPlan& p, const core::Topology& topo) {
  std::vector<Gpu> out;
  for (const auto& g : p.gpus) {
    Ns lead = kControlLeadNs;
    if (g.dc != p.loadgen_dc)
      if (const auto* l = topo.find_link(p.loadgen_dc, g.dc)) lead += l->params.delay.count();
    out.push_back({g.effective_flops, lead, g.worker < 0});
  }
  return out;
}

Dispatcher::Dispatcher(std::vector<Gpu> gpus, Options options) : options_(options) {
  for (auto& g : gpus) {
    GpuState s{g, {}, {}, {}};
    if (g.dedicated) s.predicted.push_back({0, kForever});
    gpus_.push_back(std::move(s));
    bounds_.push_back({g.effective_flops, g.lead_ns, 0, 0});
  }
}

void Dispatcher::predict(int gpu, std::vector<Interval> bubbles) {
  auto& g = gpus_.at(static_cast<std::size_t>(gpu));
  if (g.gpu.dedicated) return;
  std::erase_if(bubbles, [&](const Interval& b) { return b.end - b.start < options_.min_bubble_ns; });
  std::sort(bubbles.begin(), bubbles.end(), [](const Interval& a, const Interval& b) { return a.start < b.start; });
  // Disjoint: merge overlaps (waits of one GPU never overlap, but be safe with input).
  std::vector<Interval> merged;
  for (const auto& b : bubbles) {
    if (!merged.empty() && b.start <= merged.back().end)
      merged.back().end = std::max(merged.back().end, b.end);
    else
      merged.push_back(b);
  }
  g.predicted = std::move(merged);
  bounds_[static_cast<std::size_t>(gpu)].free_from = 0;
}

void Dispatcher::learn(int gpu, Ns start, Ns end, const std::vector<Interval>& idle) {
  const Ns period = end - start;
  if (period <= 0) return;
  std::vector<Interval> next;
  for (int k = 1; k <= options_.horizon; ++k)
    for (const auto& i : idle) next.push_back({i.start + k * period, i.end + k * period});
  predict(gpu, std::move(next));
}

template <class F>
void Dispatcher::for_each_free(const GpuState& g, Ns from, F&& f) {
  auto r = g.reserved.begin();
  for (const auto& b : g.predicted) {
    if (b.end <= from) continue;
    Ns cursor = std::max(b.start, from);
    while (r != g.reserved.end() && r->end <= cursor) ++r;
    for (auto q = r; q != g.reserved.end() && q->start < b.end; ++q) {
      if (q->start > cursor && !f(Interval{cursor, q->start})) return;
      cursor = std::max(cursor, q->end);
    }
    if (cursor < b.end && !f(Interval{cursor, b.end})) return;
  }
}

std::vector<Interval> Dispatcher::free_bubbles(int gpu, Ns from) const {
  std::vector<Interval> out;
  for_each_free(gpus_.at(static_cast<std::size_t>(gpu)), from, [&](const Interval& i) {
    out.push_back(i);
    return true;
  });
  return out;
}

void Dispatcher::prune(GpuState& g, Ns now) {
  // Both lists are sorted by start and disjoint, so by end too: what has ended is a prefix.
  const auto ended = [](auto& v, auto gone) { v.erase(v.begin(), std::find_if_not(v.begin(), v.end(), gone)); };
  ended(g.reserved, [&](const Interval& r) { return r.end < now - kKeepReservations; });
  ended(g.predicted, [&](const Interval& b) { return b.end <= now; });
}

std::optional<Placement> Dispatcher::place(const Request& r, Ns now) {
  // The placement that finishes first, where a GPU's work still outstanding counts against
  // it too: without that, the GPUs nearest the load generator would take everything their
  // predicted bubbles hold and fall behind while farther ones idle.
  std::optional<Placement> best;
  Ns best_score = 0;
  double need_flops = std::numeric_limits<double>::quiet_NaN();  // the GPU speed `need` is for
  Ns need = 0;
  for (std::size_t i = 0; i < gpus_.size(); ++i) {
    auto& bound = bounds_[i];
    if (!(bound.effective_flops == need_flops)) {  // GPUs of one kind sit side by side
      need_flops = bound.effective_flops;
      const double run_ns = r.flops / need_flops * 1e9;
      need = static_cast<Ns>(std::ceil(run_ns * (1 + options_.margin)));
    }
    const Ns earliest = now + bound.lead_ns;
    const Ns outstanding = bound.outstanding;
    // No placement here can beat the best one so far (checked before any per-GPU work: with
    // thousands of GPUs most are passed over here). free_from: no free time before it.
    if (best && std::max(earliest, bound.free_from) + need + outstanding >= best_score) continue;
    auto& g = gpus_[i];
    prune(g, now);
    // Overdue work (its reserved time passed, not done yet) uses the next bubbles first.
    Ns owed = 0;
    for (const auto& [id, iv] : g.pending)
      if (iv.start < now) owed += iv.end - iv.start;
    bool first = true;
    for_each_free(g, earliest, [&](const Interval& b) {
      if (first) bound.free_from = b.start;
      first = false;
      Ns start = std::max(b.start, earliest);
      if (owed > 0) {
        const Ns take = std::min(owed, b.end - start);
        owed -= take;
        start += take;
      }
      if (best && start + need + outstanding >= best_score) return false;
      if (start + need > r.deadline_ns) return false;  // too late to be worth a GPU: queue, then expire
      if (start + need <= b.end) {
        best = Placement{r.id, static_cast<int>(i), start, start + need};
        best_score = start + need + outstanding;
        return false;
      }
      return true;
    });
    if (first) bound.free_from = kForever;  // no free time at all until predictions or reservations change
  }
  if (best) {
    auto& res = gpus_[static_cast<std::size_t>(best->gpu)].reserved;
    const Interval iv{best->start_ns, best->end_ns};
    gpus_[static_cast<std::size_t>(best->gpu)].pending[r.id] = iv;
    bounds_[static_cast<std::size_t>(best->gpu)].outstanding += iv.end - iv.start;
    res.insert(std::upper_bound(res.begin(), res.end(), iv,
                                [](const Interval& a, const Interval& b) { return a.start < b.start; }),
               iv);
  }
  return best;
}

std::optional<Placement> Dispatcher::request(const Request& r, Ns now) {
  if (records_.count(r.id)) throw std::invalid_argument("prefill request " + std::to_string(r.id) + " arrived twice");
  auto& rec = records_[r.id];
  rec.request = r;
  // Placed at once where it fits, even past queued ones: a long prompt that fits no bubble
  // must not hold up short ones that do.
  if (auto p = place(r, now)) {
    rec.placement = p;
    return p;
  }
  queue_.push_back(r.id);
  return std::nullopt;
}

std::vector<Placement> Dispatcher::retry(Ns now, std::size_t attempts) {
  std::vector<Placement> out;
  std::deque<int> left;
  std::size_t tried = 0;
  for (const int id : queue_) {
    auto& rec = records_.at(id);
    if (rec.request.deadline_ns <= now) {
      rec.expired = true;
      continue;
    }
    // Oldest first; a bounded number of attempts per call keeps a long queue cheap.
    std::optional<Placement> p;
    if (tried++ < attempts) p = place(rec.request, now);
    if (!p) {
      left.push_back(id);
      continue;
    }
    rec.placement = p;
    out.push_back(*p);
  }
  queue_ = std::move(left);
  return out;
}

void Dispatcher::started(int request, Ns at) {
  if (auto it = records_.find(request); it != records_.end() && !it->second.started) it->second.started = at;
}

void Dispatcher::finished(int request, Ns at, int preemptions) {
  const auto it = records_.find(request);
  if (it == records_.end()) return;
  auto& rec = it->second;
  rec.finished = at;
  rec.preemptions = preemptions;
  // Done (often before its reserved time, as GPUs take work early when idle): what is left
  // of its reservation is free again.
  if (rec.placement) {
    auto& g = gpus_.at(static_cast<std::size_t>(rec.placement->gpu));
    auto& bound = bounds_[static_cast<std::size_t>(rec.placement->gpu)];
    if (const auto p = g.pending.find(request); p != g.pending.end()) {
      bound.outstanding -= p->second.end - p->second.start;
      g.pending.erase(p);
    }
    auto& res = gpus_.at(static_cast<std::size_t>(rec.placement->gpu)).reserved;
    const Interval iv{rec.placement->start_ns, rec.placement->end_ns};
    if (const auto r = std::find(res.begin(), res.end(), iv); r != res.end()) res.erase(r);
    bound.free_from = 0;
  }
}

void Dispatcher::kv_delivered(int request, Ns at) {
  if (auto it = records_.find(request); it != records_.end()) it->second.kv = at;
}

nlohmann::json Dispatcher::summary(Ns from, Ns to) const {
  std::vector<double> ttft, wait, kv;
  std::int64_t completed = 0, placed = 0, dedicated = 0, misses = 0, expired = 0, unfinished = 0, preemptions = 0,
               kv_delivered = 0;
  double tokens = 0;
  for (const auto& [id, rec] : records_) {
    if (rec.placement) {
      ++placed;
      if (gpus_.at(static_cast<std::size_t>(rec.placement->gpu)).gpu.dedicated) ++dedicated;
    }
    if (rec.expired) {
      ++expired;
      ++misses;
      continue;
    }
    if (rec.finished) {
      ++completed;
      preemptions += rec.preemptions;
      const auto t = *rec.finished - rec.request.arrived_ns;
      ttft.push_back(static_cast<double>(t) / 1e9);
      if (rec.started) wait.push_back(static_cast<double>(*rec.started - rec.request.arrived_ns) / 1e9);
      if (*rec.finished > rec.request.deadline_ns) ++misses;
      if (*rec.finished >= from && *rec.finished < to) tokens += rec.request.tokens;
      if (rec.kv) {
        ++kv_delivered;
        kv.push_back(static_cast<double>(*rec.kv - *rec.finished) / 1e9);
      }
    } else {
      ++unfinished;
      // Not done by the end of the run: a miss unless its deadline was still ahead.
      if (rec.request.deadline_ns <= to) ++misses;
    }
  }
  const double window = static_cast<double>(to - from) / 1e9;
  return {{"requests", records_.size()},
          {"placed", placed},
          {"placed_on_dedicated", dedicated},
          {"completed", completed},
          {"queued_at_end", queue_.size()},
          {"expired", expired},
          {"unfinished", unfinished},
          {"deadline_misses", misses},
          {"preemptions", preemptions},
          {"ttft_s", {{"p50", workload::quantile(ttft, 0.5)}, {"p99", workload::quantile(ttft, 0.99)}}},
          {"queue_wait_s", {{"p50", workload::quantile(wait, 0.5)}, {"p99", workload::quantile(wait, 0.99)}}},
          {"kv_delivered", kv_delivered},
          // Completed, their KV cache still on its way to the decode node when the run ended.
          {"kv_in_flight_at_end", completed - kv_delivered},
          {"kv_transfer_s", {{"p50", workload::quantile(kv, 0.5)}, {"p99", workload::quantile(kv, 0.99)}}},
          {"tokens_per_s", window > 0 ? tokens / window : 0.0}};
}

}  // namespace wanlab::bubbletea
