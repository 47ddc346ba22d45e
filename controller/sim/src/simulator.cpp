#include "wanlab/sim/simulator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <deque>
#include <queue>
#include <random>
#include <stdexcept>
#include <tuple>
#include <unordered_set>

#include "wanlab/sim/flow_network.hpp"
#include "wanlab/workload/execute.hpp"

namespace wanlab::sim {
namespace {

using arbiter::Nanos;
using program::Op;
using program::OpKind;
using program::Span;
using program::SpanKind;
constexpr std::uint32_t kNone = 0xffffffffu;
constexpr std::size_t kNoLink = static_cast<std::size_t>(-1);
constexpr double kCubicBeta = 0.7;  // CUBIC's window after a loss, as a fraction of before
// CUBIC's TCP-friendly growth in congestion avoidance, segments per window ACKed:
// 3 beta' / (2 - beta') with beta' = 1 - kCubicBeta.
constexpr double kRenoFriendly = 3 * (1 - kCubicBeta) / (2 - (1 - kCubicBeta));
constexpr double kHystartLowWindow = 16;  // segments: HyStart waits for this window
// Bursts::paced: pieces get long (paced_piece_ns_per_message per message entering a link
// at once) from this many paced_piece_ns on. Below, 1 ms pieces are cheap enough, and long
// pieces of 1.6-3.2 ms were 3-6 % off the 1 ms result (three-dc-7b at 384-768 GPUs);
// from 6.4 ms on they are within 1 % (bench/README.md, "Speed").
constexpr std::int64_t kLongPieces = 4;

enum class Ev : std::uint8_t {
  wake, deliver, collective_end, deadline, tick, capacity, slow_start, retransmit, paced_cut, paced_resend, paced_ack,
  stream_check
};
struct Event {
  Nanos at;
  std::uint64_t seq;
  Ev kind;
  std::uint32_t a;
  std::uint32_t b;
  bool operator>(const Event& o) const { return at != o.at ? at > o.at : seq > o.seq; }
};

class Simulation {
 public:
  Simulation(const workload::Plan& plan, const SimOptions& opt)
      : plan_(plan),
        opt_(opt),
        sc_(plan.scenario),
        tp_(sc_.parallelism.tp),
        k_(sc_.connections),
        window_(opt.tcp_window_bytes.value_or(workload::run_tcp_window(plan.scenario))),
        jitter_rng_(plan.scenario.seed),
        jitter_(-opt.compute_jitter, opt.compute_jitter) {
    if (sc_.iterations < 0) throw std::invalid_argument("simulate: negative iterations");
    if (!(window_ >= 0) || !(opt.initial_window_bytes > 0) || opt.progress_period_ns <= 0)
      throw std::invalid_argument("simulate: tcp window, initial window and progress period must be positive");
    if (!(opt.pacing_ratio > 0) || opt.paced_piece_ns <= 0 || opt.paced_piece_ns_per_message < 0 || opt.paced_stream_ns < 0)
      throw std::invalid_argument(
          "simulate: the pacing ratio and the paced piece length must be positive, the piece length per message and "
          "the streamed piece length at least 0");
    if (!(opt.compute_jitter >= 0 && opt.compute_jitter <= 0.5))
      throw std::invalid_argument(fmt::format("simulate: compute jitter {}: give a fraction from 0 to 0.5", opt.compute_jitter));
    auto policy = arbiter::make_policy(sc_.policy);
    exclusive_ = policy->exclusive();
    auto ao = opt.arbiter;
    if (ao.tcp_window_bytes == 0) ao.tcp_window_bytes = window_;
    arb_ = std::make_unique<arbiter::Arbiter>(std::move(policy), ao);
    build_network();
    build_groups();
  }

  SimResult run() {
    for (std::uint32_t g = 0; g < groups_.size(); ++g) push(0, Ev::wake, g);
    for (std::uint32_t i = 0; i < opt_.traces.size(); ++i) schedule_trace_step(i, 0, 0);
    Nanos now = 0;
    for (;;) {
      settle(now);
      std::optional<Nanos> next;
      if (!events_.empty()) next = events_.top().at;
      if (const auto f = net_.next_finish(); f && (!next || *f < *next)) next = f;
      if (!next || all_done()) break;
      now = std::max(now, *next);
    }
    if (!all_done()) throw workload::DeadlockError(blocked());
    for (std::size_t link = 0; link < paced_.size(); ++link) acks_in(link, now);  // for the report
    return result();
  }

 private:
  // One op of a simulated program, what the event loop reads of it, in one array by slot
  // (ops_): the TP rank-0 programs' ops side by side, half an Op's size, not scattered
  // among the other ranks' programs (at 16,384 GPUs the plan's programs span hundreds of MB).
  struct SimOp {
    OpKind kind = OpKind::forward;
    bool gradient = false;  // send: an odd tag, a gradient (else an activation)
    int microbatch = -1;
    int peer = -1;
    std::uint32_t target = kNone;  // send: the receiver's slot
    std::uint64_t bytes = 0;
    double seconds = 0;  // compute: FLOPs / the worker's effective FLOP/s
  };
  struct Group {
    int worker = 0;  // TP rank 0 of its (stage, replica)
    const program::WorkerProgram* prog = nullptr;
    std::size_t dc = 0;
    std::size_t node = 0;  // global node index
    int iteration = 0;
    std::size_t pc = 0;
    Nanos t = 0;
    enum class Wait { none, compute, recv, allreduce } wait = Wait::none;
    std::uint32_t wait_slot = kNone;
    Nanos wait_from = 0;
    int allreduce_seq = 0;
    std::uint32_t slot_base = 0;  // slot of op i: slot_base + i (ops_)
    std::size_t nops = 0;
    program::WorkerReport report;
    bool done = false;
  };
  struct Connection;
  struct Message {
    std::uint32_t src = 0, dst = 0;  // groups
    Connection* conn = nullptr;      // connections_[{src, dst}], from when its flow is started
    std::uint32_t slot = 0;
    int iteration = 0;
    std::size_t span = 0;  // the sender's send span
    double payload = 0;    // all TP ranks' shares
    std::size_t link = kNoLink;  // topology link, WAN messages only
    Nanos delay = 0;
    arbiter::TransferId transfer = 0;
    std::uint32_t flow = kNone;
    double ceiling = kUnlimited;  // per connection, bit/s
    double cwnd = 0;              // slow start: bytes per connection
    bool granted = false;
    bool burst = false;  // fits in its connections' windows: queued whole at the link
    bool paused = false;
    bool windowed = false;  // holds or held a window, not yet delivered
    int parts = 0;          // a burst's parts queued, on the link or waiting to be sent again
    double lost = 0;        // wire bytes lost to a full queue, waiting for their retransmission
    // Bursts::paced: the message enters its link's queue from when it starts, paced and
    // within its connections' window.
    bool paced = false;
    double entered = 0;     // wire bytes sent into the queue (less what it dropped), as of the last cut
    Nanos entry_end = -1;   // when its last byte entered
    Nanos first_loss = -1;  // when the queue first dropped some of it (`lost`: how much)
    bool resending = false; // its lost bytes are entering again
    bool entering = false;  // in its link's `entering` list (entering, not paused)
    Nanos since = -1;       // the next cut credits it from here, not from the last cut (it could
                            // not send before: its window was full; or it started since)
    double stream_rate = -1;  // >= 0: its pace for the streamed piece now open (paced_stream())
  };
  struct Collective {
    std::vector<std::uint32_t> members;  // groups, ring order
    std::vector<Nanos> entry;
    int entered = 0;
    int iteration = 0;
    int hops_left = 0;
    Nanos last_finish = 0;
    Nanos step_delay = 0;
    std::size_t steps = 0;
  };
  struct FlowOwner {
    bool collective = false;
    bool ack = false;  // the ACKs of a data flow (`link`: the reverse link they cross)
    std::uint32_t index = 0;
    std::size_t link = kNoLink;  // WAN link it crosses, for the totals
    double payload = 0;
    bool paced = false;  // serves the first piece of `link`'s paced queue
  };
  // The connections of one (sender, receiver) pair: a message is written to them after the
  // ones before it (the agents' data plane queues messages per pair), so its flow starts
  // when the previous message's has left; and, with slow start, their window.
  struct Connection {
    double cwnd = 0;
    Nanos last_active = -1;
    bool busy = false;
    // Bursts::paced, per connection (the pair's tp x connections connections alike): the
    // congestion window, the slow-start threshold, bytes in flight (sent, not yet ACKed or
    // found lost), the smoothed RTT; losses before `recovery_until` are the same event.
    double pcwnd = 0;
    double ssthresh = std::numeric_limits<double>::infinity();
    double inflight = 0;
    double srtt = 0;  // ns
    Nanos recovery_until = -1;
    double resent = 0;      // bytes lost and sent again
    Nanos round_mark = -1;  // HyStart: ACKs of what was sent from here on start a new round
    bool round_sampled = true;
    std::deque<std::pair<std::uint32_t, std::vector<FlowNetwork::LinkId>>> queue;  // message, path
  };
  // Bursts::paced: a WAN link's FIFO queue, as the pieces that entered it. A piece is what
  // the bursts entering at once put in between two cuts (a burst's start or end, or
  // paced_piece_ns); its bytes interleave, so it leaves as one flow, and a burst whose last
  // byte is in it is off the link when it is. Its ACKs leave when an exact FIFO would have
  // sent its bytes (paced_piece_left()).
  struct Piece {
    double bytes = 0;
    double weight = 0;                // connections that put bytes in it
    Nanos at = 0;                     // when it was cut (its bytes entered just before)
    std::vector<std::pair<std::uint32_t, double>> parts;  // message, wire bytes
    std::vector<std::uint32_t> last;  // messages whose last bytes it holds
    bool open = false;                // streamed: still filling while the link sends it
    Nanos opened = 0;                 // when its first bytes began to enter
    Nanos served_at = -1;             // when the link got to it (-1: not yet)
    Nanos caught_at = -1;             // streamed: when the link caught up with it, from when it
                                      // sends at stream_pace (-1: not yet, or never)
    double stream_pace = 0;           // streamed: bytes per ns it fills at
    bool sent = false;                // streamed and open: its flow has ended
    bool streamed = false;            // cut from a streamed piece: `rates` are its parts' paces
    std::vector<double> rates;
  };
  struct Ack {  // a piece's ACKs reaching its senders
    Nanos at = 0;    // when they are taken in (on the pieces' grid)
    Nanos sent = 0;  // when their bytes entered (the piece's cut)
    Nanos back = 0;  // when they came back: the RTT sample is back - sent
    std::vector<std::pair<std::uint32_t, double>> parts;
  };
  struct PacedLink {
    std::vector<std::uint32_t> entering;  // messages entering the queue now
    Nanos from = 0;                       // the last cut
    std::deque<Piece> pieces;             // cut, waiting or on the link (the first)
    double queued = 0;                    // their bytes
    std::deque<Ack> acks;                 // pieces off the link whose ACKs are on their way
    std::uint32_t server = kNone;         // the flow sending the first piece
    std::uint32_t gen = 0;                // cut events of another generation are stale
    Nanos next_cut = -1;                  // the cut scheduled (-1: none)
    bool streaming = false;               // the open piece is sent as it fills (paced_stream())
    Nanos armed = -1;                     // the ACKs due then have their event
    std::uint32_t stream_bundle = kNone;  // the flow network's bundle for streamed pieces
    Nanos fluid_end = 0;                  // when an exact FIFO would have sent all that left
    std::uint32_t piece_bundle = kNone;   // and for the others (no ceiling: found once, not per piece)
  };

