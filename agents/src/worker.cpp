#include "worker.hpp"

#include <fmt/format.h>

#include "prefill.hpp"
#include "wanlab/common/ring.hpp"

namespace wanlab::agent {

using program::Op;
using program::OpKind;
using program::Span;
using program::SpanKind;

Worker::Worker(program::WorkerProgram program, std::unique_ptr<Compute> compute, DataPlane& data,
               WorkerOptions options)
    : program_(std::move(program)), compute_(std::move(compute)), data_(data), options_(std::move(options)) {
  report_.worker = program_.worker;
}

std::int64_t Worker::since_start(Clock::time_point t) const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t - options_.start).count();
}

void Worker::add_span(Span s) {
  std::lock_guard lock(spans_mutex_);
  report_.spans.push_back(s);
}

Clock::time_point Worker::expected_end(std::size_t op, Clock::time_point from) const {
  const auto it = last_wait_.find(op);
  return it == last_wait_.end() ? Clock::time_point::max() : from + it->second;
}

void Worker::add_gpu_span(program::Span s) {
  s.iteration = iteration_.load();
  add_span(s);
}

void Worker::run(const std::atomic<bool>& abort) {
  const int me = program_.worker;
  GpuShare* share = options_.gpu_share;
  unblocked_ = Clock::now();
  for (int it = 0; it < options_.iterations; ++it) {
    iteration_ = it;
    program::IterationTime iter{since_start(Clock::now()), 0};
    std::vector<std::pair<std::int64_t, std::int64_t>> idle;
    for (std::size_t i = 0; i < program_.ops.size(); ++i) {
      const Op& op = program_.ops[i];
      switch (op.kind) {
        case OpKind::forward:
        case OpKind::backward:
        case OpKind::optimizer: {
          auto ready = std::max(gpu_free_, unblocked_);
          if (options_.tp_sync) {
            const auto group = options_.tp_sync->arrive_and_wait(ready, abort);
            if (!group) throw Aborted();
            ready = *group;
          }
          const auto ran = compute_->run(op, program_.shape_of(op), abort, ready);
          if (!ran) throw Aborted();
          gpu_free_ = ran->end;
          const auto kind = program::compute_span_kind(op.kind);
          add_span({kind, it, op.microbatch, since_start(ran->start), since_start(ran->end), 0, -1});
          break;
        }
        case OpKind::send: {
          const auto t0 = since_start(Clock::now());
          {
            std::lock_guard lock(spans_mutex_);
            ++sends_in_flight_;
          }
          auto go = [this, me, it, op, t0] {
            data_.send(me, op.peer, wire_tag(it, op.tag), op.bytes, [this, it, op, t0] {
              std::lock_guard lock(spans_mutex_);
              report_.spans.push_back(
                  {SpanKind::send, it, op.microbatch, t0, since_start(Clock::now()), op.bytes, op.peer});
              if (--sends_in_flight_ == 0) sends_done_.notify_all();
            });
          };
          // A rendezvous send leaves once the receiver's recv is posted (after the window,
          // where there is one: the gate is asked from this thread).
          std::function<void()> start = std::move(go);
          if (op.rendezvous)
            start = [this, me, it, op, send_now = std::move(start)]() mutable {
              data_.when_posted(me, op.peer, wire_tag(it, op.tag), std::move(send_now));
            };
          // The span starts when the worker wanted to send, so a wait for the window shows.
          if (options_.wan_gate && options_.wan_peers.contains(op.peer))
            options_.wan_gate(me, op.peer, it, op.tag, op.bytes, std::move(start));
          else
            start();
          break;
        }
        case OpKind::recv: {
          const auto t0 = Clock::now();
          if (op.rendezvous) data_.post(op.peer, me, wire_tag(it, op.tag));
          // The GPU is lent to prefill only while the worker really blocks.
          const bool lend = share != nullptr && !data_.has(op.peer, me, wire_tag(it, op.tag), op.bytes);
          if (lend) {
            share->training_idle(expected_end(i, t0));
            // As the message arrives, when the rest will be in (prefill stops by then).
            data_.watch(op.peer, me, wire_tag(it, op.tag), op.bytes,
                        [share, epoch = share->idle_epoch()](Clock::time_point at) { share->expect(at, epoch); });
          }
          // The GPU may go on from when the message was in, not from when this thread woke
          // up to see it (earlier than t0 when it was already there).
          const auto in = data_.wait(op.peer, me, wire_tag(it, op.tag), op.bytes);
          const auto t1 = std::max(t0, in);
          unblocked_ = std::max(unblocked_, in);
          if (lend) unblocked_ = std::max(unblocked_, share->training_busy(in));
          if (lend) last_wait_[i] = t1 - t0;
          // Only the time actually spent waiting is a span: data that was already there
          // cost nothing.
          if (t1 - t0 > std::chrono::microseconds(50)) {
            add_span({SpanKind::recv_wait, it, op.microbatch, since_start(t0), since_start(t1), op.bytes, op.peer});
            idle.emplace_back(since_start(t0), since_start(t1));
          }
          break;
        }
        case OpKind::allreduce: {
          const auto n = static_cast<int>(op.ring.size());
          if (n <= 1) break;
          const auto around = program::ring_neighbours(op.ring, me);
          if (!around) throw std::runtime_error(fmt::format("worker {}: not in its all-reduce ring", me));
          const int next = around->next;
          const int prev = around->prev;
          // Each step moves one chunk, rounded up as the simulator and the analytic executor round it.
          const std::uint64_t chunk = program::ring_chunk_bytes(op.bytes, static_cast<std::size_t>(n));
          const auto t0 = Clock::now();
          if (share) share->training_idle(expected_end(i, t0));
          auto in = t0;  // when the last step's chunk was in
          for (int step = 0; step < 2 * (n - 1); ++step) {
            const auto tag = wire_tag(it, allreduce_tag(i, step));
            if (step == 0 && op.rendezvous) {  // the ring starts once the next rank is in (program.hpp)
              data_.post(prev, me, tag);
              data_.when_posted(me, next, tag, [this, me, next, tag, chunk] { data_.send(me, next, tag, chunk, {}); });
            } else {
              data_.send(me, next, tag, chunk, {});
            }
            in = data_.wait(prev, me, tag, chunk);
          }
          const auto t1 = std::max(t0, in);
          unblocked_ = std::max(unblocked_, t1);
          if (share) unblocked_ = std::max(unblocked_, share->training_busy(t1));
          last_wait_[i] = t1 - t0;
          add_span({SpanKind::allreduce, it, -1, since_start(t0), since_start(t1),
                    chunk * static_cast<std::uint64_t>(2 * (n - 1)), -1});
          idle.emplace_back(since_start(t0), since_start(t1));
          break;
        }
      }
      if (abort) throw Aborted();
    }
    iter.end_ns = since_start(Clock::now());
    {
      std::lock_guard lock(spans_mutex_);
      report_.iterations.push_back(iter);
    }
    if (options_.on_iteration) options_.on_iteration(me, iter, it, idle);
  }
}

program::WorkerReport Worker::report(std::chrono::milliseconds timeout) {
  std::unique_lock lock(spans_mutex_);
  sends_done_.wait_for(lock, timeout, [&] { return sends_in_flight_ == 0; });
  return report_;
}

}  // namespace wanlab::agent
