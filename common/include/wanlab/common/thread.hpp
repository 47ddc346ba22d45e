#pragma once
// The calling thread's name (in ps, top, perf: at most 15 characters), its nice value, and
// its scheduling (a real-time policy, a CPU). Linux schedules threads, so each of these sets
// the caller's only.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wanlab/common/units.hpp"

namespace wanlab {

/// Names the calling thread (truncated to 15 characters).
void name_this_thread(const std::string& name);

/// Sets the calling thread's nice value (-20 .. 19). Returns an empty string, or why it could
/// not (raising priority needs CAP_SYS_NICE).
std::string set_this_thread_nice(int nice);

/// How a thread is scheduled (`wanlab up --engine-sched`, `--engine-cpu`):
///   fifo:P, rr:P      SCHED_FIFO / SCHED_RR at priority P (1..99). A real-time thread runs
///                     before every ordinary one on its CPU; the kernel's RT throttling
///                     (/proc/sys/kernel/sched_rt_runtime_us, 0.95 s of each 1 s by default)
///                     bounds what all of them together take, so one cannot lock a CPU up.
///   deadline:R/P      SCHED_DEADLINE: R of CPU time in every period P (durations, e.g.
///                     deadline:600us/1ms), admitted and enforced by the kernel. Not with a CPU.
///   nice[:N]          the fair scheduler at nice N (-20..19; default -20).
///   off               left as created.
/// A CPU (`cpu`) pins the thread there (sched_setaffinity).
struct ThreadSched {
  enum class Policy { off, nice, fifo, rr, deadline };
  Policy policy = Policy::off;
  int priority = 0;  // fifo/rr: 1..99; nice: -20..19
  Duration runtime{0}, period{0};  // deadline
  std::optional<int> cpu;

  /// The spelling parse_thread_sched() reads back, e.g. "fifo:50", "deadline:600us/1ms",
  /// with " cpu N" after it when pinned.
  std::string to_string() const;
  bool realtime() const { return policy == Policy::fifo || policy == Policy::rr || policy == Policy::deadline; }
};

/// Parses a --engine-sched value (above). Returns the reason in `error` (no field name).
Parsed<ThreadSched> parse_thread_sched(std::string_view text);

/// What apply_thread_sched() did: the scheduling the thread has now ("SCHED_FIFO 50 on CPU 1",
/// "nice -20", "normal") and why any of what was asked was not done.
struct ThreadSchedResult {
  std::string applied;
  std::vector<std::string> warnings;
  bool as_asked = true;  // everything asked was done
};

/// Applies `want` to the calling thread. Where the kernel refuses (no CAP_SYS_NICE in a
/// container, RT bandwidth of the cgroup used up, a deadline task that is pinned), it falls
/// back to `fallback` (a nice value or off) and says so in `warnings`; a CPU that cannot be
/// had is left out, with a warning. Never throws.
ThreadSchedResult apply_thread_sched(const ThreadSched& want, const ThreadSched& fallback);

}  // namespace wanlab