  // ---- setup ----

  void build_network() {
    const auto& topo = plan_.topology;
    const auto ndc = topo.dcs.size();
    link_of_.assign(ndc, std::vector<std::size_t>(ndc, kNoLink));
    for (std::size_t i = 0; i < topo.links.size(); ++i) {
      const auto& l = topo.links[i];
      link_of_[l.src][l.dst] = i;
      const auto* back = topo.find_link(l.dst, l.src);
      const Nanos rtt = l.params.delay.count() + (back ? back->params.delay.count() : l.params.delay.count());
      const double rate = static_cast<double>(l.params.rate.bps) * sc_.scale;
      wan_.push_back(net_.add_link(rate));
      wan_rate_.push_back(rate);
      reverse_.push_back(back ? static_cast<std::size_t>(back - topo.links.data()) : kNoLink);
      wan_delay_.push_back(l.params.delay.count());
      wan_rtt_.push_back(rtt);
      // SO_MAX_PACING_RATE of a windowed run's connections: the link's rate over them
      // (bytes per ns per connection).
      pace_cap_.push_back(static_cast<double>(l.params.rate.bps) * sc_.scale / 8e9 / (tp_ * k_));
      wan_ceiling_.push_back(window_ > 0 && rtt > 0
                                 ? window_ * 8e9 / static_cast<double>(rtt)
                                 : kUnlimited);
      arb_->add_link({l.src, l.dst}, rate, rtt);
      totals_.push_back({l.src, l.dst, 0, 0});
    }
    burst_busy_.assign(topo.links.size(), false);
    burst_queue_.resize(topo.links.size());
    burst_flow_.assign(topo.links.size(), kNone);
    burst_queued_bytes_.assign(topo.links.size(), 0.0);
    paced_.resize(topo.links.size());
    acks_for_.assign(topo.links.size(), 0.0);
    wan_queue_link_ = topo.links;
    queue_limit_.assign(topo.links.size(), {-1.0, 0.0});
    double lan = static_cast<double>(topo.lan.rate.bps) * sc_.scale;
    if (opt_.lan_rate_bps) lan = *opt_.lan_rate_bps;
    if (!(lan >= 0)) throw std::invalid_argument(fmt::format("simulate: LAN rate {} bit/s", lan));
    lan_limited_ = lan > 0;
    lan_delay_ = topo.lan.delay.count();
    std::size_t nodes = 0;
    for (const auto& dc : topo.dcs) {
      node_base_.push_back(nodes);
      nodes += static_cast<std::size_t>(dc.nodes);
    }
    if (lan_limited_)
      for (std::size_t n = 0; n < nodes; ++n) {
        node_up_.push_back(net_.add_link(lan));
        node_down_.push_back(net_.add_link(lan));
      }
  }

  std::uint32_t group_of(int worker) const {
    if (worker < 0 || static_cast<std::size_t>(worker) >= plan_.workers.size() || worker % tp_ != 0)
      throw std::invalid_argument(fmt::format("simulate: worker {} is not TP rank 0 of a worker of the plan", worker));
    return static_cast<std::uint32_t>(worker / tp_);
  }

  void build_groups() {
    const auto& par = sc_.parallelism;
    if (plan_.programs.size() != plan_.workers.size() || plan_.workers.size() != static_cast<std::size_t>(par.gpus()))
      throw std::invalid_argument("simulate: the plan's programs and workers do not match its parallelism");
    const auto ngroups = plan_.workers.size() / static_cast<std::size_t>(tp_);
    groups_.resize(ngroups);
    std::uint32_t slots = 0;
    for (std::size_t g = 0; g < ngroups; ++g) {
      auto& gr = groups_[g];
      gr.worker = static_cast<int>(g) * tp_;
      gr.prog = &plan_.programs.at(static_cast<std::size_t>(gr.worker));
      if (gr.prog->worker != gr.worker) throw std::invalid_argument("simulate: programs must be in worker id order");
      const auto& w = plan_.workers.at(static_cast<std::size_t>(gr.worker));
      // The symmetry the simulator relies on: a replica's TP ranks share one node.
      for (int t = 1; t < tp_; ++t) {
        const auto& o = plan_.workers.at(static_cast<std::size_t>(gr.worker + t));
        if (o.dc != w.dc || o.node != w.node)
          throw std::invalid_argument(
              fmt::format("simulate: the TP ranks of stage {} replica {} are not on one node", w.stage, w.dp_rank));
      }
      gr.dc = w.dc;
      gr.node = node_base_.at(w.dc) + static_cast<std::size_t>(w.node);
      gr.slot_base = slots;
      gr.nops = gr.prog->ops.size();
      slots += static_cast<std::uint32_t>(gr.nops);
      gr.report.worker = gr.worker;
    }
    // One pass over the plan's programs: the ops the event loop reads (ops_), every recv
    // and every send. Then each send's matching recv: the receiver's recvs sorted by
    // (sender, tag), one flat table with a range per receiver, searched per send (a scan
    // of the receiver's program per send was quadratic in micro-batches). A tag repeated
    // between one pair matches its last recv, as the scan did.
    struct Recv {
      int peer = 0;
      std::uint32_t tag = 0;
      std::uint32_t slot = 0;
    };
    struct Send {
      std::uint32_t group = 0;
      std::uint32_t slot = 0;
      std::uint32_t tag = 0;
    };
    const auto by_peer_tag = [](const Recv& a, const Recv& b) { return std::tie(a.peer, a.tag) < std::tie(b.peer, b.tag); };
    std::vector<Recv> recvs;
    std::vector<Send> sends;
    std::vector<std::size_t> recv_begin(groups_.size() + 1, 0);
    ops_.resize(slots);
    for (std::uint32_t gi = 0; gi < groups_.size(); ++gi) {
      auto& gr = groups_[gi];
      const double flops_per_s = plan_.effective_flops.at(static_cast<std::size_t>(gr.worker));
      recv_begin[gi] = recvs.size();
      for (std::size_t i = 0; i < gr.nops; ++i) {
        const auto& op = gr.prog->ops[i];
        const auto slot = gr.slot_base + static_cast<std::uint32_t>(i);
        auto& o = ops_[slot];
        o.kind = op.kind;
        o.gradient = op.tag % 2 != 0;
        o.microbatch = op.microbatch;
        o.peer = op.peer;
        o.bytes = op.bytes;
        if (op.kind == OpKind::forward || op.kind == OpKind::backward || op.kind == OpKind::optimizer)
          o.seconds = op.flops / flops_per_s;
        if (op.kind == OpKind::recv) recvs.push_back({op.peer, op.tag, slot});
        if (op.kind == OpKind::send) sends.push_back({gi, slot, op.tag});
      }
      std::stable_sort(recvs.begin() + static_cast<std::ptrdiff_t>(recv_begin[gi]), recvs.end(), by_peer_tag);
      // The spans it will report: at most one per op and iteration.
      gr.report.spans.reserve(gr.nops * static_cast<std::size_t>(std::max(sc_.iterations, 0)));
    }
    recv_begin[groups_.size()] = recvs.size();
    for (const auto& x : sends) {
      const auto& gr = groups_[x.group];
      auto& op = ops_[x.slot];
      const auto dst = group_of(op.peer);
      const auto first = recvs.begin() + static_cast<std::ptrdiff_t>(recv_begin[dst]);
      const auto last = recvs.begin() + static_cast<std::ptrdiff_t>(recv_begin[dst + 1]);
      const auto it = std::upper_bound(first, last, Recv{gr.worker, x.tag, 0}, by_peer_tag);
      if (it != first && std::prev(it)->peer == gr.worker && std::prev(it)->tag == x.tag) op.target = std::prev(it)->slot;
      if (op.target == kNone)
        throw std::invalid_argument(fmt::format("simulate: worker {} sends tag {} to worker {}, which never receives it",
                                                gr.worker, x.tag, op.peer));
      if (gr.dc != groups_[dst].dc && link_of_[gr.dc][groups_[dst].dc] == kNoLink)
        throw std::invalid_argument(fmt::format("simulate: lab {} has no WAN link from DC {} to DC {}",
                                                plan_.topology.name, plan_.topology.dcs[gr.dc].name,
                                                plan_.topology.dcs[groups_[dst].dc].name));
    }
    slot_owner_.resize(slots);
    for (std::uint32_t g = 0; g < groups_.size(); ++g)
      for (std::size_t i = 0; i < groups_[g].nops; ++i) slot_owner_[groups_[g].slot_base + i] = g;
  }

  // ---- events ----

  void push(Nanos at, Ev kind, std::uint32_t a, std::uint32_t b = 0) { events_.push({at, seq_++, kind, a, b}); }

  // Everything that happens at `now`, until nothing more does.
  void settle(Nanos now) {
    for (;;) {
      bool any = false;
      net_.take_finished(now, finished_);
      for (const auto f : finished_) {
        flow_finished(f, now);
        any = true;
      }
      while (!events_.empty() && events_.top().at <= now) {
        const auto e = events_.top();
        events_.pop();
        ++stats_.events;
        handle(e, now);
        any = true;
      }
      if (arbiter_touched_) {
        arbiter_touched_ = false;
        arb_->advance(now);
        any = true;
      }
      for (const auto& ev : arb_->take_events()) arbiter_event(ev, now);
      for (const auto link : idle_check_)
        if (paced_[link].server == kNone && paced_[link].pieces.empty()) reserve_acks(link, 0, now);
      idle_check_.clear();
      net_.update(now);
      if (const auto d = arb_->next_deadline(); d && *d != planned_deadline_) {
        planned_deadline_ = *d;
        push(std::max(*d, now + 1), Ev::deadline, 0);
      }
      const auto f = net_.next_finish();
      const bool finishing = f && *f <= now;
      if (!any && !finishing) return;
      // Another pass only if something is left at `now` (it would find nothing else).
      if (!finishing && (events_.empty() || events_.top().at > now) && !arbiter_touched_ && !arb_->has_events() &&
          idle_check_.empty())
        return;
    }
  }

