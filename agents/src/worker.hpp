#pragma once
// A stage worker: one emulated GPU executing its program (common/program.hpp) for a run's
// iterations, recording what it did as spans.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

#include "data_plane.hpp"
#include "wanlab/common/program.hpp"

namespace wanlab::gpu {
class GpuCompute;
}

namespace wanlab::agent {

using Clock = std::chrono::steady_clock;

/// When a compute op ran on its GPU.
struct GpuTimes {
  Clock::time_point start;
  Clock::time_point end;
};

/// Where compute time comes from: a wait of flops / effective FLOP/s (modeled) or the
/// stage's GEMMs on a GPU (cuda).
class Compute {
 public:
  virtual ~Compute() = default;
  /// Runs (or waits out) one compute op whose GPU could start it at `ready`: its inputs
  /// were in and the GPU's previous op had ended. `ready` may have passed already, when
  /// the host thread got here late. Returns when the op ran on the GPU, or nothing when
  /// `abort` was set meanwhile.
  virtual std::optional<GpuTimes> run(const program::Op& op, const program::StageShape& shape,
                                      const std::atomic<bool>& abort, Clock::time_point ready) = 0;
};

/// A GPU's time as a stream of queued kernels: an op runs from `ready` for flops /
/// `effective_flops`, however late the host thread was to ask for it (a wake-up after a
/// sleep on a busy machine is late: bench/results/2026-11-26-bubbletea.md), so host latency
/// does not add up op after op. Waits without using the CPU, woken early by an abort.
class ModeledCompute final : public Compute {
 public:
  explicit ModeledCompute(double effective_flops, std::mutex& m, std::condition_variable& cv)
      : effective_flops_(effective_flops), mutex_(m), cv_(cv) {}
  std::optional<GpuTimes> run(const program::Op& op, const program::StageShape& shape, const std::atomic<bool>& abort,
                              Clock::time_point ready) override;

 private:
  double effective_flops_;
  std::mutex& mutex_;
  std::condition_variable& cv_;
};

/// Windowed policies: called instead of sending a message to a peer in another DC; `go`
/// starts the send once the arbiter's window for it is open (any thread).
using WanGate = std::function<void(int worker, int peer, int iteration, std::uint32_t tag, std::uint64_t bytes,
                                   std::function<void()> go)>;

class GpuShare;

/// The tensor-parallel ranks of one stage replica on this node: they start each compute op
/// together, as the all-reduces inside every TP layer keep real ranks in step. Without it
/// each rank would run its own pipeline, drifting apart by what its network waits were.
class TpSync {
 public:
  explicit TpSync(int ranks) : ranks_(ranks) {}
  /// Waits until every rank has arrived, each with the time its GPU could start the op;
  /// returns the latest of them, when the group starts (nothing when `abort` was set
  /// meanwhile).
  std::optional<Clock::time_point> arrive_and_wait(Clock::time_point ready, const std::atomic<bool>& abort) {
    std::unique_lock lock(mutex_);
    const std::uint64_t gen = generation_;
    latest_ = std::max(latest_, ready);
    if (++arrived_ == ranks_) {
      arrived_ = 0;
      start_ = latest_;
      latest_ = Clock::time_point::min();
      ++generation_;
      cv_.notify_all();
      return start_;
    }
    while (generation_ == gen) {
      if (abort) return std::nullopt;
      cv_.wait_for(lock, std::chrono::milliseconds(10));
    }
    // The next generation cannot complete (and overwrite start_) before this rank arrives.
    return start_;
  }

 private:
  const int ranks_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  Clock::time_point latest_ = Clock::time_point::min();  // of this generation's arrivals
  Clock::time_point start_;                             // the last completed generation's start
  std::mutex mutex_;
  std::condition_variable cv_;
};

struct WorkerOptions {
  int iterations = 1;
  WanGate wan_gate;         // unset: every message goes at once (`fair`)
  std::set<int> wan_peers;  // peers in other DCs (what the gate applies to)
  Clock::time_point start;  // the run's start barrier: span times count from here
  /// Called after each iteration (on the worker's thread) with its times and the spans in
  /// which the worker blocked on the network (ns since the start barrier).
  std::function<void(int worker, const program::IterationTime& iteration, int index,
                     const std::vector<std::pair<std::int64_t, std::int64_t>>& idle)>
      on_iteration;
  /// Prefill shares this worker's GPU (BubbleTea): the worker lends it while it blocks.
  GpuShare* gpu_share = nullptr;
  /// Its stage replica's TP ranks, when all of them are on this node (else unset).
  TpSync* tp_sync = nullptr;
};

class Worker {
 public:
  Worker(program::WorkerProgram program, std::unique_ptr<Compute> compute, DataPlane& data, WorkerOptions options);
  /// The run's start barrier, from which span times count.
  void set_start(Clock::time_point start) { options_.start = start; }
  /// Runs the whole schedule on the calling thread. Throws Aborted or std::runtime_error.
  void run(const std::atomic<bool>& abort);
  /// The report (call after run() returned; send spans complete asynchronously, so this
  /// waits for outstanding ones, up to `timeout`).
  program::WorkerReport report(std::chrono::milliseconds timeout);
  const program::WorkerProgram& program() const { return program_; }
  /// Adds a span of other work on this worker's GPU (prefill), tagged with the iteration
  /// the worker is in.
  void add_gpu_span(program::Span s);

 private:
  std::int64_t since_start(Clock::time_point t) const;
  void add_span(program::Span s);

  program::WorkerProgram program_;
  std::unique_ptr<Compute> compute_;
  DataPlane& data_;
  WorkerOptions options_;
  std::mutex spans_mutex_;
  std::condition_variable sends_done_;
  int sends_in_flight_ = 0;
  std::atomic<int> iteration_{0};
  // How long each blocking op waited last iteration: when the worker expects its GPU back.
  std::map<std::size_t, Clock::duration> last_wait_;
  // The GPU's clock: its last compute op's end, and when training last stopped waiting (its
  // last message was in, by the data plane's clock, or a prefill layer let the GPU go); the
  // next op may start at the later of the two, however late the worker's thread wakes.
  Clock::time_point gpu_free_ = Clock::time_point::min();
  Clock::time_point unblocked_ = Clock::time_point::min();
  Clock::time_point expected_end(std::size_t op, Clock::time_point from) const;
  program::WorkerReport report_;
};

/// The wire tag of a program op's message in `iteration`: programs reuse their tags every
/// iteration, the wire does not.
inline std::uint64_t wire_tag(int iteration, std::uint32_t tag) {
  return static_cast<std::uint64_t>(static_cast<std::uint32_t>(iteration)) << 32 | tag;
}
/// Tags of all-reduce ring steps: the top bit set, then the op's index and the step.
inline std::uint32_t allreduce_tag(std::size_t op_index, int step) {
  return 0x80000000u | static_cast<std::uint32_t>(op_index & 0x7ffff) << 12 | static_cast<std::uint32_t>(step & 0xfff);
}

}  // namespace wanlab::agent
