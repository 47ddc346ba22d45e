// The simulator's event loop and its bridge to the arbiter (simulator.hpp says what it
// models). The parts it drives: the event queue (event_queue.hpp), the shared state and the
// network (sim_context.hpp), the burst models (burst_model.hpp, paced_link.hpp), TCP
// (tcp_model.hpp), the all-reduce (collectives.hpp), the workers' ops (workers.hpp).
#include "wanlab/sim/simulator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "wanlab/sim/burst_model.hpp"
#include "wanlab/sim/collectives.hpp"
#include "wanlab/sim/paced_link.hpp"
#include "wanlab/sim/rails.hpp"
#include "wanlab/sim/sim_context.hpp"
#include "wanlab/sim/workers.hpp"
#include "wanlab/workload/execute.hpp"
#include "wanlab/workload/wan_transfer.hpp"

namespace wanlab::sim {
namespace {

using program::OpKind;
using program::Span;
using program::SpanKind;

class Simulation final : public BurstHost, public HopSender {
 public:
  Simulation(const workload::Plan& plan, const SimOptions& opt)
      : ctx_(plan, opt),
        jitter_rng_(plan.scenario.seed),
        jitter_(-opt.compute_jitter, opt.compute_jitter),
        workers_(ctx_),
        groups_(workers_.groups),
        bursts_(make_burst_model(ctx_, *this)),
        paced_(dynamic_cast<PacedBursts*>(bursts_.get())),
        collectives_(ctx_, places()) {
    auto ao = opt.arbiter;
    if (ao.tcp_window_bytes == 0) ao.tcp_window_bytes = ctx_.window;
    arb_ = std::make_unique<arbiter::Arbiter>(std::move(ctx_.policy), ao);
    rails_ = RailFabrics::make(ctx_, workers_);
    collectives_.use_rails(rails_.get());
    if (paced_ && ctx_.window > 0 && !opt.slow_start) collectives_.use_sender(this);
    const auto& topo = plan.topology;
    for (std::size_t i = 0; i < topo.links.size(); ++i)
      arb_->add_link({topo.links[i].src, topo.links[i].dst}, ctx_.wan_rate[i], ctx_.wan_rtt[i]);
  }

  SimResult run() {
    for (std::uint32_t g = 0; g < groups_.size(); ++g) ctx_.events.push(0, ev::Wake{g});
    for (std::uint32_t i = 0; i < ctx_.opt.traces.size(); ++i) schedule_trace_step(i, 0, 0);
    Nanos now = 0;
    for (;;) {
      settle(now);
      std::optional<Nanos> next;
      if (!ctx_.events.empty()) next = ctx_.events.next_at();
      if (const auto f = ctx_.net.next_finish(); f && (!next || *f < *next)) next = f;
      if (!next || all_done()) break;
      now = std::max(now, *next);
    }
    if (!all_done()) throw workload::DeadlockError(blocked());
    bursts_->finish(now);  // for the report
    return result();
  }

  // An all-reduce's WAN hop: a paced message of the pair's connections, whatever its size
  // (the lab's agents write the steps' chunks to them).
  void send_hop(std::uint32_t id, Nanos now) override { start_message_flow(id, {ctx_.wan[ctx_.messages[id].link]}, now); }

  void release_connections(std::uint32_t id, Nanos now, Nanos free_from) override {
    auto& c = *ctx_.messages[id].conn;
    c.busy = false;
    if (!c.queue.empty()) {
      auto [next, path] = std::move(c.queue.front());
      c.queue.pop_front();
      start_message_flow(next, path, now, free_from);
    }
  }

 private:
  using Group = Workers::Group;

  std::vector<Collectives::Place> places() const {
    std::vector<Collectives::Place> out;
    for (const auto& g : groups_) out.push_back({g.dc, g.node});
    return out;
  }

  // ---- events ----

