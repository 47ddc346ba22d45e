#include "wanlab/workload/execute.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>

#include "wanlab/common/ring.hpp"

namespace wanlab::workload {
using program::Op;
using program::OpKind;
using program::Span;
using program::SpanKind;

namespace {

std::string describe_all(const std::vector<DeadlockError::Blocked>& blocked) {
  std::string out = "deadlock: the programs cannot finish;";
  for (const auto& b : blocked)
    out += fmt::format(" worker {} waits at iteration {}, op {} ({});", b.worker, b.iteration, b.op, b.waiting);
  out.pop_back();
  return out;
}

// The discrete-event core. Without contention every time follows from its dependencies
// alone (a worker's previous op, a message's send, a ring neighbour's step), so workers are
// simply advanced in turn as far as each can go; the order of turns does not change any time.
class Executor {
 public:
  Executor(const std::vector<program::WorkerProgram>& programs, int iterations, const ComputeTime& compute,
           const CommTime& comm)
      : programs_(programs), iterations_(iterations), compute_(compute), comm_(comm), state_(programs.size()) {
    for (std::size_t w = 0; w < programs.size(); ++w) {
      if (programs[w].worker != static_cast<int>(w))
        throw std::invalid_argument(fmt::format(
            "execute: programs[{}] is worker {}; give the programs in worker id order", w, programs[w].worker));
      reports_.push_back(program::WorkerReport{static_cast<int>(w), {}, {}});
    }
  }

  std::vector<program::WorkerReport> run() {
    for (;;) {
      bool progress = false;
      bool all_done = true;
      for (std::size_t w = 0; w < programs_.size(); ++w) {
        progress = advance(static_cast<int>(w)) || progress;
        all_done = all_done && state_[w].iteration >= iterations_;
      }
      if (all_done) break;
      if (!progress) throw DeadlockError(blocked());
    }
    if (!messages_.empty()) {
      const auto& key = messages_.begin()->first;
      const auto& [src, dst, tag, iteration] = key;
      throw std::invalid_argument(
          fmt::format("execute: worker {} sends tag {} to worker {} in iteration {}, which never receives it", src, tag,
                      dst, iteration));
    }
    return std::move(reports_);
  }

 private:
  struct State {
    int iteration = 0;
    std::size_t pc = 0;
    std::int64_t t = 0;
    int allreduce_seq = 0;    // all-reduces already done this iteration
    std::size_t ar_step = 0;  // the step of the all-reduce in progress
    std::int64_t ar_start = 0;
  };
  using MessageKey = std::tuple<int, int, std::uint32_t, int>;  // src, dst, tag, iteration
  struct Message {
    std::int64_t sent = 0;      // when the sender reached its send
    Nanos arrival = kNotYet;  // kNotYet: a rendezvous send whose recv is not posted yet
    std::size_t span = 0;       // the sender's send span
    std::uint64_t bytes = 0;
  };
  using RingKey = std::tuple<int, int, int>;                    // worker, iteration, all-reduce index
  struct RingProgress {
    const Op* op = nullptr;
    std::vector<std::int64_t> step_start;
  };

  std::int64_t comm_ns(int src, int dst, std::uint64_t bytes) const {
    const auto d = comm_(src, dst, bytes).count();
    if (d < 0) throw std::invalid_argument(fmt::format("execute: negative transfer time {} ns", d));
    return d;
  }

  void check_peer(int worker, int peer) const {
    if (peer < 0 || static_cast<std::size_t>(peer) >= programs_.size())
      throw std::invalid_argument(fmt::format("execute: worker {} names peer {}, which is not a worker (0..{})", worker,
                                              peer, programs_.size() - 1));
  }

  // Runs worker `w` until it blocks or finishes; true if it moved.
  bool advance(int w) {
    auto& st = state_[static_cast<std::size_t>(w)];
    auto& report = reports_[static_cast<std::size_t>(w)];
    const auto& ops = programs_[static_cast<std::size_t>(w)].ops;
    bool moved = false;
    while (st.iteration < iterations_) {
      if (st.pc == 0 && st.ar_step == 0 && report.iterations.size() == static_cast<std::size_t>(st.iteration))
        report.iterations.push_back({st.t, st.t});
      if (st.pc == ops.size()) {
        report.iterations.back().end_ns = st.t;
        ++st.iteration;
        st.pc = 0;
        st.allreduce_seq = 0;
        moved = true;
        continue;
      }
      if (!step(w, st, report, ops[st.pc])) return moved;
      moved = true;
    }
    return moved;
  }