  void handle(const Event& e, Nanos now) {
    switch (e.kind) {
      case Ev::wake: {
        auto& g = groups_[e.a];
        if (g.wait == Group::Wait::compute) {
          g.wait = Group::Wait::none;
          ++g.pc;
        }
        advance(e.a, now);
        break;
      }
      case Ev::deliver:
        deliver(e.a, now);
        break;
      case Ev::collective_end:
        collective_end(e.a, now);
        break;
      case Ev::deadline:
        // Deadlines move on with every progress report; only one still due matters.
        if (const auto d = arb_->next_deadline(); d && *d <= now) arbiter_touched_ = true;
        break;
      case Ev::tick:
        tick(now);
        break;
      case Ev::capacity:
        capacity_step(e.a, e.b, now);
        break;
      case Ev::slow_start:
        slow_start_step(e.a, now);
        break;
      case Ev::paced_cut:
        if (e.b == paced_[e.a].gen) {
          paced_[e.a].next_cut = -1;
          paced_cut(e.a, now);
          paced_schedule(e.a, now);
        }
        break;
      case Ev::paced_resend: {
        // The sender has found out: what was lost is no longer in flight, and enters again.
        auto& m = messages_[e.a];
        acks_in(m.link, now);
        if (!long_pieces(paced_[m.link])) paced_cut(m.link, now);
        m.conn->inflight -= m.lost / weight_of(m);
        m.lost = 0;
        m.first_loss = -1;
        m.entry_end = -1;
        m.resending = true;
        if (!m.paused && !m.entering) {  // else when its window opens again
          m.since = now;
          paced_enter(e.a);
        }
        paced_schedule(m.link, now);
        break;
      }
      case Ev::paced_ack:
        paced_acks(e.a, now);
        break;
      case Ev::stream_check:
        if (e.b == paced_[e.a].gen) stream_check(e.a, now);
        break;
      case Ev::retransmit: {
        auto& m = messages_[e.a];
        const double bytes = m.lost;
        m.lost = 0;
        --m.parts;
        enqueue_burst(e.a, bytes, nullptr, now, /*resent=*/true);
        break;
      }
    }
  }

  // ---- workers ----

  void advance(std::uint32_t gi, Nanos now) {
    auto& g = groups_[gi];
    g.t = now;
    while (g.iteration < sc_.iterations) {
      if (g.pc == 0 && g.allreduce_seq == 0 && g.report.iterations.size() == static_cast<std::size_t>(g.iteration))
        g.report.iterations.push_back({g.t, g.t});
      if (g.pc == g.nops) {
        g.report.iterations.back().end_ns = g.t;
        ++g.iteration;
        g.pc = 0;
        g.allreduce_seq = 0;
        continue;
      }
      const auto& op = ops_[g.slot_base + g.pc];
      switch (op.kind) {
        case OpKind::forward:
        case OpKind::backward:
        case OpKind::optimizer: {
          double seconds = op.seconds;
          if (opt_.compute_jitter > 0) seconds *= 1 + jitter_(jitter_rng_);
          const auto d = static_cast<Nanos>(std::llround(seconds * 1e9));
          g.report.spans.push_back(Span{program::compute_span_kind(op.kind), g.iteration, op.microbatch, g.t, g.t + d, 0, -1});
          if (d > 0) {
            g.wait = Group::Wait::compute;
            g.t += d;
            push(g.t, Ev::wake, gi);
            return;
          }
          ++g.pc;
          break;
        }
        case OpKind::send:
          send(gi, op, now);
          ++g.pc;
          break;
        case OpKind::recv: {
          const auto slot = g.slot_base + static_cast<std::uint32_t>(g.pc);
          if (!arrived_.contains(arrival_key(slot, g.iteration))) {
            g.wait = Group::Wait::recv;
            g.wait_slot = slot;
            g.wait_from = g.t;
            return;
          }
          arrived_.erase(arrival_key(slot, g.iteration));
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
          enter_collective(gi, g.prog->ops[g.pc], now);
          return;
      }
    }
    g.done = true;
  }

  std::uint64_t arrival_key(std::uint32_t slot, int iteration) const {
    return static_cast<std::uint64_t>(slot) * static_cast<std::uint64_t>(sc_.iterations + 1) +
           static_cast<std::uint64_t>(iteration);
  }

  void send(std::uint32_t gi, const SimOp& op, Nanos now) {
    auto& g = groups_[gi];
    const auto slot = op.target;
    const auto dst = slot_owner_[slot];
    Message m;
    m.src = gi;
    m.dst = dst;
    m.slot = slot;
    m.iteration = g.iteration;
    m.span = g.report.spans.size();
    m.payload = static_cast<double>(op.bytes) * tp_;
    g.report.spans.push_back(Span{SpanKind::send, g.iteration, op.microbatch, now, now, op.bytes, op.peer});
    const auto id = static_cast<std::uint32_t>(messages_.size());
    const auto& d = groups_[dst];
    if (d.dc != g.dc) {
      m.link = link_of_[g.dc][d.dc];
      m.delay = wan_delay_[m.link];
      m.ceiling = wan_ceiling_[m.link];
      messages_.push_back(m);
      request_window(id, op, now);
      return;
    }
    messages_.push_back(m);
    if (d.node == g.node) {
      push(now, Ev::deliver, id);
    } else if (!lan_limited_) {
      push(now + lan_delay_, Ev::deliver, id);
    } else {
      messages_[id].delay = lan_delay_;
      start_message_flow(id, {node_up_[g.node], node_down_[d.node]}, now);
    }
  }

  void request_window(std::uint32_t id, const SimOp& op, Nanos now) {
    auto& m = messages_[id];
    const auto& src = groups_[m.src];
    const auto& dst = groups_[m.dst];
    const auto& ws = plan_.workers.at(static_cast<std::size_t>(src.worker));
    const auto& wd = plan_.workers.at(static_cast<std::size_t>(dst.worker));
    const auto& l = plan_.topology.links[m.link];
    arbiter::TransferSpec spec;
    spec.link = {l.src, l.dst};
    spec.bytes = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::ceil(m.payload * workload::kWireOverhead)));
    spec.kind = op.gradient ? arbiter::TransferKind::gradient : arbiter::TransferKind::activation;
    spec.iteration = m.iteration;
    spec.pipeline = ws.dp_rank;
    spec.src_stage = ws.stage;
    spec.dst_stage = wd.stage;
    spec.microbatch = op.microbatch;
    spec.needed_at = needed_at(m.slot);
    spec.connections = tp_ * k_;
    m.transfer = arb_->request(spec, now);
    if (by_transfer_.size() <= m.transfer) {
      by_transfer_.resize(m.transfer + 1, kNone);
      wire_.resize(m.transfer + 1);
    }
    by_transfer_[m.transfer] = id;
    ++stats_.transfers;
    arbiter_touched_ = true;
  }

  Nanos needed_at(std::uint32_t slot) {
    if (needed_at_.empty()) needed_at_.assign(slot_owner_.size(), -1);
    if (needed_at_[slot] < 0) {
      // Every slot of the group at once, in one pass over its program (one call of
      // compute_before() per slot would scan the program again each time: quadratic in
      // micro-batches).
      const auto& g = groups_[slot_owner_[slot]];
      const auto each = workload::compute_before_each(plan_, g.worker);
      for (std::size_t i = 0; i + 1 < each.size(); ++i) needed_at_[g.slot_base + i] = each[i];
    }
    return needed_at_[slot];
  }

  // `sent_from`: a paced message may enter from then (its connections were free then).
  void start_message_flow(std::uint32_t id, const std::vector<FlowNetwork::LinkId>& path, Nanos now,
                          Nanos sent_from = -1) {
    auto& m = messages_[id];
    if (!m.conn) m.conn = &connections_[{m.src, m.dst}];  // std::map: the node stays put
    auto& conn = *m.conn;
    if (conn.busy) {
      conn.queue.emplace_back(id, path);
      return;
    }
    conn.busy = true;
    const double weight = weight_of(m);
    double ceiling = m.ceiling;
    const double wire = m.payload * workload::kWireOverhead;
    const bool fits = m.link != kNoLink && window_ > 0 && !opt_.slow_start && wire / weight <= window_;
    if (fits && opt_.bursts == SimOptions::Bursts::paced) {
      start_paced(id, now, sent_from);
      return;
    }
    if (fits && opt_.bursts == SimOptions::Bursts::fifo) {
      // A message within its connections' windows leaves at once and waits in the link's
      // queue whole: the link serves such bursts in arrival order, each at the full rate.
      m.burst = true;
      enqueue_burst(id, wire, &path, now);
      return;
    }
    if (m.link != kNoLink && opt_.slow_start && std::isfinite(ceiling)) {
      auto& c = conn;
      const Nanos rto = std::max<Nanos>(200'000'000, wan_rtt_[m.link]);
      if (c.cwnd <= 0 || (sc_.tcp_slow_start_after_idle && c.last_active >= 0 && now - c.last_active > rto))
        c.cwnd = opt_.initial_window_bytes;
      m.cwnd = std::min(c.cwnd, window_);
      ceiling = m.cwnd * 8e9 / static_cast<double>(wan_rtt_[m.link]);
      if (m.cwnd < window_) push(now + wan_rtt_[m.link], Ev::slow_start, id);
    }
    m.flow = net_.start(path, wire, weight, ceiling, now);
    on_wire(m, now);
    set_owner(m.flow, {false, false, id, m.link, m.payload});
    if (m.link != kNoLink) start_acks(m.link, wire, m.ceiling * weight, now);
  }

  // The ACKs of `wire` bytes of data on WAN link `link`, as a flow on the reverse link at
  // kAckFraction of the data's rate (at most the forward link's rate, or `ceiling_bps`,
  // the data's own ceiling over all its connections).
  void start_acks(std::size_t link, double wire, double ceiling_bps, Nanos now) {
    if (!opt_.acks || wire <= 0) return;
    const auto back = reverse_[link];
    if (back == kNoLink) return;
    const double fwd = std::min(wan_rate_[link], ceiling_bps);
    if (!(fwd > 0)) return;
    const auto f = net_.start({wan_[back]}, wire * kAckFraction, 1, fwd * kAckFraction, now);
    set_owner(f, {false, true, 0, back, 0});
  }

