// The ns-3 reference executor (reference.hpp says what it models).
#include "wanlab/ns3ref/reference.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <limits>

#include "wanlab/core/topology.hpp"
#include "wanlab/ns3ref/packet_net.hpp"
#include "wanlab/workload/execute.hpp"
#include "wanlab/workload/wan_transfer.hpp"
#include "wanlab/core/round_trip.hpp"

namespace wanlab::ns3ref {

std::optional<std::string> unsupported(const workload::Plan& plan) {
  const auto& topo = plan.topology;
  const auto& sc = plan.scenario;
  for (const auto& l : topo.links) {
    const auto name = fmt::format("{}->{}", topo.dcs.at(l.src).name, topo.dcs.at(l.dst).name);
    if (l.trace) return fmt::format("the reference lacks rate traces: WAN link {} replays {}", name, l.trace->string());
    if (l.params.jitter.count() != 0) return fmt::format("the reference lacks WAN jitter: WAN link {} sets jitter", name);
    if (l.params.loss.ppb != 0 || l.params.loss_burst)
      return fmt::format("the reference lacks random loss: WAN link {} sets loss", name);
    const auto* back = topo.find_link(l.dst, l.src);
    if (!back) return fmt::format("the reference lacks one-way links: WAN link {} has no reverse link for its ACKs", name);
    if (back->params.delay != l.params.delay)
      return fmt::format("the reference lacks asymmetric delays: WAN link {} and its reverse differ in delay", name);
    if (l.params.rate.bps == 0) return fmt::format("the reference lacks links without rate: WAN link {} has rate 0", name);
  }
  if (topo.lan.rate.bps != 0)
    return "the reference lacks a limited LAN: the topology's LAN has a rate (it models only an unlimited LAN)";
  if (sc.prefill) return "the reference lacks prefill (BubbleTea): the scenario has a prefill load";
  if (topo.node.tcp_congestion && *topo.node.tcp_congestion != "cubic")
    return fmt::format("the reference lacks TCP congestion control {}: it runs CUBIC", *topo.node.tcp_congestion);
  return std::nullopt;
}

namespace {

using Nanos = std::int64_t;
using program::OpKind;
using program::Span;
using program::SpanKind;
constexpr std::uint32_t kNone = 0xffffffffu;
constexpr std::size_t kNoLink = static_cast<std::size_t>(-1);

struct Part {
  std::uint32_t msg = 0;
  std::uint64_t bytes = 0;
  std::uint64_t end = 0;  // the connection's byte offset just after this part
};

struct Conn {
  std::uint64_t queued = 0;   // bytes of every part given to it so far
  std::uint64_t written = 0;  // bytes handed to the socket
  std::uint64_t sent = 0;     // bytes TCP has sent (its highest sequence)
  std::deque<Part> to_write, to_send, to_recv;
};

struct Message {
  std::uint32_t src = 0, dst = 0;  // groups
  std::uint32_t slot = kNone;      // the receiver's recv op (kNone: an all-reduce hop)
  int iteration = 0;
  std::size_t span = 0;
  double payload = 0;  // all TP ranks' shares
  std::size_t link = kNoLink;
  arbiter::TransferId transfer = 0;
  std::uint32_t collective = kNone;
  bool granted = false, paused = false, windowed = false;
  int parts_left = 0, parts_unsent = 0;
  std::uint64_t sent = 0;  // payload bytes TCP has sent
  std::optional<Nanos> first, last;  // its bytes' first and last send
};

struct Group {
  int worker = 0;
  const program::WorkerProgram* prog = nullptr;
  std::size_t dc = 0;
  std::size_t node = 0;  // global node index
  int iteration = 0;
  std::size_t pc = 0;
  enum class Wait { none, compute, recv, allreduce } wait = Wait::none;
  std::size_t wait_op = 0;
  Nanos wait_from = 0;
  int allreduce_seq = 0;
  program::WorkerReport report;
  bool done = false;
};

struct Collective {
  std::vector<std::uint32_t> members;
  std::vector<Nanos> entry;
  int entered = 0;
  int hops_left = 0;
  Nanos last_finish = 0;
  Nanos step_delay = 0;
  std::size_t steps = 0;
};

class Reference {
 public:
  Reference(const workload::Plan& plan, const Options& opt)
      : plan_(plan),
        opt_(opt),
        sc_(plan.scenario),
        topo_(plan.topology),
        tp_(sc_.parallelism.tp),
        k_(sc_.connections),
        window_(workload::run_tcp_window(sc_)),
        rng_(plan.scenario.seed),
        jitter_(-opt.compute_jitter, opt.compute_jitter) {
    if (const auto why = unsupported(plan)) throw std::invalid_argument(*why);
    if (sc_.iterations < 0) throw std::invalid_argument("ns-3 reference: negative iterations");
    if (!(opt.compute_jitter >= 0 && opt.compute_jitter <= 0.5) || opt.progress_period_ns <= 0 ||
        !(opt.access_rate_bps > 0) || opt.warmup_ns <= 0)
      throw std::invalid_argument("ns-3 reference: bad options (jitter 0 to 0.5, positive period, rate, warm-up)");
    if (!(window_ > 0)) throw std::invalid_argument("ns-3 reference: the run's TCP window must be positive");
    auto policy = arbiter::make_policy(sc_.policy);
    exclusive_ = policy->exclusive();
    auto ao = opt.arbiter;
    if (ao.tcp_window_bytes == 0) ao.tcp_window_bytes = window_;
    arb_ = std::make_unique<arbiter::Arbiter>(std::move(policy), ao);
    build_groups();
  }

