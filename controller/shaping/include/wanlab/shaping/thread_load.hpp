#pragma once
// Where a thread's time off the CPU went, as the kernel counts it: the time it was runnable
// but waited for its CPU (schedstat's run delay: other threads at its priority, interrupts
// and kernel work ahead of it), and the time the hypervisor took from the CPU it runs on
// (that CPU's steal in /proc/stat). The userspace engine samples both so that a run whose
// packets were released late says whose doing it was (summary.json engine block).
#include <cstdint>
#include <optional>
#include <string_view>

#include "wanlab/common/unique_fd.hpp"

namespace wanlab::shaping {

/// The run delay in ns (the second field) of a schedstat line "<run ns> <wait ns> <slices>".
std::optional<std::uint64_t> parse_schedstat_run_delay(std::string_view text);
/// The steal ticks (USER_HZ) of CPU `cpu` in the text of /proc/stat ("cpuN user nice system
/// idle iowait irq softirq steal ..."); nullopt when that line is missing or short.
std::optional<std::uint64_t> parse_cpu_steal_ticks(std::string_view proc_stat, int cpu);

class ThreadLoadMeter {
 public:
  /// On the thread to measure: keeps /proc/thread-self/schedstat and /proc/stat open.
  ThreadLoadMeter();
  /// On that thread: reads its run delay, and the steal of its CPU at most every
  /// `steal_every_ns` (the whole /proc/stat is read for it).
  void sample(std::int64_t now_ns, std::int64_t steal_every_ns = 100'000'000);

  std::uint64_t run_delay_ns() const { return run_delay_ns_; }
  /// Steal of the CPU the thread sat on, summed over the sampling periods it stayed on one
  /// CPU (a period in which it moved is left out).
  std::uint64_t cpu_steal_ns() const { return steal_ns_; }
  int cpu() const { return cpu_; }
  /// False where the kernel has no schedstat (CONFIG_SCHED_INFO off) or /proc is missing.
  bool available() const { return schedstat_.valid(); }

 private:
  UniqueFd schedstat_, proc_stat_;
  std::uint64_t run_delay_ns_ = 0, steal_ns_ = 0;
  int cpu_ = -1;
  std::optional<std::uint64_t> last_steal_ticks_;
  std::int64_t last_steal_read_ns_ = 0;
  bool steal_read_once_ = false;
};

}  // namespace wanlab::shaping