  // A burst reaches its link's queue: what the queue has no room for is lost and sent again
  // after a retransmission timeout (SimOptions::queue_overflow); the rest waits its turn.
  // What is sent again (`resent`) comes back in slow start, clocked by its ACKs, and is not
  // lost again. `path`: the message's path when it starts at once (the first part), else
  // the WAN link alone.
  void enqueue_burst(std::uint32_t id, double bytes, const std::vector<FlowNetwork::LinkId>* path, Nanos now,
                     bool resent = false) {
    auto& m = messages_[id];
    const auto link = m.link;
    if (opt_.queue_overflow && !exclusive_ && !resent) {
      double backlog = burst_queued_bytes_[link];
      if (const auto f = burst_flow_[link]; f != kNone && net_.active(f)) backlog += net_.bytes(f) - net_.sent(f, now);
      const double room = std::max(0.0, queue_limit_bytes(link) - backlog);
      if (bytes > room + 1) {
        const double lost = bytes - room;
        bytes = room;
        ++stats_.overflows;
        stats_.overflow_bytes += lost;
        // Linux's RTO: the smoothed RTT (with the queue's delay) plus its 200 ms floor.
        const double rate = wan_rate_[link];
        const Nanos queueing = rate > 0 ? static_cast<Nanos>(backlog * 8e9 / rate) : 0;
        const Nanos rto = wan_rtt_[link] + queueing + 200'000'000;
        m.lost += lost;
        ++m.parts;
        push(now + rto, Ev::retransmit, id);
      }
    }
    if (bytes <= 0) return;  // all of it lost: only the retransmission is left
    ++m.parts;
    if (burst_busy_[link]) {
      burst_queue_[link].emplace_back(id, bytes);
      burst_queued_bytes_[link] += bytes;
      return;
    }
    start_burst(id, bytes, path, now);
  }

  // ---- Bursts::paced ----

  double weight_of(const Message& m) const { return static_cast<double>(tp_) * (m.link == kNoLink ? 1 : k_); }

  // A message starts entering its link's queue (its connections are its alone now).
  void start_paced(std::uint32_t id, Nanos now, Nanos sent_from) {
    auto& m = messages_[id];
    m.burst = true;
    m.paced = true;
    m.entered = 0;
    auto& c = *m.conn;
    acks_in(m.link, now);  // those of its connections' earlier messages, before it enters
    if (c.pcwnd <= 0) {
      c.pcwnd = std::min(window_, opt_.initial_window_bytes);
      c.srtt = static_cast<double>(wan_rtt_[m.link]);
    }
    on_wire(m, now);
    // Long pieces: no cut, it enters inside the piece now open, from when its connections
    // were free.
    const bool coarse = long_pieces(paced_[m.link]);
    if (!coarse) paced_cut(m.link, now);
    m.since = coarse && sent_from >= 0 ? sent_from : now;
    paced_enter(id);
    paced_schedule(m.link, now);
  }

  // With many messages entering a link at once, pieces are long (paced_piece_ns_per_message
  // per message) and cut only on their own clock: a message that starts, comes back or puts
  // its last byte in between two cuts does so within the open piece (from its own instant;
  // the last byte leaves with its piece), so a start or an end costs no visit of every
  // message entering.
  bool long_pieces(const PacedLink& L) const { return piece_length(L) > opt_.paced_piece_ns; }
  Nanos piece_length(const PacedLink& L) const {
    const Nanos len = static_cast<Nanos>(L.entering.size()) * opt_.paced_piece_ns_per_message;
    return len >= kLongPieces * opt_.paced_piece_ns ? len : opt_.paced_piece_ns;
  }

  // The message enters its link's queue from the next cut on (a paused one is not in the
  // list: the cuts visit only the messages that can send).
  void paced_enter(std::uint32_t id) {
    auto& m = messages_[id];
    if (m.entering) return;
    m.entering = true;
    paced_[m.link].entering.push_back(id);
  }

  // The message's pace (wire bytes per ns, all its connections): Linux's pacing rate,
  // ratio x cwnd / SRTT per connection (200 % in slow start below half the threshold,
  // else SimOptions::pacing_ratio), capped in windowed runs at the lab's
  // SO_MAX_PACING_RATE, the link's rate over the transfer's connections.
  double paced_rate(const Message& m) const {
    if (m.stream_rate >= 0) return m.stream_rate;
    const auto& c = *m.conn;
    const double ratio = c.pcwnd < c.ssthresh / 2 ? 2.0 : opt_.pacing_ratio;
    double per_connection = ratio * c.pcwnd / std::max(1.0, c.srtt);
    if (exclusive_) per_connection = std::min(per_connection, pace_cap_[m.link]);
    return per_connection * weight_of(m);
  }

  // Wire bytes the message has still to send (what was lost waits for its resend).
  static double paced_rest(const Message& m) { return m.payload * workload::kWireOverhead - m.lost - m.entered; }

  // Bytes the message may still send now: its rest, within its connections' window.
  double paced_room(const Message& m) const {
    const auto& c = *m.conn;
    return std::max(0.0, std::min(paced_rest(m), (c.pcwnd - c.inflight) * weight_of(m)));
  }

  // What the messages entering `link`'s queue sent since the last cut becomes a piece.
  void paced_cut(std::size_t link, Nanos now) {
    auto& L = paced_[link];
    acks_in(link, now);
    const Nanos from = L.from;
    const Nanos dt = now - from;
    L.from = now;
    const bool streamed = L.streaming;  // the open piece is on the link already
    L.streaming = false;
    if (!streamed && (L.entering.empty() || dt <= 0)) return;
    Piece p;
    p.at = now;
    p.parts = take_parts();
    Nanos first_in = now;  // when its first bytes began to enter
    const bool coarse = long_pieces(L);
    // Messages whose last byte entered, when (long pieces: its own instant, else now). Its
    // own (a successor that starts below cuts this link again).
    std::vector<std::pair<std::uint32_t, Nanos>> in;
    for (const auto id : L.entering) {
      auto& m = messages_[id];
      const double rest = paced_rest(m);
      const Nanos start = m.since >= 0 ? m.since : from;
      m.since = -1;
      const double rate = paced_rate(m);
      m.stream_rate = -1;
      double add = std::min(rate * static_cast<double>(now - start), paced_room(m));
      if (add >= rest * (1 - 1e-12)) {
        add = rest;
        in.emplace_back(id, coarse && rate > 0 ? std::clamp(start + static_cast<Nanos>(std::ceil(rest / rate)), start, now)
                                               : now);
      }
      if (!(add > 0)) continue;
      first_in = std::min(first_in, start);
      m.entered += add;
      m.conn->inflight += add / weight_of(m);
      p.bytes += add;
      p.weight += weight_of(m);
      p.parts.emplace_back(id, add);
      if (streamed) p.rates.push_back(rate);
    }
    // Its bytes began to enter at the first start among its parts (a sender held up by a
    // full window goes on from its ACKs, after the cut before).
    p.opened = p.bytes > 0 ? first_in : from;
    if (p.bytes <= 0 && in.empty() && !streamed) {
      give_parts(std::move(p.parts));
      return;
    }
    // Drop-tail: what the queue has no room for is lost, from each message in proportion
    // to what it sent. What is sent again is not lost again (as with Bursts::fifo).
    if (opt_.queue_overflow && p.bytes > 0 && !streamed) {  // (a streamed piece: the queue was empty)
      double backlog = L.queued;
      if (L.server != kNone && net_.active(L.server)) backlog -= net_.sent(L.server, now);
      const double room = std::max(0.0, queue_limit_bytes(link) - backlog);
      double droppable = 0;
      for (const auto& [id, add] : p.parts)
        if (!messages_[id].resending) droppable += add;
      if (p.bytes > room + 1 && droppable > 0) {
        const double f = std::min(1.0, (p.bytes - room) / droppable);
        for (auto& [id, add] : p.parts) {
          auto& m = messages_[id];
          if (m.resending) continue;
          const double lost = add * f;
          if (!(lost > 0)) continue;
          if (m.first_loss < 0) {
            // Its ACKs tell the sender, a round trip after the loss (the full queue's delay
            // included), and it sends what was lost by then again (the lost bytes stay in
            // flight until then, as for TCP; waiting for the message's last byte instead
            // could wait for ever, its window full of lost bytes).
            m.first_loss = now;
            ++stats_.overflows;
            const double rate = wan_rate_[link];
            const Nanos queueing = rate > 0 ? static_cast<Nanos>(queue_limit_bytes(link) * 8e9 / rate) : 0;
            push(now + wan_rtt_[link] + queueing, Ev::paced_resend, id);
          }
          auto& c = *m.conn;
          if (now >= c.recovery_until) {
            // One loss event per round trip: CUBIC's cut, and congestion avoidance.
            c.pcwnd = std::max(2 * kMss, c.pcwnd * kCubicBeta);
            c.ssthresh = c.pcwnd;
            c.recovery_until = now + static_cast<Nanos>(c.srtt);
          }
          m.lost += lost;
          m.entered -= lost;
          c.resent += lost / weight_of(m);
          add -= lost;
          p.bytes -= lost;
          stats_.overflow_bytes += lost;
        }
        p.bytes = std::max(0.0, p.bytes);
      }
    }
    for (const auto& [id, at] : in) {
      messages_[id].entering = false;
      messages_[id].entry_end = now;
    }
    std::erase_if(L.entering, [&](std::uint32_t id) { return !messages_[id].entering; });
    // One with bytes lost waits for its resend (Ev::paced_resend); the others are in.
    std::erase_if(in, [&](const auto& e) { return messages_[e.first].lost > 0; });
    for (const auto& [id, at] : in) p.last.push_back(id);
    if (streamed) {
      stream_cut(link, std::move(p), now);
    } else {
      L.queued += p.bytes;
      L.pieces.push_back(std::move(p));
      paced_serve(link, now);
    }
    // A message queued behind one that has entered goes next on its connections (with
    // long pieces, from when the last byte went in).
    for (const auto& [id, at] : in) release_connections(id, now, coarse ? at : -1);
  }

  // The first piece boundary after `t`: cuts for length and ACKs fall on one grid.
  Nanos piece_boundary(Nanos t) const { return (t / opt_.paced_piece_ns + 1) * opt_.paced_piece_ns; }