  Result run() {
    std::vector<NetLink> links;
    for (std::size_t i = 0; i < topo_.links.size(); ++i) {
      const auto& l = topo_.links[i];
      NetLink n;
      n.src = l.src;
      n.dst = l.dst;
      n.rate_bps = link_rate(i);
      n.delay_ns = l.params.delay.count();
      LinkQueue q;
      if (l.params.queue && l.params.queue->unit == QueueLimit::Unit::bytes) {
        n.queue_bytes = q.queue_bytes = l.params.queue->value;
      } else {
        auto sized = l;
        sized.params.rate.bps = static_cast<std::uint64_t>(std::llround(link_rate(i)));
        n.queue_packets = q.queue_packets = l.params.queue ? l.params.queue->value : core::default_queue_packets(topo_, sized);
      }
      links.push_back(n);
      queues_.push_back(q);
    }
    // The window is the sender's buffer (unACKed and unsent bytes together), and the
    // receiver offers twice it, so the peer's window never binds: ns-3 3.37's
    // TcpTxBuffer::NextSeg offers an empty segment when the bytes sent equal the peer's
    // window exactly, and SendPendingData then sends it (a null TcpTxItem in
    // TcpRateLinux::SkbSent: SIGSEGV; three-dc-7b-window fair-k1 within 0.4 s).
    NetTcp tcp;
    tcp.snd_buf = static_cast<std::uint32_t>(window_);
    tcp.rcv_buf = static_cast<std::uint32_t>(2 * window_);
    // The lab's hosts pace as Linux with fq does unless the scenario says not to; a
    // windowed run's connections are paced to their share of the link either way.
    tcp.pacing = sc_.tcp_pacing || exclusive_;
    net_ = std::make_unique<PacketNet>(topo_.dcs.size(), links, tcp, opt_.access_rate_bps,
                                       static_cast<std::uint32_t>(std::max<std::int64_t>(1, sc_.seed % 2147483647)));
    net_->on_sent = [this](std::size_t c, std::uint64_t sent) { on_sent(c, sent); };
    net_->on_received = [this](std::size_t c, std::uint64_t received) { on_recv(c, received); };
    net_->on_writable = [this](std::size_t c) { pump(c); };
    payload_bytes_.assign(topo_.links.size(), 0);
    open_connections();
    net_->schedule(opt_.warmup_ns, [this] { start(); });
    net_->run();
    const auto events = net_->events();
    if (!started_) throw std::runtime_error("ns-3 reference: the run never started");
    if (!all_done()) throw workload::DeadlockError(blocked_list());
    Result r = result();
    r.events = events;
    net_.reset();
    return r;
  }

  // ---- setup ----