  // Everything that happens at `now`, until nothing more does.
  void settle(Nanos now) {
    auto& events = ctx_.events;
    for (;;) {
      bool any = false;
      ctx_.net.take_finished(now, finished_);
      for (const auto f : finished_) {
        flow_finished(f, now);
        any = true;
      }
      while (!events.empty() && events.next_at() <= now) {
        const auto e = events.pop();
        ++ctx_.stats.events;
        handle(e.event, now);
        any = true;
      }
      if (arbiter_touched_) {
        arbiter_touched_ = false;
        arb_->advance(now);
        any = true;
      }
      for (const auto& ev : arb_->take_events()) arbiter_event(ev, now);
      if (paced_)
        paced_->end_of_pass(now);
      else
        bursts_->end_of_pass(now);
      ctx_.net.update(now);
      if (const auto d = arb_->next_deadline(); d && *d != planned_deadline_) {
        planned_deadline_ = *d;
        events.push(std::max(*d, now + 1), ev::Deadline{});
      }
      const auto f = ctx_.net.next_finish();
      const bool finishing = f && *f <= now;
      if (!any && !finishing) return;
      // Another pass only if something is left at `now` (it would find nothing else).
      if (!finishing && (events.empty() || events.next_at() > now) && !arbiter_touched_ && !arb_->has_events() &&
          !(paced_ ? paced_->pending() : bursts_->pending()))
        return;
    }
  }

  // One event, by kind: a switch over the variant's index (std::visit made a call through a
  // table per event); the burst model's own go to it, the paced one called directly.
  void handle(const Event& e, Nanos now) {
    switch (e.index()) {
      case variant_index<ev::Wake>(): {
        const auto gi = std::get_if<ev::Wake>(&e)->group;
        auto& g = groups_[gi];
        if (g.wait == Group::Wait::compute) {
          g.wait = Group::Wait::none;
          ++g.pc;
        }
        advance(gi, now);
        break;
      }
      case variant_index<ev::Deliver>(): deliver(std::get_if<ev::Deliver>(&e)->message, now); break;
      case variant_index<ev::PostedSend>(): {
        const auto x = pending_[std::get_if<ev::PostedSend>(&e)->pending];
        send(x.group, workers_.ops[x.slot], x.iteration, now, x.span);
        break;
      }
      case variant_index<ev::CollectiveEnd>(): collective_end(std::get_if<ev::CollectiveEnd>(&e)->collective, now); break;
      case variant_index<ev::Deadline>():
        // Deadlines move on with every progress report; only one still due matters.
        if (const auto dl = arb_->next_deadline(); dl && *dl <= now) arbiter_touched_ = true;
        break;
      case variant_index<ev::Tick>(): tick(now); break;
      case variant_index<ev::Capacity>(): {
        const auto& c = *std::get_if<ev::Capacity>(&e);
        capacity_step(c.trace, c.step, now);
        break;
      }
      case variant_index<ev::SlowStart>(): slow_start_step(std::get_if<ev::SlowStart>(&e)->message, now); break;
      case variant_index<ev::RailsReady>(): rails_ready(std::get_if<ev::RailsReady>(&e)->fabric, now); break;
      default:  // the burst model's own
        if (paced_)
          paced_->handle(e, now);
        else
          bursts_->handle(e, now);
        break;
    }
  }

  // ---- workers ----