  // The next cut: the next piece boundary, or sooner a message's last byte in (long
  // pieces: a piece's length from now, and a cut once scheduled stands). (A window that
  // fills before the boundary is not cut there: the piece just holds no more of that
  // message.)
  void paced_schedule(std::size_t link, Nanos now) {
    auto& L = paced_[link];
    acks_in(link, now);
    if (L.streaming) return;  // its cut is planned; whatever must come sooner cuts first
    arm_acks(link);
    const bool coarse = long_pieces(L);
    if (coarse && L.next_cut >= 0) return;  // long pieces: on their own clock
    // A cut visits every message entering the link: with many at once (thousands of GPUs
    // under fair), pieces get longer, paced_piece_ns_per_message each, so the work per
    // simulated second stays bounded (long_pieces()). 7B three-DC fair, s per iteration,
    // 1 ms pieces against long ones: 86.8 / 87.0 at 1,536 GPUs, 340.5 / 345.0 at 6,144
    // (bench/README.md, "Speed").
    const Nanos len = piece_length(L);
    Nanos next = coarse ? now + len : piece_boundary(now);
    bool moving = false;  // none moving (paused, window full): the next ACK or grant schedules
    for (const auto id : L.entering) {
      const auto& m = messages_[id];
      const double room = paced_room(m);
      const double rate = paced_rate(m);
      if (!(room > 0) || !(rate > 0)) continue;
      moving = true;
      if (coarse) break;  // long pieces end on their clock, not at a message's last byte
      const double rest = paced_rest(m);
      if (rest <= room) next = std::min(next, now + std::max<Nanos>(1, static_cast<Nanos>(std::ceil(rest / rate))));
    }
    if (!moving) return;
    if (!coarse && paced_stream(link, now)) return;
    L.next_cut = next;
    push(next, Ev::paced_cut, static_cast<std::uint32_t>(link), ++L.gen);
  }

  // A streamed piece: when every message entering a link is past slow start and its
  // window holds all the rest of it (when its ACKs come back cannot hold it up), the piece
  // that opens now is SimOptions::paced_stream_ns long (or ends with a message's last
  // byte), the messages keep their pace through it, and the link sends it as it fills: once
  // the link gets to it, one flow sends what is in at the link's pace, and from when it has
  // caught up, at the pace the bytes enter (stream_check()). So its bytes leave when an
  // exact FIFO would send them; its ACKs come back as plain pieces' would (streamed_acks()).
  bool paced_stream(std::size_t link, Nanos now) {
    auto& L = paced_[link];
    if (opt_.paced_stream_ns <= opt_.paced_piece_ns || L.from != now) return false;
    Nanos until = piece_boundary(now + opt_.paced_stream_ns - opt_.paced_piece_ns);
    double pace = 0;  // all of them, bytes per ns
    for (const auto id : L.entering) {
      const auto& m = messages_[id];
      const auto& c = *m.conn;
      const double rate = paced_rate(m);
      const double rest = paced_rest(m);
      // (One credited from before now, its ACKs having opened its window then, enters
      // from there: a plain piece.)
      if (m.resending || m.lost > 0 || !(c.pcwnd >= c.ssthresh) || !(rate > 0) || !(rest <= paced_room(m)) ||
          (m.since >= 0 && m.since < now))
        return false;
      until = std::min(until, now + std::max<Nanos>(1, static_cast<Nanos>(std::ceil(rest / rate))));
      pace += rate;
    }
    if (until - now <= opt_.paced_piece_ns) return false;  // no longer than a plain piece
    if (opt_.queue_overflow) {
      // The queue must not fill within it: what finds the queue full is lost, and only
      // plain pieces meet the queue's limit.
      double backlog = L.queued;
      if (L.server != kNone && net_.active(L.server)) backlog -= net_.sent(L.server, now);
      const double growth = std::max(0.0, pace - net_.link_rate(wan_[link]) / 8e9) * static_cast<double>(until - now);
      if (backlog + growth > queue_limit_bytes(link)) return false;
    }
    Piece p;
    p.open = true;
    p.opened = now;
    for (const auto id : L.entering) {
      auto& m = messages_[id];
      const double rate = paced_rate(m);
      m.stream_rate = rate;
      p.bytes += std::min(rate * static_cast<double>(until - now), paced_rest(m));
      p.weight += weight_of(m);
    }
    // The pace it fills at on average (a message's last byte may come before the end).
    p.stream_pace = p.bytes / static_cast<double>(until - now);
    L.queued += p.bytes;
    L.pieces.push_back(std::move(p));
    L.streaming = true;
    L.next_cut = until;
    push(until, Ev::paced_cut, static_cast<std::uint32_t>(link), ++L.gen);
    paced_serve(link, now);
    return true;
  }

  // The link gets to the open streamed piece: its flow sends what is in at the link's pace,
  // then follows the bytes as they enter.
  void stream_start(std::size_t link, Piece& p, Nanos now) {
    auto& L = paced_[link];
    if (L.stream_bundle == kNone) L.stream_bundle = net_.add_bundle({wan_[link]});
    p.served_at = now;
    const bool caught = p.stream_pace * static_cast<double>(now - p.opened) < 1;  // nothing in yet
    if (caught) p.caught_at = now;
    L.server = net_.start_in(L.stream_bundle, p.bytes, p.weight, caught ? p.stream_pace * 8e9 / p.weight : kUnlimited,
                             now);
    set_owner(L.server, {false, false, 0, link, p.bytes / workload::kWireOverhead, true});
    reserve_acks(link, caught ? std::min(wan_rate_[link], p.stream_pace * 8e9) : kFullRate, now);
    if (!caught) push(now + opt_.paced_piece_ns, Ev::stream_check, static_cast<std::uint32_t>(link), L.gen);
  }

  // Has the link caught up with the open streamed piece it sends? Then it sends at the pace
  // the piece fills; else look again when it would have (at the rates now), or a plain
  // piece's length later if it is not faster than the piece fills.
  void stream_check(std::size_t link, Nanos now) {
    auto& L = paced_[link];
    if (L.pieces.empty() || L.server == kNone) return;
    auto& p = L.pieces.front();
    if (!p.open || p.served_at < 0 || p.caught_at >= 0) return;
    const double in = p.stream_pace * static_cast<double>(now - p.opened);
    const double out = net_.sent(L.server, now);
    if (out >= in - 1) {
      p.caught_at = now;
      net_.set_bundle_ceiling(L.stream_bundle, p.stream_pace * 8e9 / p.weight, now);
      reserve_acks(link, std::min(wan_rate_[link], p.stream_pace * 8e9), now);
      return;
    }
    const double rate = net_.rate_bps(L.server) / 8e9;
    Nanos at = now + opt_.paced_piece_ns;
    if (rate > p.stream_pace)
      at = std::min(at, now + std::max<Nanos>(1, static_cast<Nanos>(std::ceil((in - out) / (rate - p.stream_pace)))));
    push(at, Ev::stream_check, static_cast<std::uint32_t>(link), L.gen);
  }

  // The streamed piece is cut (at its planned end, or sooner): what entered is what it
  // holds. Not reached yet: a piece like the others. Being sent: the link sends the rest at
  // its own pace (all of it is in). Sent already (the flow ended at this instant): it has
  // left.
  void stream_cut(std::size_t link, Piece&& p, Nanos now) {
    auto& L = paced_[link];
    auto& open = L.pieces.back();
    L.queued += p.bytes - open.bytes;
    const double predicted = open.bytes;
    const bool on_link = open.served_at >= 0;
    const bool sent = open.sent;
    p.opened = open.opened;
    p.served_at = open.served_at;
    p.caught_at = open.caught_at;
    p.streamed = true;
    open = std::move(p);
    if (!on_link) return;
    if (sent) {
      // Its flow moved the predicted bytes: the totals count what entered.
      totals_[link].wire_bytes += open.bytes - predicted;
      totals_[link].payload_bytes += (open.bytes - predicted) / workload::kWireOverhead;
      if (opt_.acks && reverse_[link] != kNoLink)
        totals_[reverse_[link]].wire_bytes += (open.bytes - predicted) * kAckFraction;
      paced_piece_left(link, now);
      paced_serve(link, now);
      check_idle(link);
      return;
    }
    owners_[L.server].payload = open.bytes / workload::kWireOverhead;
    if (open.bytes - net_.sent(L.server, now) > 1) {
      net_.set_bundle_ceiling(L.stream_bundle, kUnlimited, now);
      reserve_acks(link, kFullRate, now);
    }
    net_.set_bytes(L.server, open.bytes, now);
  }

  // The link sends its queue's first piece when it has none on the wire.
  void paced_serve(std::size_t link, Nanos now) {
    auto& L = paced_[link];
    while (L.server == kNone && !L.pieces.empty()) {
      auto& p = L.pieces.front();
      if (p.open) {
        if (p.served_at < 0) stream_start(link, p, now);
        break;
      }
      if (!(p.bytes > 0)) {
        paced_piece_left(link, now);
        continue;
      }
      if (L.piece_bundle == kNone) L.piece_bundle = net_.add_bundle({wan_[link]});
      L.server = net_.start_in(L.piece_bundle, p.bytes, p.weight, kUnlimited, now);
      p.served_at = now;
      set_owner(L.server, {false, false, 0, link, p.bytes / workload::kWireOverhead, true});
      reserve_acks(link, kFullRate, now);
    }
  }

  // A link whose queue may be empty: its ACKs' share goes back when settle() is done with
  // the instant, if it has nothing to send then (a streamed piece cut now is followed by
  // the next at once).
  void check_idle(std::size_t link) {
    if (opt_.acks && acks_for_[link] != 0) idle_check_.push_back(link);
  }

  // While a paced link sends its queue, the ACKs of what it sends take kAckFraction of the
  // rate it sends at on the reverse link: its own rate (kFullRate; the rate a piece's own
  // ACK flow would get there), or a streamed piece's pace. Its pieces follow each other
  // without an ACK flow each; their bytes count when each piece has left. 0: idle.
  static constexpr double kFullRate = -1;
  void reserve_acks(std::size_t link, double data_bps, Nanos now) {
    if (!opt_.acks || reverse_[link] == kNoLink || acks_for_[link] == data_bps) return;
    acks_for_[link] = data_bps;
    apply_rate(reverse_[link], now);
  }

  // A WAN link's rate in the network: its own (a trace's step), less the share the paced
  // ACKs of its reverse link hold.
  void apply_rate(std::size_t link, Nanos now) {
    double rate = wan_rate_[link];
    if (const auto back = reverse_[link]; back != kNoLink && acks_for_[back] != 0)
      rate = std::max(0.0, rate - kAckFraction * (acks_for_[back] == kFullRate ? wan_rate_[back]
                                                                                : std::min(acks_for_[back], wan_rate_[back])));
    net_.set_rate(wan_[link], rate, now);
  }