  void build_groups() {
    const auto& par = sc_.parallelism;
    if (plan_.programs.size() != plan_.workers.size() || plan_.workers.size() != static_cast<std::size_t>(par.gpus()))
      throw std::invalid_argument("ns-3 reference: the plan's programs and workers do not match its parallelism");
    std::size_t nodes = 0;
    for (const auto& dc : topo_.dcs) {
      node_base_.push_back(nodes);
      nodes += static_cast<std::size_t>(dc.nodes);
    }
    const auto ngroups = plan_.workers.size() / static_cast<std::size_t>(tp_);
    groups_.resize(ngroups);
    for (std::size_t g = 0; g < ngroups; ++g) {
      auto& gr = groups_[g];
      gr.worker = static_cast<int>(g) * tp_;
      gr.prog = &plan_.programs.at(static_cast<std::size_t>(gr.worker));
      const auto& w = plan_.workers.at(static_cast<std::size_t>(gr.worker));
      for (int t = 1; t < tp_; ++t) {
        const auto& o = plan_.workers.at(static_cast<std::size_t>(gr.worker + t));
        if (o.dc != w.dc || o.node != w.node)
          throw std::invalid_argument(fmt::format(
              "the reference lacks TP across nodes: the TP ranks of stage {} replica {} are not on one node", w.stage,
              w.dp_rank));
      }
      gr.dc = w.dc;
      gr.node = node_base_.at(w.dc) + static_cast<std::size_t>(w.node);
      gr.report.worker = gr.worker;
    }
    // Every send's receiving op, (receiver group, peer, tag) -> op index; the last one
    // wins, as in the simulator.
    for (std::uint32_t g = 0; g < groups_.size(); ++g) {
      const auto& ops = groups_[g].prog->ops;
      for (std::size_t i = 0; i < ops.size(); ++i)
        if (ops[i].kind == OpKind::recv) recv_of_[key(g, ops[i].peer, ops[i].tag)] = static_cast<std::uint32_t>(i);
    }
    for (std::uint32_t g = 0; g < groups_.size(); ++g)
      for (const auto& op : groups_[g].prog->ops)
        if (op.kind == OpKind::send) {
          const auto d = group_of(op.peer);
          if (!recv_of_.contains(key(d, groups_[g].worker, op.tag)))
            throw std::invalid_argument(fmt::format("ns-3 reference: worker {} sends tag {} to worker {}, which never "
                                                    "receives it",
                                                    groups_[g].worker, op.tag, op.peer));
          if (groups_[d].dc != groups_[g].dc) need_pair(g, d);
        } else if (op.kind == OpKind::allreduce && op.ring.size() >= 2) {
          for (std::size_t i = 0; i < op.ring.size(); ++i) {
            const auto a = group_of(op.ring[i]);
            const auto b = group_of(op.ring[(i + 1) % op.ring.size()]);
            if (groups_[a].dc != groups_[b].dc) need_pair(a, b);
          }
        }
  }

  static std::tuple<std::uint32_t, int, std::uint32_t> key(std::uint32_t group, int peer, std::uint32_t tag) {
    return {group, peer, tag};
  }

  std::uint32_t group_of(int worker) const {
    if (worker < 0 || static_cast<std::size_t>(worker) >= plan_.workers.size())
      throw std::invalid_argument(fmt::format("ns-3 reference: no worker {}", worker));
    return static_cast<std::uint32_t>(worker / tp_);
  }

  void need_pair(std::uint32_t a, std::uint32_t b) {
    const auto link = link_index(groups_[a].dc, groups_[b].dc);
    if (link == kNoLink)
      throw std::invalid_argument(fmt::format("ns-3 reference: lab {} has no WAN link from DC {} to DC {}", topo_.name,
                                              topo_.dcs[groups_[a].dc].name, topo_.dcs[groups_[b].dc].name));
    pairs_.emplace(std::make_pair(a, b), std::vector<std::size_t>{});
  }

  std::size_t link_index(std::size_t src, std::size_t dst) const {
    for (std::size_t i = 0; i < topo_.links.size(); ++i)
      if (topo_.links[i].src == src && topo_.links[i].dst == dst) return i;
    return kNoLink;
  }

