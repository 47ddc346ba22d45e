#include "wanlab/replay/lateness.hpp"

#include <algorithm>
#include <cmath>

namespace wanlab::replay {
namespace {
constexpr std::int64_t kUs = 1'000;
constexpr std::int64_t kMs = 1'000'000;
}  // namespace

LatenessHistogram::LatenessHistogram() : buckets_(static_cast<std::size_t>(kFineBuckets + kCoarseBuckets + 1), 0) {}

void LatenessHistogram::add(Duration lateness) {
  const std::int64_t ns = std::max<std::int64_t>(0, lateness.count());
  std::int64_t b;
  if (ns < kFineBuckets * kUs)
    b = ns / kUs;
  else if (ns < 10'000 * kMs)
    b = kFineBuckets + (ns - kFineBuckets * kUs) / kMs;
  else
    b = kFineBuckets + kCoarseBuckets;
  ++buckets_[static_cast<std::size_t>(b)];
  ++count_;
  max_ = std::max(max_, Duration{ns});
}

Duration LatenessHistogram::percentile(double p) const {
  if (count_ == 0) return Duration{};
  const auto rank = std::clamp<std::uint64_t>(
      static_cast<std::uint64_t>(std::ceil(p / 100.0 * static_cast<double>(count_))), 1, count_);
  if (rank == count_) return max_;  // known exactly
  std::uint64_t seen = 0;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    seen += buckets_[b];
    if (seen < rank) continue;
    const auto i = static_cast<std::int64_t>(b);
    Duration edge = i < kFineBuckets                    ? Duration{i * kUs}
                    : i < kFineBuckets + kCoarseBuckets ? Duration{kFineBuckets * kUs + (i - kFineBuckets) * kMs}
                                                        : max_;
    return std::min(edge, max_);
  }
  return max_;
}

LatenessSummary LatenessHistogram::summary() const {
  return {count_, percentile(50), percentile(99), max_};
}

}  // namespace wanlab::replay