  void advance(std::uint32_t gi, Nanos now) {
    auto& g = groups_[gi];
    const int iterations = ctx_.sc.iterations;
    g.t = now;
    while (g.iteration < iterations) {
      if (g.pc == 0 && g.allreduce_seq == 0 && g.report.iterations.size() == static_cast<std::size_t>(g.iteration))
        g.report.iterations.push_back({g.t, g.t});
      if (g.pc == g.nops) {
        g.report.iterations.back().end_ns = g.t;
        ++g.iteration;
        g.pc = 0;
        g.allreduce_seq = 0;
        continue;
      }
      const auto& op = workers_.ops[g.slot_base + g.pc];
      switch (op.kind) {
        case OpKind::forward:
        case OpKind::backward:
        case OpKind::optimizer: {
          double seconds = op.seconds;
          if (ctx_.opt.compute_jitter > 0) seconds *= 1 + jitter_(jitter_rng_);
          if (!ctx_.opt.compute_delays.empty()) {
            const auto held = ctx_.opt.compute_delays.find(
                ComputeOpKey{g.worker, g.iteration, program::compute_span_kind(op.kind), op.microbatch});
            if (held != ctx_.opt.compute_delays.end()) g.t += held->second;
          }
          const auto d = static_cast<Nanos>(std::llround(seconds * 1e9));
          g.report.spans.push_back(Span{program::compute_span_kind(op.kind), g.iteration, op.microbatch, g.t, g.t + d, 0, -1});
          if (g.t + d > now) {  // it computes, or a delay holds it
            g.wait = Group::Wait::compute;
            g.t += d;
            ctx_.events.push(g.t, ev::Wake{gi});
            return;
          }
          ++g.pc;
          break;
        }
        case OpKind::send:
          if (op.rendezvous)
            rendezvous_send(gi, g.slot_base + static_cast<std::uint32_t>(g.pc), now);
          else
            send(gi, op, g.iteration, now);
          ++g.pc;
          break;
        case OpKind::recv: {
          const auto slot = g.slot_base + static_cast<std::uint32_t>(g.pc);
          if (!arrived_.contains(workers_.arrival_key(slot, g.iteration))) {
            g.wait = Group::Wait::recv;
            g.wait_slot = slot;
            g.wait_from = g.t;
            // A rendezvous send already reached waits for this: it leaves once the sender hears.
            if (const auto p = unposted_.find(workers_.arrival_key(slot, g.iteration)); p != unposted_.end()) {
              const auto& x = pending_[p->second];
              ctx_.events.push(now + notice_delay(gi, x.group), ev::PostedSend{p->second});
              unposted_.erase(p);
            }
            return;
          }
          arrived_.erase(workers_.arrival_key(slot, g.iteration));
          ++g.pc;
          break;
        }
        case OpKind::allreduce:
          if (g.prog->ops[g.pc].ring.size() < 2) {
            ++g.pc;
            ++g.allreduce_seq;
            break;
          }
          g.wait = Group::Wait::allreduce;
          g.wait_from = g.t;
          collectives_.enter(gi, g.iteration, g.allreduce_seq, g.prog->ops[g.pc], now);
          return;
      }
    }
    g.done = true;
  }

  // The one-way delay of the receiver's notice that its recv is posted (an empty message
  // from group `from` to group `to`).
  Nanos notice_delay(std::uint32_t from, std::uint32_t to) const {
    const auto& a = groups_[from];
    const auto& b = groups_[to];
    if (a.dc != b.dc) {
      auto link = ctx_.link_of[a.dc][b.dc];
      if (link == kNoLink) link = ctx_.link_of[b.dc][a.dc];  // a one-way WAN: its own delay back
      return ctx_.wan_delay[link];
    }
    return a.node == b.node ? 0 : ctx_.lan_delay;
  }

  // A rendezvous send (program::Op::rendezvous) reached by the sender at `now`: it leaves
  // once the receiver's recv is posted and the notice is back, which may be now or later.
  void rendezvous_send(std::uint32_t gi, std::uint32_t slot, Nanos now) {
    const auto& g = groups_[gi];
    const auto& op = workers_.ops[slot];
    const auto dst = workers_.slot_owner[op.target];
    const auto& d = groups_[dst];
    if (d.wait == Group::Wait::recv && d.wait_slot == op.target && d.iteration == g.iteration &&
        d.wait_from + notice_delay(dst, gi) <= now)
      return send(gi, op, g.iteration, now);
    // Its span starts now, in program order; the message is made when it leaves.
    auto& spans = groups_[gi].report.spans;
    const auto id = static_cast<std::uint32_t>(pending_.size());
    pending_.push_back({gi, slot, g.iteration, spans.size()});
    spans.push_back(Span{SpanKind::send, g.iteration, op.microbatch, now, now, op.bytes, op.peer});
    if (d.wait == Group::Wait::recv && d.wait_slot == op.target && d.iteration == g.iteration)
      ctx_.events.push(d.wait_from + notice_delay(dst, gi), ev::PostedSend{id});
    else
      unposted_.emplace(workers_.arrival_key(op.target, g.iteration), id);
  }

