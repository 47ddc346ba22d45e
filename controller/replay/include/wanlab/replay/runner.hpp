#pragma once
// Running a trace: sleep to each step's time, apply it, record how late it landed.
//
// `Replayer` is the loop, on an injected Clock, with the link change injected too (the
// controller passes one that goes through the lab's LinkShaper, so both backends work);
// tests drive it on a virtual clock. `ReplayThread` runs one on its own thread with the
// monotonic clock: clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) to each step's absolute
// time, with a timer slack of 1 ns (prctl), so the kernel does not defer the wake-up.
//
// A runner that wakes late (more than a whole step) applies the steps it missed at once,
// merged (later values win), counts them as skipped, and goes on with the schedule: the
// schedule is anchored at the start, so lateness never accumulates.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "wanlab/replay/lateness.hpp"
#include "wanlab/replay/schedule.hpp"
#include "wanlab/replay/trace.hpp"

namespace wanlab::replay {

class Clock {
 public:
  virtual ~Clock() = default;
  /// Monotonic time, any origin.
  virtual Duration now() = 0;
  /// Returns true once now() >= deadline, false as soon as it sees `stop` set.
  virtual bool sleep_until(Duration deadline, const std::atomic<bool>& stop) = 0;
};

/// CLOCK_MONOTONIC. Sleeps with clock_nanosleep(TIMER_ABSTIME) in slices of at most
/// kStopPoll, so a stop request is seen within that.
class MonotonicClock final : public Clock {
 public:
  static constexpr Duration kStopPoll = std::chrono::milliseconds(20);
  Duration now() override;
  bool sleep_until(Duration deadline, const std::atomic<bool>& stop) override;
};

/// Applies one step to the link (the step's fields over the link's current parameters).
/// Throws on failure; the replay counts it and goes on.
using ApplyStep = std::function<void(const Step&)>;

enum class ReplayState { running, finished, stopped };
std::string to_string(ReplayState s);

struct ReplayProgress {
  ReplayState state = ReplayState::running;
  Duration start{};           // clock time the replay started
  std::optional<Due> last;    // last step applied
  std::optional<Due> next;    // next step due (nullopt when finished)
  std::uint64_t applied = 0;  // apply calls (each may carry skipped steps)
  std::uint64_t skipped = 0;  // steps merged into a later one because the runner was late
  std::uint64_t failed = 0;   // apply calls that threw
  std::string last_error;
  LatenessSummary lateness;    // over every apply call so far
  LatenessSummary apply_time;  // of which the apply call itself
  LatenessSummary wake_time;   // and the wake-up: the apply call's start - scheduled time
};

class Replayer {
 public:
  Replayer(Trace trace, ApplyStep apply, Clock& clock);
  Replayer(const Replayer&) = delete;
  Replayer& operator=(const Replayer&) = delete;

  /// Runs from clock.now() until a hold trace is done (its end, or its last step) or
  /// `stop` is set. Call once.
  void run(const std::atomic<bool>& stop);
  /// A consistent snapshot; callable from any thread while run() goes on.
  ReplayProgress progress() const;
  const Trace& trace() const { return trace_; }
  const Schedule& schedule() const { return schedule_; }

 private:
  Step merged(const Due& from, const Due& to) const;

  Trace trace_;
  Schedule schedule_;
  ApplyStep apply_;
  Clock& clock_;
  mutable std::mutex mutex_;
  ReplayProgress progress_;
  LatenessHistogram histogram_;
  LatenessHistogram apply_histogram_;
  LatenessHistogram wake_histogram_;
};

struct ReplayThreadOptions {
  /// SCHED_FIFO priority of the thread (1..99), so a busy machine does not delay its
  /// wake-ups: it sleeps between steps and runs for microseconds per step. 0, or a process
  /// not allowed to (no CAP_SYS_NICE): ordinary scheduling.
  int realtime_priority = 1;
};

/// One replay on its own thread (monotonic clock, timer slack 1 ns). Stops and joins on
/// destruction.
class ReplayThread {
 public:
  /// `on_done` (optional) runs on the replay thread once the replay ends by itself (a hold
  /// trace that is done), not when it is stopped.
  ReplayThread(Trace trace, ApplyStep apply, std::function<void()> on_done = {}, ReplayThreadOptions options = {});
  ~ReplayThread();
  ReplayThread(const ReplayThread&) = delete;
  ReplayThread& operator=(const ReplayThread&) = delete;

  /// Asks the thread to stop and waits for it (within MonotonicClock::kStopPoll).
  void stop();
  ReplayProgress progress() const { return replayer_.progress(); }
  const Trace& trace() const { return replayer_.trace(); }
  /// Clock time now, on the clock the replay runs on (for "next step in").
  Duration now() { return clock_.now(); }
  /// "SCHED_FIFO 1" or "normal" (once the thread has started; "" before).
  std::string scheduling() const;

 private:
  mutable std::mutex sched_mutex_;
  std::string scheduling_;
  MonotonicClock clock_;
  Replayer replayer_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace wanlab::replay