  double link_rate(std::size_t i) const { return static_cast<double>(topo_.links[i].params.rate.bps) * sc_.scale; }

  void open_connections() {
    const int per_pair = tp_ * k_;
    for (auto& [pair, ids] : pairs_) {
      const auto& a = groups_[pair.first];
      const auto& b = groups_[pair.second];
      const auto link = link_index(a.dc, b.dc);
      // A windowed run paces each connection at most at the link's rate over a transfer's
      // connections (the lab's SO_MAX_PACING_RATE); otherwise Linux's (no limit).
      const double cap = exclusive_ ? link_rate(link) / per_pair : 1e12;
      for (int c = 0; c < per_pair; ++c) {
        ids.push_back(net_->add_connection(a.dc, b.dc, cap));
        conns_.push_back(std::make_unique<Conn>());
      }
    }
  }

  // ---- the clock ----

  Nanos now() const { return net_->now_ns() - opt_.warmup_ns; }

  void start() {
    net_->count_from_now();
    for (std::size_t i = 0; i < conns_.size(); ++i)
      if (!net_->connected(i))
        throw std::runtime_error(fmt::format(
            "ns-3 reference: {} of {} connections not open after the {} ms warm-up", conns_.size() - i, conns_.size(),
            opt_.warmup_ns / 1'000'000));
    started_ = true;
    for (std::uint32_t g = 0; g < groups_.size(); ++g) advance(g);
    check_end();
  }

  bool all_done() const {
    return std::all_of(groups_.begin(), groups_.end(), [](const Group& g) { return g.done; });
  }

  void check_end() {
    if (all_done()) net_->stop();
  }

  // ---- workers ----

  void advance(std::uint32_t gi) {
    auto& g = groups_[gi];
    const Nanos t = now();
    while (g.iteration < sc_.iterations) {
      const auto& ops = g.prog->ops;
      if (g.pc == 0 && g.allreduce_seq == 0 && g.report.iterations.size() == static_cast<std::size_t>(g.iteration))
        g.report.iterations.push_back({t, t});
      if (g.pc == ops.size()) {
        g.report.iterations.back().end_ns = t;
        ++g.iteration;
        g.pc = 0;
        g.allreduce_seq = 0;
        continue;
      }
      const auto& op = ops[g.pc];
      switch (op.kind) {
        case OpKind::forward:
        case OpKind::backward:
        case OpKind::optimizer: {
          double seconds = op.flops / plan_.effective_flops.at(static_cast<std::size_t>(g.worker));
          if (opt_.compute_jitter > 0) seconds *= 1 + jitter_(rng_);
          const auto d = static_cast<Nanos>(std::llround(seconds * 1e9));
          g.report.spans.push_back(Span{program::compute_span_kind(op.kind), g.iteration, op.microbatch, t, t + d, 0, -1});
          if (d > 0) {
            g.wait = Group::Wait::compute;
            net_->schedule(d, [this, gi] {
              auto& gg = groups_[gi];
              gg.wait = Group::Wait::none;
              ++gg.pc;
              advance(gi);
              check_end();
            });
            return;
          }
          ++g.pc;
          break;
        }
        case OpKind::send:
          send(gi, op, t);
          ++g.pc;
          break;
        case OpKind::recv: {
          const auto k = arrival_key(gi, g.pc, g.iteration);
          if (!arrived_.contains(k)) {
            g.wait = Group::Wait::recv;
            g.wait_op = g.pc;
            g.wait_from = t;
            return;
          }
          arrived_.erase(k);
          ++g.pc;
          break;
        }
        case OpKind::allreduce:
          if (op.ring.size() < 2) {
            ++g.pc;
            ++g.allreduce_seq;
            break;
          }
          g.wait = Group::Wait::allreduce;
          g.wait_from = t;
          enter_collective(gi, op, t);
          return;
      }
    }
    g.done = true;
  }

  std::uint64_t arrival_key(std::uint32_t group, std::size_t op, int iteration) const {
    return (static_cast<std::uint64_t>(group) << 40) | (static_cast<std::uint64_t>(op) << 16) |
           static_cast<std::uint64_t>(iteration);
  }