  // The bytes leave `now`; `span`: the send's span, made when the sender reached it (a
  // rendezvous send), or kNoSpan: made now.
  static constexpr std::size_t kNoSpan = static_cast<std::size_t>(-1);
  void send(std::uint32_t gi, const Workers::SimOp& op, int iteration, Nanos now, std::size_t span = kNoSpan) {
    auto& g = groups_[gi];
    const auto slot = op.target;
    const auto dst = workers_.slot_owner[slot];
    Message m;
    m.src = gi;
    m.dst = dst;
    m.slot = slot;
    m.iteration = iteration;
    m.payload = static_cast<double>(op.bytes) * ctx_.tp;
    if (span == kNoSpan) {
      m.span = g.report.spans.size();
      g.report.spans.push_back(Span{SpanKind::send, iteration, op.microbatch, now, now, op.bytes, op.peer});
    } else {
      m.span = span;
    }
    auto& messages = ctx_.messages;
    const auto id = static_cast<std::uint32_t>(messages.size());
    const auto& d = groups_[dst];
    if (d.dc != g.dc) {
      m.link = ctx_.link_of[g.dc][d.dc];
      m.delay = ctx_.wan_delay[m.link];
      m.ceiling = ctx_.wan_ceiling[m.link];
      messages.push_back(m);
      request_window(id, op, now);
      return;
    }
    messages.push_back(m);
    if (rails_ && rails_->on_rails(gi, dst)) {
      messages[id].delay = ctx_.lan_delay;
      const auto phase = op.gradient ? arbiter::RailPhase::pp_backward : arbiter::RailPhase::pp_forward;
      if (rails_->admit(gi, phase, {false, id, 0}, now)) start_message_flow(id, rails_->path(gi, dst), now);
      return;
    }
    if (d.node == g.node) {
      ctx_.events.push(now, ev::Deliver{id});
    } else if (!ctx_.lan_limited) {
      ctx_.events.push(now + ctx_.lan_delay, ev::Deliver{id});
    } else {
      messages[id].delay = ctx_.lan_delay;
      start_message_flow(id, {ctx_.node_up[g.node], ctx_.node_down[d.node]}, now);
    }
  }

  // The arbiter's transfer for a WAN message: the lab's bytes, kind, stages and needed_at.
  void request_window(std::uint32_t id, const Workers::SimOp& op, Nanos now) {
    auto& m = ctx_.messages[id];
    // A group stands for its TP ranks: all of them cross the WAN together.
    workload::WanMessage wm;
    wm.src = groups_[m.src].worker;
    wm.dst = groups_[m.dst].worker;
    wm.kind = op.gradient ? arbiter::TransferKind::gradient : arbiter::TransferKind::activation;
    wm.microbatch = op.microbatch;
    wm.iteration = m.iteration;
    wm.payload_bytes = m.payload;
    wm.ranks = ctx_.tp;
    wm.needed_at = workers_.needed_at(m.slot);
    m.transfer = arb_->request(workload::transfer_request(ctx_.plan, wm), now);
    if (by_transfer_.size() <= m.transfer) {
      by_transfer_.resize(m.transfer + 1, kNone);
      ctx_.wire.resize(m.transfer + 1);
    }
    by_transfer_[m.transfer] = id;
    ++ctx_.stats.transfers;
    arbiter_touched_ = true;
  }

  // `sent_from`: a paced message may enter from then (its connections were free then).
  void start_message_flow(std::uint32_t id, const std::vector<FlowNetwork::LinkId>& path, Nanos now,
                          Nanos sent_from = kNotYet) {
    auto& m = ctx_.messages[id];
    if (!m.conn) m.conn = &connections_[{m.src, m.dst}];  // std::map: the node stays put
    auto& conn = *m.conn;
    if (conn.busy) {
      conn.queue.emplace_back(id, path);
      return;
    }
    conn.busy = true;
    const double weight = ctx_.weight_of(m);
    const double window = ctx_.window;
    double ceiling = m.ceiling;
    const double wire = m.payload * workload::kWireOverhead;
    const bool fits = m.link != kNoLink && window > 0 && !ctx_.opt.slow_start &&
                      (wire / weight <= window || m.collective != kNone);
    if (fits && bursts_->start(id, path, now, sent_from)) return;
    if (m.link != kNoLink && ctx_.opt.slow_start && std::isfinite(ceiling)) {
      const Nanos rtt = ctx_.wan_rtt[m.link];
      m.cwnd = conn.slow.begin(now, rtt, ctx_.opt.initial_window_bytes, window, ctx_.sc.tcp_slow_start_after_idle);
      ceiling = m.cwnd * 8e9 / static_cast<double>(rtt);
      if (m.cwnd < window) ctx_.events.push(now + rtt, ev::SlowStart{id});
    }
    m.flow = ctx_.net.start(path, wire, weight, ceiling, now);
    ctx_.on_wire(m, now);
    FlowOwner owner{false, false, id, m.link, m.payload};
    if (rails_ && m.link == kNoLink && rails_->on_rails(m.src, m.dst)) owner.rail = rails_->fabric_of(m.src);
    ctx_.set_owner(m.flow, owner);
    if (m.link != kNoLink) ctx_.start_acks(m.link, wire, m.ceiling * weight, now);
  }

