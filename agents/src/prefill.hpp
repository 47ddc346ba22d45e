#pragma once
// BubbleTea on an agent: prefill work that shares a node's GPUs with the training stage
// workers, the prompt and KV-cache traffic, and the load generator.
//
// GpuShare: one per GPU. Training owns its GPU except while its worker blocks on the
// network (a recv whose data has not arrived, an all-reduce); only then may a prefill layer
// start. When the worker needs the GPU back it waits for the running layer to end (a layer
// is the preemption granularity) and the prefill is preempted until the next idle time.
// Modeled layers run as segments: a run of consecutive layers whose boundaries are known
// from its start, so the worker waits for the next boundary by the clock, not for the
// runner's thread to be scheduled, and the runner sleeps once per segment, not per layer.
//
// PrefillRunner: one thread per GPU running the prefills the dispatcher placed on it, in
// the order of their reserved start, each no earlier than its start and its prompt's
// arrival, layer by layer while the GPU is idle.
//
// SideChannel: prompt and KV-cache bytes over TCP between nodes (one connection per
// destination, frames of a 16-byte header {kind, request id, bytes} and zero payload), so
// they cross the emulated network like real traffic.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "wanlab/common/program.hpp"

namespace wanlab::gpu {
class GpuCompute;
}

namespace wanlab::agent {

using Clock = std::chrono::steady_clock;

// The lab runs all its nodes on one machine's CPUs, which a real deployment does not share
// between its training and inference hosts. Prefill's threads that move its bytes (the
// prompt and KV-cache traffic, SideChannel) run at this nice value, so where
// the CPUs are contended they yield to training's (stage workers, data plane, control
// channel): training has priority on the lab's CPUs as on its GPUs. On a 2-core machine a
// BubbleTea run at nice 0 took CPU time from training (bench/results/2026-11-26-bubbletea.md).
inline constexpr int kPrefillNice = 10;

class GpuShare {
 public:
  /// Training blocks on the network, expecting to need the GPU again at `until` (what the
  /// same wait took last iteration): prefill may run layers that end by then.
  void training_idle(Clock::time_point until = Clock::time_point::max());
  /// Training needs the GPU since `wanted` (its data was in; later than now means now):
  /// returns once no prefill layer runs on it, with the time the GPU was free for training.
  /// A modeled segment is cut at its first layer boundary at or after `wanted`, by the
  /// clock, however late this thread got here: layers that began after `wanted` did not
  /// run (training had the GPU); a real GPU's layer ends when its runner reports it.
  Clock::time_point training_busy(Clock::time_point wanted = Clock::time_point::max());
  /// Which idle time this is (training_idle() starts the next): expect() names it.
  std::uint64_t idle_epoch() {
    std::lock_guard lock(mutex_);
    return epoch_;
  }
  /// While training waits for a message, whose bytes arrive at a rate that says they will all
  /// be in at `at`: layers that would end after that do not start, and a running segment
  /// ends at the last layer boundary by then (or the layer in progress). Layers run again
  /// only once `at` has passed by a grace of a tenth of the time it was away (at least 2
  /// ms), so that a pause in the arrival does not start one just before the rest comes.
  /// Ignored unless training is still in idle time `epoch`.
  void expect(Clock::time_point at, std::uint64_t epoch);
  /// A GPU no training worker uses (a dedicated inference GPU).
  void set_dedicated() { training_idle(); }
  /// Whether a layer of `layer` may start now: training is idle and the layer would not
  /// run across the moment training expects its GPU back. Once that moment has passed (the
  /// wait is longer than last time) layers run again, and a layer boundary bounds the delay.
  bool may_run_locked(Clock::duration layer) const { return layers_fitting_locked(layer, 1) > 0; }
  /// How many of the next `left` layers of `layer` may run back to back from now (0: none).
  int layers_fitting_locked(Clock::duration layer, int left) const;

