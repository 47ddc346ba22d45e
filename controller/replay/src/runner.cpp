#include "wanlab/replay/runner.hpp"

#include <pthread.h>
#include <sys/prctl.h>
#include <time.h>

#include <fmt/format.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "wanlab/common/thread.hpp"

namespace wanlab::replay {
namespace {

timespec to_timespec(Duration t) {
  const auto ns = t.count();
  return {static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
}

}  // namespace

std::string to_string(ReplayState s) {
  switch (s) {
    case ReplayState::running:
      return "running";
    case ReplayState::finished:
      return "finished";
    case ReplayState::stopped:
      return "stopped";
  }
  return "?";
}

Duration MonotonicClock::now() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return Duration{static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec};
}

bool MonotonicClock::sleep_until(Duration deadline, const std::atomic<bool>& stop) {
  for (;;) {
    if (stop.load(std::memory_order_relaxed)) return false;
    const Duration t = now();
    if (t >= deadline) return true;
    // The last slice ends exactly at the deadline: absolute, so no drift from the time
    // spent between reading the clock and sleeping.
    const timespec ts = to_timespec(std::min(deadline, t + kStopPoll));
    while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
    }
  }
}

Replayer::Replayer(Trace trace, ApplyStep apply, Clock& clock)
    : trace_(std::move(trace)), schedule_(trace_), apply_(std::move(apply)), clock_(clock) {
  progress_.next = schedule_.first();
}

Step Replayer::merged(const Due& from, const Due& to) const {
  // Occurrences from..to in order; one full pass of the trace already covers every
  // parameter it sets, so a long stall costs at most one pass.
  const auto n = static_cast<std::uint64_t>(schedule_.size());
  const std::uint64_t first = from.loop * n + from.step, last = to.loop * n + to.step;
  Step out;
  for (std::uint64_t o = std::max(first, last + 1 >= n ? last + 1 - n : 0); o <= last; ++o) {
    const auto& s = trace_.steps[static_cast<std::size_t>(o % n)];
    if (s.rate) out.rate = s.rate;
    if (s.delay) out.delay = s.delay;
    if (s.jitter) out.jitter = s.jitter;
    if (s.loss) out.loss = s.loss;
  }
  out.at = to.at;
  out.line = trace_.steps[to.step].line;
  return out;
}

void Replayer::run(const std::atomic<bool>& stop) {
  const Duration start = clock_.now();
  {
    std::lock_guard lock(mutex_);
    progress_.start = start;
  }
  auto due = schedule_.first();
  while (due) {
    if (!clock_.sleep_until(start + due->at, stop)) break;
    // Late by a whole step or more: apply everything due now in one change.
    Due target = *due;
    if (auto latest = schedule_.latest(clock_.now() - start); latest && latest->at > due->at) target = *latest;

    const std::uint64_t skipped = target == *due ? 0 : schedule_.between(*due, target) + 1;
    const Step step = target == *due ? trace_.steps[due->step] : merged(*due, target);
    std::string error;
    const Duration apply_start = clock_.now();
    try {
      apply_(step);
    } catch (const std::exception& e) {
      error = e.what();
    }
    const Duration applied_at = clock_.now();
    due = schedule_.next(target);
    std::lock_guard lock(mutex_);
    histogram_.add(applied_at - (start + target.at));
    apply_histogram_.add(applied_at - apply_start);
    wake_histogram_.add(apply_start - (start + target.at));
    progress_.lateness = histogram_.summary();
    progress_.apply_time = apply_histogram_.summary();
    progress_.wake_time = wake_histogram_.summary();
    progress_.last = target;
    progress_.next = due;
    progress_.applied++;
    progress_.skipped += skipped;
    if (!error.empty()) {
      progress_.failed++;
      progress_.last_error = error;
    }
  }
  if (!due) {
    // Hold: done at the trace's end (or its last step); the link keeps the last values.
    const auto finish = schedule_.finish().value_or(Duration{});
    if (clock_.sleep_until(start + finish, stop)) {
      std::lock_guard lock(mutex_);
      progress_.state = ReplayState::finished;
      return;
    }
  }
  std::lock_guard lock(mutex_);
  progress_.state = ReplayState::stopped;
}

ReplayProgress Replayer::progress() const {
  std::lock_guard lock(mutex_);
  return progress_;
}

ReplayThread::ReplayThread(Trace trace, ApplyStep apply, std::function<void()> on_done, ReplayThreadOptions options)
    : replayer_(std::move(trace), std::move(apply), clock_) {
  thread_ = std::thread([this, done = std::move(on_done), options] {
    ::prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    name_this_thread("wanlab-replay");
    std::string sched = "normal";
    if (options.realtime_priority > 0) {
      sched_param sp{};
      sp.sched_priority = options.realtime_priority;
      if (const int rc = ::pthread_setschedparam(::pthread_self(), SCHED_FIFO, &sp); rc == 0)
        sched = fmt::format("SCHED_FIFO {}", options.realtime_priority);
      else
        spdlog::warn("replay of {}: no real-time priority ({}); steps may be late on a busy machine",
                     replayer_.trace().source, std::strerror(rc));
    }
    {
      std::lock_guard lock(sched_mutex_);
      scheduling_ = sched;
    }
    try {
      replayer_.run(stop_);
      if (done && replayer_.progress().state == ReplayState::finished) done();
    } catch (const std::exception& e) {
      spdlog::error("replay of {} stopped: {}", replayer_.trace().source, e.what());
    }
  });
}

ReplayThread::~ReplayThread() {
  stop();
}

std::string ReplayThread::scheduling() const {
  std::lock_guard lock(sched_mutex_);
  return scheduling_;
}

void ReplayThread::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

}  // namespace wanlab::replay