  void slow_start_step(std::uint32_t id, Nanos now) {
    auto& m = ctx_.messages[id];
    auto& net = ctx_.net;
    if (m.flow == kNone || !net.active(m.flow)) return;
    const Nanos rtt = ctx_.wan_rtt[m.link];
    m.cwnd = SlowStartWindow::next(m.cwnd, ctx_.window);
    if (!m.paused) net.set_ceiling(m.flow, m.cwnd * 8e9 / static_cast<double>(rtt), now);
    if (m.cwnd < ctx_.window) ctx_.events.push(now + rtt, ev::SlowStart{id});
  }

  double message_ceiling(const Message& m) const {
    if (m.burst) return kUnlimited;
    if (ctx_.opt.slow_start && std::isfinite(m.ceiling))
      return m.cwnd * 8e9 / static_cast<double>(ctx_.wan_rtt[m.link]);
    return m.ceiling;
  }

  // ---- the arbiter ----

  void arbiter_event(const arbiter::Event& e, Nanos now) {
    const auto id = e.id < by_transfer_.size() ? by_transfer_[e.id] : kNone;
    if (id == kNone) return;
    auto& m = ctx_.messages[id];
    switch (e.kind) {
      case arbiter::Event::Kind::grant:
        if (!m.granted) {
          m.granted = true;
          start_message_flow(id, {ctx_.wan[m.link]}, now);
          if (ctx_.exclusive) {
            m.windowed = true;
            in_window_.push_back(id);
            plan_tick(now);
          }
        } else if (m.paused && m.paced) {
          bursts_->resume(id, now);
        } else if (m.paused) {
          m.paused = false;
          ctx_.net.set_ceiling(m.flow, message_ceiling(m), now);
        }
        break;
      case arbiter::Event::Kind::revoke:
        if (m.paced) {
          bursts_->pause(id, now);
        } else if (m.flow != kNone && ctx_.net.active(m.flow)) {
          m.paused = true;
          ctx_.net.set_ceiling(m.flow, 0, now);
        }
        break;
      case arbiter::Event::Kind::close:
      case arbiter::Event::Kind::done:
        break;
    }
  }

  // The lab samples its gates' counters every progress period; so does this.
  void plan_tick(Nanos now) {
    if (in_window_.empty()) return;
    const Nanos p = ctx_.opt.progress_period_ns;
    const Nanos at = (now / p + 1) * p;
    if (at == next_tick_) return;
    next_tick_ = at;
    ctx_.events.push(at, ev::Tick{});
  }

  void tick(Nanos now) {
    if (now != next_tick_) return;
    next_tick_ = kNotYet;
    auto& messages = ctx_.messages;
    std::erase_if(in_window_, [&](std::uint32_t id) { return !messages[id].windowed; });
    for (const auto id : in_window_) {
      const auto& m = messages[id];
      if (m.paced) {
        arb_->progress(m.transfer, static_cast<std::uint64_t>(bursts_->entered(id, now)), now);
        continue;
      }
      if (m.flow == kNone) continue;  // waits behind an earlier message on its connections
      arb_->progress(m.transfer, static_cast<std::uint64_t>(ctx_.net.sent(m.flow, now)), now);
    }
    plan_tick(now);
  }

  // ---- flows and deliveries ----