  // The runner's side (its thread).
  std::mutex& mutex() { return mutex_; }
  /// A layer whose end only the runner knows (real GPU work): training waits for layer_end().
  void layer_begin_locked() { layer_running_ = true; }
  void layer_end();
  /// `layers` modeled layers of `layer` each, from `start`.
  void segment_begin_locked(Clock::time_point start, Clock::duration layer, int layers);
  /// Sleeps (lock held) until the segment ends, training cuts it at a layer boundary, or
  /// `stop` holds; then closes it and returns how many of its layers ran and when the last
  /// of them ended. `stop` cuts at the last boundary passed.
  std::pair<int, Clock::time_point> segment_wait_locked(std::unique_lock<std::mutex>& lock,
                                                        const std::function<bool()>& stop);
  /// Waits (lock held) for an event, or until training's expected return passes while it
  /// is idle, when layers may run again.
  void wait_locked(std::unique_lock<std::mutex>& lock) {
    if (idle_ && resume_ != Clock::time_point::max() && Clock::now() < resume_)
      cv_.wait_until(lock, resume_);
    else
      cv_.wait(lock);
  }
  /// How long training has waited in total for prefill layers to end (the interference).
  std::int64_t training_waited_ns() {
    std::lock_guard lock(mutex_);
    return waited_ns_;
  }
  /// Of that, the waits of idle times that ran past their expected end, where layers had
  /// started again (`resume_`); the rest came back earlier than expected.
  std::int64_t training_waited_after_resume_ns() {
    std::lock_guard lock(mutex_);
    return waited_after_resume_ns_;
  }
  /// Wakes every waiter (abort, new work).
  void notify() { cv_.notify_all(); }

 private:
  /// Of the modeled segment in progress, the layers begun by `t` (the one running at `t`
  /// included): its next boundary is that many layers from its start.
  Clock::rep layers_begun_locked(Clock::time_point t) const;

  std::mutex mutex_;
  std::condition_variable cv_;
  bool idle_ = false;
  Clock::time_point until_ = Clock::time_point::max();
  Clock::time_point resume_ = Clock::time_point::max();  // layers run again from then (until_ + grace)
  std::uint64_t epoch_ = 0;
  bool layer_running_ = false;
  // The modeled segment in progress (segment_layers_ > 0), and where training cut it.
  Clock::time_point segment_start_{};
  Clock::duration segment_layer_{};
  int segment_layers_ = 0;
  std::optional<Clock::time_point> cut_;
  std::int64_t waited_ns_ = 0;
  std::int64_t waited_after_resume_ns_ = 0;
};

/// One placed prefill, as the controller's `prefill` message gives it.
struct PrefillJob {
  int id = 0;
  std::int64_t start_ns = 0;  // reserved start, on the run's clock
  int tokens = 0;
  int layers = 0;
  double flops_per_layer = 0;
  double lm_head_flops = 0;
  program::StageShape layer;  // one layer of the inference model over the prompt (cuda)
  std::uint64_t kv_bytes = 0; // on the wire (scaled)
  std::string decode_address;
  std::uint16_t decode_port = 0;
};

struct PrefillOutcome {
  int id = 0;
  std::int64_t started_ns = 0;
  std::int64_t finished_ns = 0;
  int preemptions = 0;
  bool complete = false;  // false: the run ended first
  std::vector<program::Span> spans;  // the GPU time it used, one span per uninterrupted run
};

class PrefillRunner {
 public:
  using Done = std::function<void(const PrefillJob&, const PrefillOutcome&)>;
  /// `cuda_device` >= 0: layers run as real GEMMs on that device; else modeled at
  /// `effective_flops`.
  PrefillRunner(GpuShare& share, double effective_flops, int cuda_device, Done done);
  ~PrefillRunner();
  void start(Clock::time_point run_start);
  void add(PrefillJob job);
  /// The job's prompt has fully arrived on this node.
  void prompt_arrived(int id);
  /// Ends the thread after the layer in progress; jobs not done are reported incomplete.
  void stop();

 private:
  void loop();
  std::int64_t since_start(Clock::time_point t) const;
  void run_layer(const PrefillJob& job);  // on the GPU (cuda)
  Clock::duration layer_time(const PrefillJob& job) const;

  GpuShare& share_;
  double effective_flops_;
  int cuda_device_;
  std::unique_ptr<gpu::GpuCompute> gpu_;
  Done done_;
  Clock::time_point run_start_;
  std::multimap<std::int64_t, PrefillJob> jobs_;  // by reserved start; guarded by share_.mutex()
  std::set<int> prompts_;                         // arrived prompts; guarded likewise
  bool stopping_ = false;
  std::thread thread_;
};

/// Prompt and KV-cache transfers between nodes.
class SideChannel {
 public:
  enum class Kind : std::uint32_t { prompt = 1, kv = 2 };
  using Arrived = std::function<void(Kind kind, int id, std::uint64_t bytes)>;
  SideChannel();
  ~SideChannel();
  /// Listens on 0.0.0.0:`port`; `arrived` runs (on a reader thread) after each whole frame.
  void listen(std::uint16_t port, Arrived arrived);
  /// Queues `bytes` for `address:port` (connecting on first use); `sent` runs once written.
  void send(const std::string& address, std::uint16_t port, Kind kind, int id, std::uint64_t bytes,
            std::function<void()> sent = {});
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wanlab::agent