  void send(std::uint32_t gi, const program::Op& op, Nanos t) {
    auto& g = groups_[gi];
    const auto dst = group_of(op.peer);
    Message m;
    m.src = gi;
    m.dst = dst;
    m.slot = recv_of_.at(key(dst, g.worker, op.tag));
    m.iteration = g.iteration;
    m.span = g.report.spans.size();
    m.payload = static_cast<double>(op.bytes) * tp_;
    g.report.spans.push_back(Span{SpanKind::send, g.iteration, op.microbatch, t, t, op.bytes, op.peer});
    const auto id = static_cast<std::uint32_t>(messages_.size());
    const auto& d = groups_[dst];
    if (d.dc == g.dc) {
      messages_.push_back(m);
      const Nanos delay = d.node == g.node ? 0 : topo_.lan.delay.count();
      net_->schedule(delay, [this, id] { deliver(id); });
      return;
    }
    m.link = link_index(g.dc, d.dc);
    messages_.push_back(m);
    request_window(id, op, t);
    queue_parts(id, op.bytes * static_cast<std::uint64_t>(tp_));
  }

  void request_window(std::uint32_t id, const program::Op& op, Nanos t) {
    auto& m = messages_[id];
    workload::WanMessage wm;
    wm.src = groups_[m.src].worker;
    wm.dst = groups_[m.dst].worker;
    wm.kind = workload::transfer_kind(op.tag);
    wm.microbatch = op.microbatch;
    wm.iteration = m.iteration;
    wm.payload_bytes = m.payload;
    wm.ranks = tp_;
    wm.needed_at = needed_at(m.dst, m.slot);
    const auto spec = workload::transfer_request(plan_, wm);
    if (!links_added_) {
      for (std::size_t i = 0; i < topo_.links.size(); ++i) {
        const auto& li = topo_.links[i];
        arb_->add_link({li.src, li.dst}, link_rate(i), core::round_trip(topo_, li).count());
      }
      links_added_ = true;
    }
    m.transfer = arb_->request(spec, t);
    if (by_transfer_.size() <= m.transfer) {
      by_transfer_.resize(m.transfer + 1, kNone);
    }
    by_transfer_[m.transfer] = id;
    touch_arbiter();
  }

  Nanos needed_at(std::uint32_t group, std::uint32_t op) {
    auto it = needed_.find(group);
    if (it == needed_.end())
      it = needed_.emplace(group, workload::compute_before_each(plan_, groups_[group].worker)).first;
    return op < it->second.size() ? it->second[op] : 0;
  }

  // A message's bytes striped over its pair's connections, as the agents stripe them.
  void queue_parts(std::uint32_t id, std::uint64_t bytes) {
    auto& m = messages_[id];
    const auto& ids = pairs_.at({m.src, m.dst});
    const std::uint64_t c = ids.size();
    const std::uint64_t used = std::max<std::uint64_t>(1, std::min<std::uint64_t>(c, bytes));
    for (std::uint64_t i = 0; i < used; ++i) {
      const std::uint64_t b = bytes / used + (i < bytes % used ? 1 : 0);
      if (b == 0) continue;
      auto& cn = *conns_[ids[i]];
      cn.queued += b;
      const Part p{id, b, cn.queued};
      cn.to_write.push_back(p);
      cn.to_send.push_back(p);
      cn.to_recv.push_back(p);
      ++m.parts_left;
      ++m.parts_unsent;
    }
    payload_bytes_[m.link] += m.payload;
    if (m.parts_left == 0) {
      net_->schedule(topo_.links[m.link].params.delay.count(), [this, id] { deliver(id); });
      return;
    }
    for (std::uint64_t i = 0; i < used; ++i) pump(ids[i]);
  }

  // Writes what the connection's parts in order may send: a part only while its message's
  // window is granted (the gate).
  void pump(std::size_t ci) {
    auto& c = *conns_[ci];
    while (!c.to_write.empty()) {
      const auto& p = c.to_write.front();
      const auto& m = messages_[p.msg];
      if (!m.granted || m.paused) return;
      const auto took = net_->write(ci, p.end - c.written);
      if (took == 0) return;
      c.written += took;
      if (c.written >= p.end) c.to_write.pop_front();
    }
  }