  // The first piece is off the link: the messages whose last bytes it held are delivered a
  // one-way delay later, and its ACKs reach the senders a round trip after its bytes left.
  //
  // When did they leave? The link sent the piece once it was whole (cut), but an exact
  // FIFO sends each byte as soon as the bytes before it are out, the piece's first ones
  // while the rest still enter: its last byte leaves at the cut, or once the link has sent
  // what was ahead of the piece (the last piece's departure, or the piece's start) and the
  // piece itself, at the rate it got. Its ACKs go from then. (From the flow's own end,
  // every ACK of a sender below the link's rate came a piece's transmission late and then
  // on the next piece boundary: RTT samples up to a piece long, and paces that slow; 7B
  // across five DCs under atlas took 118.9 s per iteration with 1 ms pieces and 104-108 s
  // with 0.1-0.5 ms ones. Now 104.6 s with 1 ms pieces.)
  void paced_piece_left(std::size_t link, Nanos now) {
    auto& L = paced_[link];
    auto p = std::move(L.pieces.front());
    L.pieces.pop_front();
    L.queued = L.pieces.empty() ? 0.0 : L.queued - p.bytes;
    Nanos dep = now;  // when an exact FIFO would have sent its last byte
    if (!p.streamed && p.served_at >= 0) {
      dep = std::max(p.at, std::max(p.opened, L.fluid_end) + (now - p.served_at));
      L.fluid_end = dep;
    }
    for (const auto id : p.last) {
      const auto& m = messages_[id];
      wire_[m.transfer].last = now;
      push(now + m.delay, Ev::deliver, id);
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
    add_acks(link, std::max(now, piece_boundary(dep + wan_rtt_[link] - 1)), p.at, dep + wan_rtt_[link],
             std::move(p.parts));
  }

  void add_acks(std::size_t link, Nanos at, Nanos sent, Nanos back,
                std::vector<std::pair<std::uint32_t, double>>&& parts) {
    auto& L = paced_[link];
    L.acks.push_back({at, sent, back, std::move(parts)});
    // (Behind others: the first one's event, if it needs one, is planned already.)
    if (!L.streaming && L.acks.size() == 1) arm_acks(link);
  }

  // A streamed piece has left: its ACKs come back as those of plain pieces would, what
  // entered in each paced_piece_ns a round trip after it left. Each part entered at its
  // pace from when the piece opened (until its last byte). A byte left when it entered once
  // the link had caught up with the piece; before, at the link's rate from when it got to
  // the piece; if the link never caught up, or sent the last bytes after the cut, as late
  // as sending the rest by now at the link's rate puts it (an exact FIFO's departures, as
  // for plain pieces: paced_piece_left()).
  void streamed_acks(std::size_t link, Piece& p, Nanos now) {
    const double rate = net_.link_rate(wan_[link]) / 8e9;
    const auto entered = [&](std::size_t i, Nanos t) {
      return std::min(p.parts[i].second, p.rates[i] * static_cast<double>(t - p.opened));
    };
    double before = 0;  // the piece's bytes in before `from`
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
      const Nanos behind = now - static_cast<Nanos>(rate > 0 ? (p.bytes - before) / rate : 0);
      Nanos left = behind;
      if (p.caught_at >= 0) {
        left = to >= p.caught_at ? to
                                 : std::min(p.caught_at, p.served_at + static_cast<Nanos>(rate > 0 ? before / rate : 0));
        if (now > p.at) left = std::max(left, behind);
      }
      left = std::max(left, to);
      paced_[link].fluid_end = std::max(paced_[link].fluid_end, left);
      if (parts.empty()) {
        give_parts(std::move(parts));
      } else {
        Nanos at = std::max(now, piece_boundary(left + wan_rtt_[link] - 1));
        if (!paced_[link].acks.empty()) at = std::max(at, paced_[link].acks.back().at);
        add_acks(link, at, to, left + wan_rtt_[link], std::move(parts));
      }
      from = to;
    }
    give_parts(std::move(p.parts));
  }

  // ACKs in: less in flight, an RTT sample, the window grows (slow start: by what was
  // ACKed while at least half of the window was in use, until HyStart sees the queue's
  // delay; congestion avoidance: CUBIC's TCP-friendly pace, about half a segment per
  // round trip, only while the window is full), and the senders may go on.
  //
  // Each batch of ACKs has an event of its own, but not while the link sends a streamed
  // piece (paced_stream()): its senders keep their pace and have room for all they send,
  // so the batches are taken in, each at its own instant, at the piece's cut (or when the
  // link's senders are looked at before: a plan for the next cut, the arbiter's sample).
  void paced_acks(std::size_t link, Nanos now) {
    auto& L = paced_[link];
    if (L.armed <= now) L.armed = -1;
    // A sender whose window was full goes on from when its ACKs came, at its pace; with
    // one waiting, the next cut is planned again with the new paces.
    const bool waiting = waits_for_acks(L);
    acks_in(link, now);
    if (waiting) paced_schedule(link, now);
    if (!L.streaming) arm_acks(link);
  }

  // The ACK batches due by `now`, each at its own instant. True if a sender whose window
  // was full may go on (from then: `since`).
  bool acks_in(std::size_t link, Nanos now) {
    auto& L = paced_[link];
    if (L.acks.empty() || L.acks.front().at > now) return false;
    // Only a sender whose window was full needs a cut scheduled; the others' new pace
    // applies from the next one (at most a piece later).
    auto& blocked = acks_blocked_;
    blocked.clear();
    for (const auto id : L.entering)
      if (!(paced_room(messages_[id]) > 0)) blocked.push_back(id);
    bool freed = false;
    while (!L.acks.empty() && L.acks.front().at <= now) {
      auto a = std::move(L.acks.front());
      L.acks.pop_front();
      for (const auto& [id, bytes] : a.parts) {
        const auto& m = messages_[id];
        auto& c = *m.conn;
        const double acked = bytes / weight_of(m);
        const double used = c.inflight;  // in flight when these were ACKed, them included
        c.inflight = std::max(0.0, c.inflight - acked);
        const double sample = static_cast<double>(a.back - a.sent);
        c.srtt = c.srtt > 0 ? 0.875 * c.srtt + 0.125 * sample : sample;
        if (a.sent >= c.round_mark) {  // a new round: its first ACKs are HyStart's sample
          c.round_mark = a.at;
          c.round_sampled = false;
        }
        if (c.pcwnd < c.ssthresh) {
          if (2 * used >= c.pcwnd) c.pcwnd = std::min(window_, c.pcwnd + acked);
          // HyStart (CUBIC's delay test): the round's first ACKs came back later than the
          // path's RTT by more than RTT / 8 (4 to 16 ms): the queue is filling, slow start ends.
          const double rtt = static_cast<double>(wan_rtt_[link]);
          if (!c.round_sampled && c.pcwnd >= kHystartLowWindow * kMss &&
              sample - rtt > std::clamp(rtt / 8, 4e6, 16e6))
            c.ssthresh = c.pcwnd;
        } else if (used >= c.pcwnd - kMss) {
          c.pcwnd = std::min(window_, c.pcwnd + kRenoFriendly * kMss * acked / c.pcwnd);
        }
        c.round_sampled = true;
      }
      for (auto& id : blocked)
        if (id != kNone && paced_room(messages_[id]) > 0) {
          messages_[id].since = a.at;
          id = kNone;
          freed = true;
        }
      give_parts(std::move(a.parts));
    }
    return freed;
  }

  // The first batch of ACKs still to come gets its event when a sender entering the link
  // waits for it (its window full). The others need none: nothing reads a window before
  // its link's due ACKs are taken in (acks_in(), each batch at its own instant, first
  // thing in a cut, a plan for the next cut, a sample for the arbiter, a message that
  // starts or comes back), and a sender with room keeps its pace until the next cut.
  void arm_acks(std::size_t link) {
    auto& L = paced_[link];
    if (L.acks.empty() || L.armed == L.acks.front().at || !waits_for_acks(L)) return;
    L.armed = L.acks.front().at;
    push(L.armed, Ev::paced_ack, static_cast<std::uint32_t>(link));
  }

  // Whether a sender entering the link has its window full (no room to send).
  bool waits_for_acks(const PacedLink& L) const {
    return std::any_of(L.entering.begin(), L.entering.end(),
                       [&](std::uint32_t id) { return !(paced_room(messages_[id]) > 0); });
  }

  // A piece's list of parts, from those given back (a paced run makes one per piece).
  std::vector<std::pair<std::uint32_t, double>> take_parts() {
    if (parts_pool_.empty()) return {};
    auto v = std::move(parts_pool_.back());
    parts_pool_.pop_back();
    return v;
  }
  void give_parts(std::vector<std::pair<std::uint32_t, double>>&& v) {
    v.clear();
    parts_pool_.push_back(std::move(v));
  }

  // Bytes of a paced message in its link's queue (or through it) by `now`.
  double paced_entered(const Message& m, Nanos now) const {
    if (m.entry_end >= 0 || m.paused) return m.entered;
    const auto& L = paced_[m.link];
    const Nanos start = m.since >= 0 ? m.since : L.from;
    const double more = std::min(paced_rate(m) * static_cast<double>(std::max<Nanos>(0, now - start)), paced_room(m));
    return m.entered + more;
  }

  // The lab's queue limit at the link's rate now: the topology's, or the default for that
  // rate (1.5 x the bandwidth-delay product, in full frames), as the lab sets it with each
  // rate it applies.
  // (Worked out again only when the rate moved: a paced link asks at every cut.)
  double queue_limit_bytes(std::size_t link) {
    auto& [rate, bytes] = queue_limit_[link];
    if (rate == wan_rate_[link]) return bytes;
    auto& l = wan_queue_link_[link];
    const double frame = static_cast<double>(plan_.topology.lan.mtu + 14);
    if (l.params.queue && l.params.queue->unit == QueueLimit::Unit::bytes) {
      bytes = static_cast<double>(l.params.queue->value);
    } else if (l.params.queue) {
      bytes = static_cast<double>(l.params.queue->value) * frame;
    } else {
      l.params.rate.bps = static_cast<std::uint64_t>(std::llround(wan_rate_[link]));
      bytes = static_cast<double>(core::default_queue_packets(plan_.topology, l)) * frame;
    }
    rate = wan_rate_[link];
    return bytes;
  }

  // A burst's turn at its link (its connections were free when it queued).
  void start_burst(std::uint32_t id, double bytes, const std::vector<FlowNetwork::LinkId>* path, Nanos now) {
    auto& m = messages_[id];
    burst_busy_[m.link] = true;
    const double wire = m.payload * workload::kWireOverhead;
    m.flow = net_.start(path ? *path : std::vector<FlowNetwork::LinkId>{wan_[m.link]}, bytes,
                        static_cast<double>(tp_) * k_, kUnlimited, now);
    on_wire(m, now);
    burst_flow_[m.link] = m.flow;
    set_owner(m.flow, {false, false, id, m.link, wire > 0 ? m.payload * bytes / wire : 0});
    start_acks(m.link, bytes, kUnlimited, now);
  }

