#pragma once
// Step lateness (actual apply time - scheduled time) over every step a replay has applied,
// in constant memory: a replay that loops for days applies millions of steps.
#include <cstdint>
#include <vector>

#include "wanlab/common/units.hpp"

namespace wanlab::replay {

struct LatenessSummary {
  std::uint64_t count = 0;
  Duration p50{}, p99{}, max{};
};

/// A histogram with 1 us buckets below 10 ms and 1 ms buckets from 10 ms to 10 s (beyond,
/// one bucket; the maximum is kept exactly). Percentiles are nearest-rank, reported as the
/// lower edge of their bucket: exact to 1 us below 10 ms.
class LatenessHistogram {
 public:
  LatenessHistogram();
  /// Negative values (never expected: sleeps do not end early) count as 0.
  void add(Duration lateness);
  std::uint64_t count() const { return count_; }
  Duration max() const { return max_; }
  /// Nearest-rank percentile, p in (0, 100]; 0 when empty.
  Duration percentile(double p) const;
  LatenessSummary summary() const;

 private:
  static constexpr std::int64_t kFineBuckets = 10'000;   // 1 us each: 0 .. 10 ms
  static constexpr std::int64_t kCoarseBuckets = 9'990;  // 1 ms each: 10 ms .. 10 s
  std::vector<std::uint64_t> buckets_;                   // fine, coarse, then one overflow bucket
  std::uint64_t count_ = 0;
  Duration max_{};
};

}  // namespace wanlab::replay