  void on_sent(std::size_t ci, std::uint64_t sent) {
    auto& c = *conns_[ci];
    const std::uint64_t from = c.sent;
    c.sent = sent;
    const Nanos t = now();
    for (const auto& p : c.to_send) {
      const auto start = p.end - p.bytes;
      if (start >= c.sent) break;
      const auto lo = std::max(from, start), hi = std::min(c.sent, p.end);
      if (hi > lo) {
        auto& m = messages_[p.msg];
        m.sent += hi - lo;
        if (!m.first) m.first = t;
      }
    }
    while (!c.to_send.empty() && c.to_send.front().end <= c.sent) {
      auto& m = messages_[c.to_send.front().msg];
      if (--m.parts_unsent == 0) m.last = t;
      c.to_send.pop_front();
    }
  }

  void on_recv(std::size_t ci, std::uint64_t received) {
    auto& c = *conns_[ci];
    while (!c.to_recv.empty() && c.to_recv.front().end <= received) {
      const auto id = c.to_recv.front().msg;
      c.to_recv.pop_front();
      if (--messages_[id].parts_left == 0) net_->schedule(0, [this, id] { deliver(id); });
    }
  }

  void deliver(std::uint32_t id) {
    const Nanos t = now();
    auto& m = messages_[id];
    if (m.collective != kNone) {
      hop_done(m.collective, t - topo_.links[m.link].params.delay.count());
      return;
    }
    auto& src = groups_[m.src];
    src.report.spans[m.span].end_ns = t;
    if (m.transfer != 0) {
      if (m.windowed) {
        arb_->progress(m.transfer, static_cast<std::uint64_t>(m.payload * workload::kWireOverhead), t);
        m.windowed = false;
      }
      arb_->complete(m.transfer, t);
      touch_arbiter();
    }
    auto& d = groups_[m.dst];
    if (d.wait == Group::Wait::recv && d.wait_op == m.slot && d.iteration == m.iteration) {
      const auto& op = d.prog->ops[d.pc];
      if (t > d.wait_from)
        d.report.spans.push_back(Span{SpanKind::recv_wait, d.iteration, op.microbatch, d.wait_from, t, op.bytes, op.peer});
      d.wait = Group::Wait::none;
      ++d.pc;
      advance(m.dst);
      check_end();
      return;
    }
    arrived_.insert(arrival_key(m.dst, m.slot, m.iteration));
  }

  // ---- the arbiter ----

  void touch_arbiter() {
    if (settle_planned_) return;
    settle_planned_ = true;
    net_->schedule(0, [this] { settle(); });
  }

  void settle() {
    settle_planned_ = false;
    const Nanos t = now();
    arb_->advance(t);
    for (const auto& e : arb_->take_events()) {
      const auto id = e.id < by_transfer_.size() ? by_transfer_[e.id] : kNone;
      if (id == kNone) continue;
      auto& m = messages_[id];
      switch (e.kind) {
        case arbiter::Event::Kind::grant:
          if (!m.granted) {
            m.granted = true;
            if (exclusive_) {
              m.windowed = true;
              in_window_.push_back(id);
              plan_tick();
            }
          }
          m.paused = false;
          for (const auto ci : pairs_.at({m.src, m.dst})) pump(ci);
          break;
        case arbiter::Event::Kind::revoke:
          m.paused = true;
          break;
        case arbiter::Event::Kind::close:
        case arbiter::Event::Kind::done:
          break;
      }
    }
    if (const auto d = arb_->next_deadline(); d && *d != planned_deadline_) {
      planned_deadline_ = *d;
      const Nanos at = std::max(*d, t + 1);
      net_->schedule(at - t, [this] {
        if (const auto dl = arb_->next_deadline(); dl && *dl <= now()) touch_arbiter();
      });
    }
  }

  void plan_tick() {
    if (tick_planned_ || in_window_.empty()) return;
    tick_planned_ = true;
    const Nanos p = opt_.progress_period_ns;
    const Nanos t = now();
    const Nanos at = (t / p + 1) * p;
    net_->schedule(at - t, [this] { tick(); });
  }