  // Executes (part of) one op; false if it must wait.
  bool step(int w, State& st, program::WorkerReport& report, const Op& op) {
    switch (op.kind) {
      case OpKind::forward:
      case OpKind::backward:
      case OpKind::optimizer: {
        const auto d = compute_(w, op).count();
        if (d < 0) throw std::invalid_argument(fmt::format("execute: negative compute time {} ns", d));
        report.spans.push_back(Span{program::compute_span_kind(op.kind), st.iteration, op.microbatch, st.t, st.t + d, 0, -1});
        st.t += d;
        ++st.pc;
        return true;
      }
      case OpKind::send: {
        check_peer(w, op.peer);
        // Eager: the bytes leave now. Rendezvous: when the receiver's recv is posted, known
        // only once it gets there (recv below), which also ends the span.
        Message m{st.t, -1, report.spans.size(), op.bytes};
        if (!op.rendezvous) m.arrival = st.t + comm_ns(w, op.peer, op.bytes);
        report.spans.push_back(Span{SpanKind::send, st.iteration, op.microbatch, st.t, m.arrival, op.bytes, op.peer});
        if (!messages_.emplace(MessageKey{w, op.peer, op.tag, st.iteration}, m).second)
          throw std::invalid_argument(fmt::format("execute: worker {} sends tag {} to worker {} twice in iteration {}",
                                                  w, op.tag, op.peer, st.iteration));
        ++st.pc;
        return true;
      }
      case OpKind::recv: {
        check_peer(w, op.peer);
        auto it = messages_.find(MessageKey{op.peer, w, op.tag, st.iteration});
        if (it == messages_.end()) return false;
        auto& m = it->second;
        if (m.arrival == kNotYet) {
          // Posted at st.t (a worker waiting at a recv keeps its time); the sender hears of
          // it one one-way delay later, and sends from the later of that and its send.
          const auto start = std::max(m.sent, st.t + comm_ns(w, op.peer, 0));
          m.arrival = start + comm_ns(op.peer, w, m.bytes);
          reports_[static_cast<std::size_t>(op.peer)].spans[m.span].end_ns = m.arrival;
        }
        if (m.arrival > st.t) {
          report.spans.push_back(
              Span{SpanKind::recv_wait, st.iteration, op.microbatch, st.t, m.arrival, op.bytes, op.peer});
          st.t = m.arrival;
        }
        messages_.erase(it);
        ++st.pc;
        return true;
      }
      case OpKind::allreduce:
        return allreduce(w, st, report, op);
    }
    return false;
  }

  bool allreduce(int w, State& st, program::WorkerReport& report, const Op& op) {
    const auto n = op.ring.size();
    const auto around = program::ring_neighbours(op.ring, w);
    if (!around)
      throw std::invalid_argument(fmt::format("execute: worker {} runs an all-reduce whose ring lacks it", w));
    for (int peer : op.ring) check_peer(w, peer);
    const auto finish = [&] {
      ++st.pc;
      ++st.allreduce_seq;
      st.ar_step = 0;
    };
    if (n < 2) {
      finish();
      return true;
    }
    const int prev = around->prev;
    const int next = around->next;
    const auto chunk = program::ring_chunk_bytes(op.bytes, n);
    const std::size_t steps = 2 * (n - 1);

    auto& mine = rings_[RingKey{w, st.iteration, st.allreduce_seq}];
    if (mine.op == nullptr) {
      mine.op = &op;
      st.ar_start = st.t;
    }
    bool moved = false;
    while (st.ar_step < steps) {
      if (mine.step_start.size() == st.ar_step) {
        mine.step_start.push_back(st.t);
        moved = true;
      }
      auto it = rings_.find(RingKey{prev, st.iteration, st.allreduce_seq});
      if (it == rings_.end() || it->second.step_start.size() <= st.ar_step) return moved;
      if (it->second.op->ring != op.ring || it->second.op->bytes != op.bytes)
        throw std::invalid_argument(
            fmt::format("execute: all-reduce {} of iteration {}: workers {} and {} disagree on the ring or the size",
                        st.allreduce_seq, st.iteration, prev, w));
      const auto sent = st.t + comm_ns(w, next, chunk);
      const auto received = it->second.step_start[st.ar_step] + comm_ns(prev, w, chunk);
      st.t = std::max(sent, received);
      ++st.ar_step;
      moved = true;
    }
    report.spans.push_back(Span{SpanKind::allreduce, st.iteration, -1, st.ar_start, st.t, op.bytes, -1});
    finish();
    return true;
  }