  void flow_finished(std::uint32_t flow, Nanos now) {
    const auto o = ctx_.owners.at(flow);
    auto& net = ctx_.net;
    auto& totals = ctx_.totals;
    if (o.link != kNoLink) {
      totals[o.link].wire_bytes += net.bytes(flow);
      totals[o.link].payload_bytes += o.payload;
      // A paced piece's ACKs (their share of the reverse link is reserved, not a flow).
      if (o.paced && ctx_.opt.acks && ctx_.reverse[o.link] != kNoLink)
        totals[ctx_.reverse[o.link]].wire_bytes += net.bytes(flow) * kAckFraction;
    }
    // ACK flows and paced pieces are known by no one else: their ids go back (millions of
    // them in a long paced run).
    if (o.ack || o.paced) net.release(flow);
    if (o.ack) return;
    if (o.paced) {  // (only the paced model starts such flows)
      paced_->flow_done(o, now);
      return;
    }
    if (o.rail != kNone) rails_->done(o.rail, now);
    if (o.collective) {
      collectives_.hop_done(o.index, now);
      return;
    }
    auto& m = ctx_.messages[o.index];
    if (m.link != kNoLink) ctx_.wire[m.transfer].last = now;
    if (m.burst && !bursts_->flow_done(o, now)) return;
    if (ctx_.opt.slow_start && m.link != kNoLink) m.conn->slow.end(m.cwnd, now);
    ctx_.events.push(now + m.delay, ev::Deliver{o.index});
    release_connections(o.index, now, -1);
  }

  void deliver(std::uint32_t id, Nanos now) {
    auto& m = ctx_.messages[id];
    if (m.collective != kNone) {  // an all-reduce hop, off its link (its delay is the collective's)
      collectives_.hop_done(m.collective, now);
      return;
    }
    auto& src = groups_[m.src];
    src.report.spans[m.span].end_ns = now;
    if (m.transfer != 0) {
      if (m.windowed) {
        // The last bytes reach the arbiter as the lab's counters would show them.
        const double bytes = m.paced ? m.payload * workload::kWireOverhead : ctx_.net.bytes(m.flow);
        arb_->progress(m.transfer, static_cast<std::uint64_t>(bytes), now);
        m.windowed = false;
      }
      arb_->complete(m.transfer, now);
      arbiter_touched_ = true;
    }
    auto& d = groups_[m.dst];
    if (d.wait == Group::Wait::recv && d.wait_slot == m.slot && d.iteration == m.iteration) {
      const auto& op = workers_.ops[d.slot_base + d.pc];
      if (now > d.wait_from)
        d.report.spans.push_back(Span{SpanKind::recv_wait, d.iteration, op.microbatch, d.wait_from, now, op.bytes, op.peer});
      d.wait = Group::Wait::none;
      d.wait_slot = kNone;
      ++d.pc;
      advance(m.dst, now);
      return;
    }
    arrived_.insert(workers_.arrival_key(m.slot, m.iteration));
  }

  void collective_end(std::uint32_t ci, Nanos now) {
    const auto& c = collectives_[ci];
    for (std::size_t i = 0; i < c.members.size(); ++i) {
      auto& g = groups_[c.members[i]];
      const auto& op = workers_.ops[g.slot_base + g.pc];
      g.report.spans.push_back(Span{SpanKind::allreduce, g.iteration, -1, c.entry[i], now, op.bytes, -1});
      g.wait = Group::Wait::none;
      ++g.pc;
      ++g.allreduce_seq;
    }
    for (const auto gi : c.members) advance(gi, now);
  }

  // ---- rails ----

  // A rail fabric's new circuits are up: what waited for them starts.
  void rails_ready(std::uint32_t fabric, Nanos now) {
    for (const auto& w : rails_->ready(fabric, now)) {
      if (w.hop) {
        collectives_.start_rail_hop(w.id, w.index, now);
      } else {
        const auto& m = ctx_.messages[w.id];
        start_message_flow(w.id, rails_->path(m.src, m.dst), now);
      }
    }
  }

  // ---- traces ----

  void schedule_trace_step(std::uint32_t trace, std::uint32_t step, Nanos loop_start) {
    const auto& tr = ctx_.opt.traces[trace];
    if (tr.link >= ctx_.wan.size())
      throw std::invalid_argument(
          fmt::format("simulate: trace for link {}, the topology has {}", tr.link, ctx_.wan.size()));
    if (step >= tr.steps.size()) {
      if (tr.loop_ns <= 0 || tr.steps.empty()) return;
      loop_start += tr.loop_ns;
      step = 0;
    }
    if (trace_loop_.size() <= trace) trace_loop_.resize(trace + 1, 0);
    trace_loop_[trace] = loop_start;
    ctx_.events.push(loop_start + tr.steps[step].at_ns, ev::Capacity{trace, step});
  }

