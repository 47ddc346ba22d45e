#include "worker.hpp"

namespace wanlab::agent {

std::optional<GpuTimes> ModeledCompute::run(const program::Op& op, const program::StageShape&,
                                            const std::atomic<bool>& abort, Clock::time_point ready) {
  const GpuTimes t{ready, ready + std::chrono::nanoseconds(static_cast<std::int64_t>(op.flops / effective_flops_ * 1e9))};
  std::unique_lock lock(mutex_);
  cv_.wait_until(lock, t.end, [&] { return abort.load(); });
  if (abort.load()) return std::nullopt;
  return t;
}

}  // namespace wanlab::agent