  // A WAN transfer's bytes on the link: the first time they start, the last time they end.
  // (Every WAN message is an arbiter transfer, asked for when it is sent.)
  void on_wire(const Message& m, Nanos now) {
    if (m.link == kNoLink) return;
    if (wire_[m.transfer].first < 0) wire_[m.transfer].first = now;
  }

  void set_owner(std::uint32_t flow, FlowOwner o) {
    if (owners_.size() <= flow) owners_.resize(flow + 1);
    owners_[flow] = o;
  }

  void slow_start_step(std::uint32_t id, Nanos now) {
    auto& m = messages_[id];
    if (m.flow == kNone || !net_.active(m.flow)) return;
    m.cwnd = std::min(window_, 2 * m.cwnd);
    if (!m.paused) net_.set_ceiling(m.flow, m.cwnd * 8e9 / static_cast<double>(wan_rtt_[m.link]), now);
    if (m.cwnd < window_) push(now + wan_rtt_[m.link], Ev::slow_start, id);
  }

  double message_ceiling(const Message& m) const {
    if (m.burst) return kUnlimited;
    if (opt_.slow_start && std::isfinite(m.ceiling)) return m.cwnd * 8e9 / static_cast<double>(wan_rtt_[m.link]);
    return m.ceiling;
  }

  void arbiter_event(const arbiter::Event& ev, Nanos now) {
    const auto id = ev.id < by_transfer_.size() ? by_transfer_[ev.id] : kNone;
    if (id == kNone) return;
    auto& m = messages_[id];
    switch (ev.kind) {
      case arbiter::Event::Kind::grant:
        if (!m.granted) {
          m.granted = true;
          start_message_flow(id, {wan_[m.link]}, now);
          if (exclusive_) {
            m.windowed = true;
            in_window_.push_back(id);
            plan_tick(now);
          }
        } else if (m.paused && m.paced) {
          paced_cut(m.link, now);
          m.paused = false;
          if (m.entry_end < 0) paced_enter(id);
          paced_schedule(m.link, now);
        } else if (m.paused) {
          m.paused = false;
          net_.set_ceiling(m.flow, message_ceiling(m), now);
        }
        break;
      case arbiter::Event::Kind::revoke:
        if (m.paced) {
          if (m.entry_end < 0) {
            paced_cut(m.link, now);
            m.paused = true;
            if (m.entering) {
              m.entering = false;
              std::erase(paced_[m.link].entering, id);
            }
            paced_schedule(m.link, now);
          }
        } else if (m.flow != kNone && net_.active(m.flow)) {
          m.paused = true;
          net_.set_ceiling(m.flow, 0, now);
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
    const Nanos p = opt_.progress_period_ns;
    const Nanos at = (now / p + 1) * p;
    if (at == next_tick_) return;
    next_tick_ = at;
    push(at, Ev::tick, 0);
  }

  void tick(Nanos now) {
    if (now != next_tick_) return;
    next_tick_ = -1;
    std::erase_if(in_window_, [&](std::uint32_t id) { return !messages_[id].windowed; });
    for (const auto id : in_window_) {
      const auto& m = messages_[id];
      if (m.paced) {
        if (acks_in(m.link, now)) paced_schedule(m.link, now);
        arb_->progress(m.transfer, static_cast<std::uint64_t>(paced_entered(m, now)), now);
        continue;
      }
      if (m.flow == kNone) continue;  // waits behind an earlier message on its connections
      arb_->progress(m.transfer, static_cast<std::uint64_t>(net_.sent(m.flow, now)), now);
    }
    plan_tick(now);
  }

  void flow_finished(std::uint32_t flow, Nanos now) {
    const auto o = owners_.at(flow);
    if (o.link != kNoLink) {
      totals_[o.link].wire_bytes += net_.bytes(flow);
      totals_[o.link].payload_bytes += o.payload;
      // A paced piece's ACKs (reserve_acks()).
      if (o.paced && opt_.acks && reverse_[o.link] != kNoLink)
        totals_[reverse_[o.link]].wire_bytes += net_.bytes(flow) * kAckFraction;
    }
    // ACK flows and paced pieces are known by no one else: their ids go back (millions of
    // them in a long paced run).
    if (o.ack || o.paced) net_.release(flow);
    if (o.ack) return;
    if (o.paced) {
      auto& L = paced_[o.link];
      L.server = kNone;
      if (L.pieces.front().open) {  // streamed and sent as it filled: its cut is now
        L.pieces.front().sent = true;
        return;
      }
      paced_piece_left(o.link, now);
      paced_serve(o.link, now);
      check_idle(o.link);
      return;
    }
    if (o.collective) {
      auto& c = collectives_[o.index];
      c.last_finish = std::max(c.last_finish, now);
      if (--c.hops_left == 0) push(c.last_finish + static_cast<Nanos>(c.steps) * c.step_delay, Ev::collective_end, o.index);
      return;
    }
    auto& m = messages_[o.index];
    if (m.link != kNoLink) wire_[m.transfer].last = now;
    if (m.burst) {
      burst_busy_[m.link] = false;
      burst_flow_[m.link] = kNone;
      if (!burst_queue_[m.link].empty()) {
        const auto [next, bytes] = burst_queue_[m.link].front();
        burst_queue_[m.link].pop_front();
        burst_queued_bytes_[m.link] -= bytes;
        start_burst(next, bytes, nullptr, now);
      }
      // A part of it is still to be sent again: its connections wait with it.
      if (--m.parts > 0) return;
    }
    auto& c = *m.conn;
    if (opt_.slow_start && m.link != kNoLink) {
      c.cwnd = m.cwnd;
      c.last_active = now;
    }
    push(now + m.delay, Ev::deliver, o.index);
    release_connections(o.index, now);
  }

  // The message's connections are free for the next one queued on them.
  void release_connections(std::uint32_t id, Nanos now, Nanos free_from = -1) {
    auto& c = *messages_[id].conn;
    c.busy = false;
    if (!c.queue.empty()) {
      auto [next, path] = std::move(c.queue.front());
      c.queue.pop_front();
      start_message_flow(next, path, now, free_from);
    }
  }

  void deliver(std::uint32_t id, Nanos now) {
    auto& m = messages_[id];
    auto& src = groups_[m.src];
    src.report.spans[m.span].end_ns = now;
    if (m.transfer != 0) {
      if (m.windowed) {
        // The last bytes reach the arbiter as the lab's counters would show them.
        const double bytes = m.paced ? m.payload * workload::kWireOverhead : net_.bytes(m.flow);
        arb_->progress(m.transfer, static_cast<std::uint64_t>(bytes), now);
        m.windowed = false;
      }
      arb_->complete(m.transfer, now);
      arbiter_touched_ = true;
    }
    auto& d = groups_[m.dst];
    if (d.wait == Group::Wait::recv && d.wait_slot == m.slot && d.iteration == m.iteration) {
      const auto& op = ops_[d.slot_base + d.pc];
      if (now > d.wait_from)
        d.report.spans.push_back(Span{SpanKind::recv_wait, d.iteration, op.microbatch, d.wait_from, now, op.bytes, op.peer});
      d.wait = Group::Wait::none;
      d.wait_slot = kNone;
      ++d.pc;
      advance(m.dst, now);
      return;
    }
    arrived_.insert(arrival_key(m.slot, m.iteration));
  }

  // ---- all-reduce ----

  void enter_collective(std::uint32_t gi, const Op& op, Nanos now) {
    auto& g = groups_[gi];
    const auto key = std::make_tuple(op.ring.front(), g.iteration, g.allreduce_seq);
    auto it = collective_of_.find(key);
    if (it == collective_of_.end()) {
      Collective c;
      for (const int w : op.ring) c.members.push_back(group_of(w));
      c.entry.assign(c.members.size(), -1);
      c.iteration = g.iteration;
      c.steps = 2 * (op.ring.size() - 1);
      collectives_.push_back(std::move(c));
      it = collective_of_.emplace(key, static_cast<std::uint32_t>(collectives_.size() - 1)).first;
    }
    const auto ci = it->second;
    auto& c = collectives_[ci];
    const auto pos = std::find(c.members.begin(), c.members.end(), gi);
    if (pos == c.members.end())
      throw std::invalid_argument(fmt::format("simulate: worker {} runs an all-reduce whose ring lacks it", g.worker));
    c.entry[static_cast<std::size_t>(pos - c.members.begin())] = now;
    if (++c.entered < static_cast<int>(c.members.size())) return;
    collective_of_.erase(it);

    // Everyone is in: one flow per ring hop carrying all of its steps.
    const auto n = c.members.size();
    const double hop_payload =
        static_cast<double>(c.steps) * static_cast<double>(program::ring_chunk_bytes(op.bytes, n)) * tp_;
    Nanos step_delay = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto& a = groups_[c.members[i]];
      const auto& b = groups_[c.members[(i + 1) % n]];
      if (a.node == b.node) continue;
      if (a.dc == b.dc) {
        step_delay = std::max(step_delay, lan_delay_);
        if (!lan_limited_) continue;
        const auto f = net_.start({node_up_[a.node], node_down_[b.node]}, hop_payload * workload::kWireOverhead, tp_,
                                  kUnlimited, now);
        set_owner(f, {true, false, ci, kNoLink, hop_payload});
      } else {
        const auto link = link_of_[a.dc][b.dc];
        if (link == kNoLink)
          throw std::invalid_argument(fmt::format("simulate: lab {} has no WAN link from DC {} to DC {}",
                                                  plan_.topology.name, plan_.topology.dcs[a.dc].name,
                                                  plan_.topology.dcs[b.dc].name));
        step_delay = std::max(step_delay, wan_delay_[link]);
        const auto f = net_.start({wan_[link]}, hop_payload * workload::kWireOverhead, static_cast<double>(tp_) * k_,
                                  wan_ceiling_[link], now);
        set_owner(f, {true, false, ci, link, hop_payload});
        start_acks(link, hop_payload * workload::kWireOverhead, wan_ceiling_[link] * static_cast<double>(tp_) * k_, now);
      }
      ++c.hops_left;
    }
    c.step_delay = step_delay;
    c.last_finish = now;
    if (c.hops_left == 0) push(now + static_cast<Nanos>(c.steps) * step_delay, Ev::collective_end, ci);
  }

  void collective_end(std::uint32_t ci, Nanos now) {
    auto& c = collectives_[ci];
    for (std::size_t i = 0; i < c.members.size(); ++i) {
      auto& g = groups_[c.members[i]];
      const auto& op = ops_[g.slot_base + g.pc];
      g.report.spans.push_back(Span{SpanKind::allreduce, g.iteration, -1, c.entry[i], now, op.bytes, -1});
      g.wait = Group::Wait::none;
      ++g.pc;
      ++g.allreduce_seq;
    }
    for (const auto gi : c.members) advance(gi, now);
  }

  // ---- traces ----

  void schedule_trace_step(std::uint32_t trace, std::uint32_t step, Nanos loop_start) {
    const auto& tr = opt_.traces[trace];
    if (tr.link >= wan_.size())
      throw std::invalid_argument(fmt::format("simulate: trace for link {}, the topology has {}", tr.link, wan_.size()));
    if (step >= tr.steps.size()) {
      if (tr.loop_ns <= 0 || tr.steps.empty()) return;
      loop_start += tr.loop_ns;
      step = 0;
    }
    if (trace_loop_.size() <= trace) trace_loop_.resize(trace + 1, 0);
    trace_loop_[trace] = loop_start;
    push(loop_start + tr.steps[step].at_ns, Ev::capacity, trace, step);
  }

  void capacity_step(std::uint32_t trace, std::uint32_t step, Nanos now) {
    const auto& tr = opt_.traces[trace];
    const double rate = tr.steps[step].rate_bps * sc_.scale;
    const auto& l = plan_.topology.links[tr.link];
    wan_rate_[tr.link] = rate;
    apply_rate(tr.link, now);
    if (acks_for_[tr.link] != 0) apply_rate(reverse_[tr.link], now);
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
      if (g.done) continue;
      const auto& op = g.prog->ops.at(g.pc);
      std::string waiting = op.kind == OpKind::recv
                                ? fmt::format("recv {} bytes tag {} from worker {}", op.bytes, op.tag, op.peer)
                                : fmt::format("{} (simulated)", program::to_string(op.kind));
      out.push_back({g.worker, g.iteration, g.pc, std::move(waiting)});
    }
    return out;
  }

