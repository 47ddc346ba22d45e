#include "wanlab/replay/schedule.hpp"

#include <algorithm>
#include <stdexcept>

namespace wanlab::replay {

Schedule::Schedule(const Trace& trace) : mode_(trace.mode), end_(trace.end) {
  times_.reserve(trace.steps.size());
  for (const auto& s : trace.steps) {
    if (!times_.empty() && s.at <= times_.back()) throw std::invalid_argument("trace times must strictly increase");
    times_.push_back(s.at);
  }
  if (mode_ == EndMode::loop) {
    if (!end_ || (!times_.empty() && *end_ <= times_.back()))
      throw std::invalid_argument("a looping trace needs an end after its last step");
    period_ = *end_;
  }
}

Due Schedule::make(std::uint64_t loop, std::size_t step) const {
  return {step, loop, period_ * static_cast<std::int64_t>(loop) + times_[step]};
}

std::optional<Due> Schedule::first() const {
  if (times_.empty()) return std::nullopt;
  return make(0, 0);
}

std::optional<Due> Schedule::next(const Due& d) const {
  if (d.step + 1 < times_.size()) return make(d.loop, d.step + 1);
  if (mode_ == EndMode::loop) return make(d.loop + 1, 0);
  return std::nullopt;
}

std::optional<Due> Schedule::latest(Duration elapsed) const {
  if (times_.empty() || elapsed < times_.front()) return std::nullopt;
  std::uint64_t loop = 0;
  Duration in_loop = elapsed;
  if (mode_ == EndMode::loop) {
    loop = static_cast<std::uint64_t>(elapsed / period_);
    in_loop = elapsed % period_;
  }
  // The last step at or before in_loop; before this loop's first step, the previous
  // loop's last step.
  const auto it = std::upper_bound(times_.begin(), times_.end(), in_loop);
  if (it == times_.begin()) return make(loop - 1, times_.size() - 1);  // loop > 0 here
  return make(loop, static_cast<std::size_t>(it - times_.begin()) - 1);
}

std::uint64_t Schedule::between(const Due& a, const Due& b) const {
  const auto n = static_cast<std::uint64_t>(times_.size());
  const auto ia = a.loop * n + a.step;
  const auto ib = b.loop * n + b.step;
  return ib > ia ? ib - ia - 1 : 0;
}

std::optional<Duration> Schedule::finish() const {
  if (mode_ == EndMode::loop) return std::nullopt;
  if (end_) return *end_;
  return times_.empty() ? Duration{} : times_.back();
}

}  // namespace wanlab::replay