  void tick() {
    tick_planned_ = false;
    std::erase_if(in_window_, [&](std::uint32_t id) { return !messages_[id].windowed; });
    const Nanos t = now();
    for (const auto id : in_window_) {
      const auto& m = messages_[id];
      arb_->progress(m.transfer, static_cast<std::uint64_t>(static_cast<double>(m.sent) * workload::kWireOverhead), t);
    }
    if (!in_window_.empty()) touch_arbiter();
    plan_tick();
  }

  // ---- all-reduce ----

  void enter_collective(std::uint32_t gi, const program::Op& op, Nanos t) {
    auto& g = groups_[gi];
    const auto k = std::make_tuple(op.ring.front(), g.iteration, g.allreduce_seq);
    auto it = open_.find(k);
    if (it == open_.end()) {
      Collective c;
      for (const int w : op.ring) c.members.push_back(group_of(w));
      c.entry.assign(c.members.size(), -1);
      c.steps = 2 * (op.ring.size() - 1);
      collectives_.push_back(std::move(c));
      it = open_.emplace(k, static_cast<std::uint32_t>(collectives_.size() - 1)).first;
    }
    const auto ci = it->second;
    auto& c = collectives_[ci];
    const auto pos = std::find(c.members.begin(), c.members.end(), gi);
    if (pos == c.members.end())
      throw std::invalid_argument(fmt::format("ns-3 reference: worker {} runs an all-reduce whose ring lacks it", g.worker));
    c.entry[static_cast<std::size_t>(pos - c.members.begin())] = t;
    if (++c.entered < static_cast<int>(c.members.size())) return;
    open_.erase(it);
    const auto n = c.members.size();
    const std::uint64_t hop =
        static_cast<std::uint64_t>(c.steps) * program::ring_chunk_bytes(op.bytes, n) * static_cast<std::uint64_t>(tp_);
    Nanos step_delay = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto a = c.members[i], b = c.members[(i + 1) % n];
      if (groups_[a].node == groups_[b].node) continue;
      if (groups_[a].dc == groups_[b].dc) {
        step_delay = std::max<Nanos>(step_delay, topo_.lan.delay.count());
        continue;
      }
      Message m;
      m.src = a;
      m.dst = b;
      m.payload = static_cast<double>(hop);
      m.link = link_index(groups_[a].dc, groups_[b].dc);
      m.collective = ci;
      m.granted = true;
      step_delay = std::max<Nanos>(step_delay, topo_.links[m.link].params.delay.count());
      const auto id = static_cast<std::uint32_t>(messages_.size());
      messages_.push_back(m);
      ++collectives_[ci].hops_left;
      queue_parts(id, hop);
    }
    auto& cc = collectives_[ci];
    cc.step_delay = step_delay;
    cc.last_finish = t;
    if (cc.hops_left == 0)
      net_->schedule(static_cast<Nanos>(cc.steps) * step_delay, [this, ci] { collective_end(ci); });
  }

  void hop_done(std::uint32_t ci, Nanos finish) {
    auto& c = collectives_[ci];
    c.last_finish = std::max(c.last_finish, finish);
    if (--c.hops_left > 0) return;
    const Nanos end = c.last_finish + static_cast<Nanos>(c.steps) * c.step_delay;
    net_->schedule(std::max<Nanos>(0, end - now()), [this, ci] { collective_end(ci); });
  }

  void collective_end(std::uint32_t ci) {
    const Nanos t = now();
    const auto& c = collectives_[ci];
    for (std::size_t i = 0; i < c.members.size(); ++i) {
      auto& g = groups_[c.members[i]];
      const auto& op = g.prog->ops[g.pc];
      g.report.spans.push_back(Span{SpanKind::allreduce, g.iteration, -1, c.entry[i], t, op.bytes, -1});
      g.wait = Group::Wait::none;
      ++g.pc;
      ++g.allreduce_seq;
    }
    for (const auto gi : c.members) advance(gi);
    check_end();
  }

  // ---- the end ----

