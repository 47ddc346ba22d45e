#pragma once
// When each step of a trace is due, counted from the replay's start: pure arithmetic on
// durations (the runner supplies the clock). A hold trace runs its steps once; a loop
// trace runs step i of loop n at n * end + at(i), forever.
#include <cstdint>
#include <optional>
#include <vector>

#include "wanlab/replay/trace.hpp"

namespace wanlab::replay {

/// One occurrence of a step.
struct Due {
  std::size_t step = 0;    // index into Trace::steps
  std::uint64_t loop = 0;  // 0 for the first pass
  Duration at{};           // from the replay's start
  bool operator==(const Due&) const = default;
};

class Schedule {
 public:
  /// `trace` must be valid (parse_trace's output): times strictly increasing, a loop has an end.
  explicit Schedule(const Trace& trace);

  std::size_t size() const { return times_.size(); }
  EndMode mode() const { return mode_; }
  /// The first occurrence (nullopt for a trace without steps).
  std::optional<Due> first() const;
  /// The occurrence after `d`; nullopt once a hold trace has run its last step.
  std::optional<Due> next(const Due& d) const;
  /// The latest occurrence due at `elapsed` (at <= elapsed); nullopt before the first.
  std::optional<Due> latest(Duration elapsed) const;
  /// How many occurrences lie strictly between `a` and `b` (a before b): steps a runner
  /// that was late skipped to apply `b` right after `a`.
  std::uint64_t between(const Due& a, const Due& b) const;
  /// When a hold trace is done: its end, or its last step. nullopt for loop.
  std::optional<Duration> finish() const;

 private:
  Due make(std::uint64_t loop, std::size_t step) const;
  std::vector<Duration> times_;
  EndMode mode_;
  Duration period_{};  // loop only
  std::optional<Duration> end_;
};

}  // namespace wanlab::replay