  void capacity_step(std::uint32_t trace, std::uint32_t step, Nanos now) {
    const auto& tr = ctx_.opt.traces[trace];
    const double rate = tr.steps[step].rate_bps * ctx_.sc.scale;
    const auto& l = ctx_.plan.topology.links[tr.link];
    ctx_.wan_rate[tr.link] = rate;
    ctx_.apply_rate(tr.link, now);
    if (ctx_.acks_for[tr.link] != 0) ctx_.apply_rate(ctx_.reverse[tr.link], now);
    arb_->set_capacity({l.src, l.dst}, rate, now);
    arbiter_touched_ = true;
    // Steps after the last iteration would keep the run going for nothing.
    if (!all_done()) schedule_trace_step(trace, step + 1, trace_loop_[trace]);
  }

  // ---- the end ----

  bool all_done() const {
    return std::all_of(groups_.begin(), groups_.end(), [](const Group& g) { return g.done; });
  }

  std::vector<workload::DeadlockError::Blocked> blocked() const {
    std::vector<workload::DeadlockError::Blocked> out;
    for (const auto& g : groups_) {
      if (!g.done)
        out.push_back(workload::DeadlockError::at(g.worker, g.iteration, g.pc, g.prog->ops.at(g.pc), "simulated"));
    }
    return out;
  }

  SimResult result() {
    SimResult r;
    r.tp = ctx_.tp;
    r.groups.reserve(groups_.size());
    for (auto& g : groups_) {
      g.report.worker = g.worker;
      r.groups.push_back(std::move(g.report));
    }
    r.wan = ctx_.totals;
    r.windows = arb_->windows();
    r.wire = std::move(ctx_.wire);
    for (const auto& [pair, c] : connections_)
      if (c.tcp.cwnd > 0)
        r.tcp.push_back({groups_[pair.first].worker, groups_[pair.second].worker, ctx_.tp * ctx_.k, c.tcp.cwnd,
                         c.tcp.ssthresh, c.tcp.srtt, c.tcp.resent});
    if (rails_) r.rails = rails_->stats();
    auto& stats = ctx_.stats;
    stats.flows = ctx_.net.stats().flows;
    stats.fillings = ctx_.net.stats().updates;
    stats.bundles_filled = ctx_.net.stats().bundles_filled;
    stats.simulated_workers = groups_.size();
    r.stats = stats;
    return r;
  }

  SimContext ctx_;
  std::mt19937_64 jitter_rng_;  // compute jitter (SimOptions::compute_jitter)
  std::uniform_real_distribution<double> jitter_;
  Workers workers_;
  std::vector<Group>& groups_;
  std::unique_ptr<BurstModel> bursts_;
  PacedBursts* paced_;  // bursts_ when it is the paced model (the default): called without a virtual call
  Collectives collectives_;
  std::unique_ptr<arbiter::Arbiter> arb_;
  std::unique_ptr<RailFabrics> rails_;  // nullptr: no DC has rails
  bool arbiter_touched_ = false;
  Nanos planned_deadline_ = kNotYet;
  Nanos next_tick_ = kNotYet;
  std::vector<FlowNetwork::FlowId> finished_;  // flows finished at an instant (kept from call to call)
  std::vector<std::uint32_t> by_transfer_;    // message by arbiter transfer id
  std::vector<std::uint32_t> in_window_;
  std::map<std::pair<std::uint32_t, std::uint32_t>, Connection> connections_;
  std::unordered_set<std::uint64_t> arrived_;  // messages delivered before their recv: Workers::arrival_key
  // Rendezvous sends reached by their sender, by index (ev::PostedSend), and those whose
  // recv is not posted yet, by the recv's Workers::arrival_key.
  struct PendingSend {
    std::uint32_t group = 0;
    std::uint32_t slot = 0;  // the send op
    int iteration = 0;
    std::size_t span = 0;  // its send span in the sender's report
  };
  std::vector<PendingSend> pending_;
  std::unordered_map<std::uint64_t, std::uint32_t> unposted_;
  std::vector<Nanos> trace_loop_;
};

}  // namespace

SimResult simulate(const workload::Plan& plan, const SimOptions& options) {
  return Simulation(plan, options).run();
}

}  // namespace wanlab::sim