  SimResult result() {
    SimResult r;
    r.tp = tp_;
    r.groups.reserve(groups_.size());
    for (auto& g : groups_) {
      g.report.worker = g.worker;
      r.groups.push_back(std::move(g.report));
    }
    r.wan = totals_;
    r.windows = arb_->windows();
    r.wire = std::move(wire_);
    for (const auto& [pair, c] : connections_)
      if (c.pcwnd > 0)
        r.tcp.push_back({groups_[pair.first].worker, groups_[pair.second].worker, tp_ * k_, c.pcwnd, c.ssthresh, c.srtt,
                         c.resent});
    stats_.flows = net_.stats().flows;
    stats_.fillings = net_.stats().updates;
    stats_.bundles_filled = net_.stats().bundles_filled;
    stats_.simulated_workers = groups_.size();
    r.stats = stats_;
    return r;
  }

  const workload::Plan& plan_;
  const SimOptions& opt_;
  const workload::Scenario& sc_;
  const int tp_;
  const int k_;
  const double window_;  // bytes one TCP connection keeps in flight; 0: no ceiling
  std::mt19937_64 jitter_rng_;                      // compute jitter (SimOptions::compute_jitter)
  std::uniform_real_distribution<double> jitter_;
  bool exclusive_ = false;
  std::unique_ptr<arbiter::Arbiter> arb_;
  bool arbiter_touched_ = false;
  Nanos planned_deadline_ = -1;
  Nanos next_tick_ = -1;

  FlowNetwork net_;
  std::vector<FlowNetwork::LinkId> wan_;  // per topology link
  std::vector<double> wan_rate_;          // per topology link: its rate now (traces), before ACK shares
  std::vector<double> acks_for_;          // per topology link: the data rate whose ACKs hold their share of the reverse link (reserve_acks())
  std::vector<bool> burst_busy_;          // per topology link: a burst is being served
  std::vector<std::deque<std::pair<std::uint32_t, double>>> burst_queue_;  // per topology link: bursts (message, wire bytes) waiting, in arrival order
  std::vector<double> burst_queued_bytes_;     // per topology link: their bytes
  std::vector<std::uint32_t> burst_flow_;      // per topology link: the burst on the link, or kNone
  std::vector<PacedLink> paced_;               // per topology link: Bursts::paced
  // Storage kept from call to call: flows finished at an instant, paced_acks()' blocked
  // senders, pieces' part lists given back.
  std::vector<FlowNetwork::FlowId> finished_;
  std::vector<std::size_t> idle_check_;  // links check_idle() named at this instant
  std::vector<std::uint32_t> acks_blocked_;
  std::vector<std::vector<std::pair<std::uint32_t, double>>> parts_pool_;
  std::vector<core::WanLink> wan_queue_link_;  // per topology link: its parameters, for its queue limit
  std::vector<std::pair<double, double>> queue_limit_;  // per topology link: (rate, queue limit in bytes at it)
  std::vector<Nanos> wan_delay_, wan_rtt_;
  std::vector<std::size_t> reverse_;  // each WAN link's reverse link (kNoLink: none)
  std::vector<double> wan_ceiling_;
  std::vector<double> pace_cap_;
  std::vector<std::vector<std::size_t>> link_of_;
  bool lan_limited_ = false;
  Nanos lan_delay_ = 0;
  std::vector<std::size_t> node_base_;
  std::vector<FlowNetwork::LinkId> node_up_, node_down_;

  std::vector<Group> groups_;
  std::vector<SimResult::Wire> wire_;  // by arbiter transfer id
  std::vector<SimOp> ops_;  // by slot
  std::vector<std::uint32_t> slot_owner_;
  std::vector<Nanos> needed_at_;
  std::vector<Message> messages_;
  std::vector<std::uint32_t> by_transfer_;
  std::vector<std::uint32_t> in_window_;
  std::vector<FlowOwner> owners_;
  std::vector<Collective> collectives_;
  std::map<std::tuple<int, int, int>, std::uint32_t> collective_of_;
  std::map<std::pair<std::uint32_t, std::uint32_t>, Connection> connections_;
  std::unordered_set<std::uint64_t> arrived_;  // messages delivered before their recv: arrival_key
  std::vector<Nanos> trace_loop_;
  std::vector<LinkTotals> totals_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::uint64_t seq_ = 0;
  SimStats stats_;
};

}  // namespace

std::string to_string(SimOptions::Bursts b) {
  switch (b) {
    case SimOptions::Bursts::shared: return "shared";
    case SimOptions::Bursts::fifo: return "fifo";
    case SimOptions::Bursts::paced: return "paced";
  }
  return "shared";
}

std::optional<SimOptions::Bursts> parse_bursts(std::string_view name) {
  for (const auto b : {SimOptions::Bursts::shared, SimOptions::Bursts::fifo, SimOptions::Bursts::paced})
    if (to_string(b) == name) return b;
  return std::nullopt;
}

SimResult simulate(const workload::Plan& plan, const SimOptions& options) {
  return Simulation(plan, options).run();
}

program::WorkerReport SimResult::report(int worker) const {
  if (worker < 0 || tp < 1 || static_cast<std::size_t>(worker / tp) >= groups.size())
    throw std::out_of_range(fmt::format("simulated run: no worker {} ({} TP groups of {})", worker, groups.size(), tp));
  const auto& g = groups[static_cast<std::size_t>(worker / tp)];
  const int t = worker - g.worker;
  program::WorkerReport rep = g;
  rep.worker = worker;
  if (t != 0)
    for (auto& s : rep.spans)
      if (s.peer >= 0) s.peer += t;
  return rep;
}

std::vector<program::WorkerReport> SimResult::reports() const {
  std::vector<program::WorkerReport> out;
  out.reserve(groups.size() * static_cast<std::size_t>(std::max(tp, 1)));
  for (std::size_t w = 0; w < groups.size() * static_cast<std::size_t>(std::max(tp, 1)); ++w)
    out.push_back(report(static_cast<int>(w)));
  return out;
}

workload::ReportRefs SimResult::by_worker() const {
  workload::ReportRefs out;
  out.reserve(groups.size() * static_cast<std::size_t>(std::max(tp, 1)));
  for (const auto& g : groups)
    for (int t = 0; t < tp; ++t) out.push_back(&g);
  return out;
}

std::int64_t SimResult::end_ns() const {
  std::int64_t end = 0;
  for (const auto& g : groups)
    for (const auto& it : g.iterations) end = std::max(end, it.end_ns);
  return end;
}

namespace {
template <class ReportOf>
PlanSubset subset_of(const workload::Plan& plan, const std::vector<int>& keep, ReportOf report_of) {
  PlanSubset out;
  out.plan.scenario = plan.scenario;
  out.plan.topology = plan.topology;
  out.plan.stages = plan.stages;
  out.plan.pipeline_message_bytes = plan.pipeline_message_bytes;
  out.plan.wan_bytes_per_iteration = plan.wan_bytes_per_iteration;
  int id = 0;
  for (const int w : keep) {
    std::optional<program::WorkerReport> rep;
    if (w >= 0 && static_cast<std::size_t>(w) < plan.workers.size()) rep = report_of(w);
    if (!rep) throw std::invalid_argument(fmt::format("subset: no worker {} in the plan or its reports", w));
    auto p = plan.workers[static_cast<std::size_t>(w)];
    p.worker = id;
    out.plan.workers.push_back(p);
    auto prog = plan.programs[static_cast<std::size_t>(w)];
    prog.worker = id;
    out.plan.programs.push_back(std::move(prog));
    out.plan.effective_flops.push_back(plan.effective_flops[static_cast<std::size_t>(w)]);
    rep->worker = id;
    out.reports.push_back(std::move(*rep));
    ++id;
  }
  return out;
}
}  // namespace

PlanSubset subset(const workload::Plan& plan, const std::vector<program::WorkerReport>& reports,
                  const std::vector<int>& keep) {
  std::vector<const program::WorkerReport*> by_worker(plan.workers.size(), nullptr);
  for (const auto& r : reports)
    if (r.worker >= 0 && static_cast<std::size_t>(r.worker) < by_worker.size()) by_worker[static_cast<std::size_t>(r.worker)] = &r;
  return subset_of(plan, keep, [&](int w) -> std::optional<program::WorkerReport> {
    if (const auto* r = by_worker[static_cast<std::size_t>(w)]) return *r;
    return std::nullopt;
  });
}

PlanSubset subset(const workload::Plan& plan, const SimResult& result, const std::vector<int>& keep) {
  return subset_of(plan, keep, [&](int w) -> std::optional<program::WorkerReport> {
    if (static_cast<std::size_t>(w / std::max(result.tp, 1)) >= result.groups.size()) return std::nullopt;
    return result.report(w);
  });
}

}  // namespace wanlab::sim