  std::vector<DeadlockError::Blocked> blocked() const {
    std::vector<DeadlockError::Blocked> out;
    for (std::size_t w = 0; w < programs_.size(); ++w) {
      const auto& st = state_[w];
      if (st.iteration >= iterations_) continue;
      const Op& op = programs_[w].ops[st.pc];
      std::string waiting;
      if (op.kind == OpKind::recv)
        waiting = fmt::format("recv {} bytes tag {} from worker {}", op.bytes, op.tag, op.peer);
      else
        waiting = fmt::format("all-reduce step {} of {} over ring [{}]", st.ar_step + 1, 2 * (op.ring.size() - 1),
                              fmt::join(op.ring, ", "));
      out.push_back({static_cast<int>(w), st.iteration, st.pc, std::move(waiting)});
    }
    return out;
  }

  const std::vector<program::WorkerProgram>& programs_;
  int iterations_;
  const ComputeTime& compute_;
  const CommTime& comm_;
  std::vector<State> state_;
  std::vector<program::WorkerReport> reports_;
  std::map<MessageKey, Message> messages_;  // sent, not yet received
  std::map<RingKey, RingProgress> rings_;
};

}  // namespace

DeadlockError::Blocked DeadlockError::at(int worker, int iteration, std::size_t pc, const program::Op& op,
                                         std::string_view executor) {
  std::string waiting = op.kind == OpKind::recv
                            ? fmt::format("recv {} bytes tag {} from worker {}", op.bytes, op.tag, op.peer)
                            : fmt::format("{} ({})", program::to_string(op.kind), executor);
  return {worker, iteration, pc, std::move(waiting)};
}

DeadlockError::DeadlockError(std::vector<Blocked> blocked)
    : std::runtime_error(describe_all(blocked)), blocked_(std::move(blocked)) {}

std::vector<program::WorkerReport> execute(const std::vector<program::WorkerProgram>& programs, int iterations,
                                           const ComputeTime& compute, const CommTime& comm) {
  if (iterations < 0) throw std::invalid_argument(fmt::format("execute: {} iterations", iterations));
  return Executor(programs, iterations, compute, comm).run();
}

ComputeTime modeled_compute(const Plan& plan) {
  std::vector<double> flops_per_s = plan.effective_flops;
  return [flops_per_s](int worker, const Op& op) {
    const double seconds = op.flops / flops_per_s.at(static_cast<std::size_t>(worker));
    return Duration{static_cast<std::int64_t>(std::llround(seconds * 1e9))};
  };
}

CommTime uncontended_comm(const Plan& plan) {
  struct Path {
    Duration delay{};
    Rate rate{};  // 0: no serialization time
  };
  const auto& topo = plan.topology;
  const double scale = plan.scenario.scale;
  const auto scaled = [&](Rate r) {
    return Rate{static_cast<std::uint64_t>(std::llround(static_cast<double>(r.bps) * scale))};
  };
  // paths[src dc][dst dc]; a DC pair without a link cannot talk at all.
  std::vector<std::vector<std::optional<Path>>> paths(topo.dcs.size(),
                                                      std::vector<std::optional<Path>>(topo.dcs.size()));
  for (std::size_t dc = 0; dc < topo.dcs.size(); ++dc) paths[dc][dc] = Path{topo.lan.delay, scaled(topo.lan.rate)};
  for (const auto& l : topo.links) paths[l.src][l.dst] = Path{l.params.delay, scaled(l.params.rate)};
  std::vector<std::size_t> dc_of;
  for (const auto& w : plan.workers) dc_of.push_back(w.dc);
  return [paths, dc_of, topo_name = topo.name](int src, int dst, std::uint64_t bytes) {
    const auto a = dc_of.at(static_cast<std::size_t>(src));
    const auto b = dc_of.at(static_cast<std::size_t>(dst));
    const auto& path = paths[a][b];
    if (!path)
      throw std::invalid_argument(
          fmt::format("lab {}: no WAN link from DC {} to DC {} for worker {} -> {}", topo_name, a, b, src, dst));
    if (path->rate.bps == 0) return path->delay;
    return path->delay + serialization_time(Bytes{bytes}, path->rate);
  };
}

}  // namespace wanlab::workload