  std::vector<workload::DeadlockError::Blocked> blocked_list() const {
    std::vector<workload::DeadlockError::Blocked> out;
    for (const auto& g : groups_) {
      if (!g.done)
        out.push_back(workload::DeadlockError::at(g.worker, g.iteration, g.pc, g.prog->ops.at(g.pc), "ns-3 reference"));
    }
    return out;
  }

  Result result() {
    Result out;
    auto& r = out.run;
    r.tp = tp_;
    for (auto& g : groups_) r.groups.push_back(std::move(g.report));
    for (std::size_t i = 0; i < topo_.links.size(); ++i)
      r.wan.push_back({topo_.links[i].src, topo_.links[i].dst, static_cast<double>(net_->link(i).wire_bytes),
                       payload_bytes_[i]});
    r.windows = arb_->windows();
    r.wire.resize(by_transfer_.size());
    for (std::size_t t = 0; t < by_transfer_.size(); ++t)
      if (by_transfer_[t] != kNone) r.wire[t] = {messages_[by_transfer_[t]].first, messages_[by_transfer_[t]].last};
    for (const auto& [pair, ids] : pairs_) {
      sim::TcpEnd e;
      e.src = groups_[pair.first].worker;
      e.dst = groups_[pair.second].worker;
      e.connections = static_cast<int>(ids.size());
      double n = 0;
      PairRecovery rec;
      for (const auto id : ids) {
        const auto c = net_->conn_end(id);
        rec.recoveries += c.recoveries;
        rec.timeouts += c.timeouts;
        rec.rto_ns += c.rto_ns / static_cast<double>(ids.size());
        if (c.cwnd_bytes <= 0) continue;
        e.cwnd_bytes += c.cwnd_bytes;
        e.ssthresh_bytes += c.ssthresh_bytes;
        e.srtt_ns += c.srtt_ns;
        n += 1;
      }
      if (n == 0) continue;
      e.cwnd_bytes /= n;
      e.ssthresh_bytes /= n;
      if (e.ssthresh_bytes >= 1e9) e.ssthresh_bytes = std::numeric_limits<double>::infinity();
      e.srtt_ns /= n;
      r.tcp.push_back(e);
      out.recovery.push_back(rec);
    }
    r.stats.transfers = by_transfer_.empty() ? 0 : by_transfer_.size() - 1;
    for (std::size_t i = 0; i < queues_.size(); ++i) {
      const auto n = net_->link(i);
      queues_[i].drops = n.drops;
      queues_[i].dropped_bytes = n.dropped_bytes;
      queues_[i].packets = n.packets;
      const auto& q = queues_[i];
      r.stats.overflows += q.drops;
      r.stats.overflow_bytes += static_cast<double>(q.dropped_bytes);
    }
    r.stats.simulated_workers = groups_.size();
    r.stats.flows = messages_.size();
    out.queues = queues_;
    out.connections = conns_.size();
    return out;
  }

  const workload::Plan& plan_;
  const Options opt_;
  const workload::Scenario& sc_;
  const core::Topology& topo_;
  const int tp_;
  const int k_;
  const double window_;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> jitter_;
  bool exclusive_ = false;
  std::unique_ptr<arbiter::Arbiter> arb_;
  bool links_added_ = false;

  std::vector<std::size_t> node_base_;
  std::vector<Group> groups_;
  std::map<std::tuple<std::uint32_t, int, std::uint32_t>, std::uint32_t> recv_of_;
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::vector<std::size_t>> pairs_;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::map<std::uint32_t, std::vector<std::int64_t>> needed_;

  std::unique_ptr<PacketNet> net_;
  std::vector<LinkQueue> queues_;
  std::vector<double> payload_bytes_;

  std::vector<Message> messages_;
  std::vector<std::uint32_t> by_transfer_;
  std::vector<std::uint32_t> in_window_;
  std::unordered_set<std::uint64_t> arrived_;
  std::vector<Collective> collectives_;
  std::map<std::tuple<int, int, int>, std::uint32_t> open_;
  bool started_ = false;
  bool settle_planned_ = false;
  bool tick_planned_ = false;
  Nanos planned_deadline_ = -1;
};

}  // namespace

Result run(const workload::Plan& plan, const Options& options) {
  return Reference(plan, options).run();
}

}  // namespace wanlab::ns3ref
