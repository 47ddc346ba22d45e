#pragma once
// BubbleTea's dispatcher: places prefill requests into the predicted idle time ("bubbles")
// of training GPUs. Pure: times are ns on the run's clock (0 = the start barrier), passed
// in; no I/O.
//
// Prediction: a GPU's bubbles are the blocking waits of its last finished iteration
// (recv waits, all-reduces), shifted by whole iteration lengths onto the next `horizon`
// iterations; before any iteration has finished, an initial schedule (the plan executed on
// a virtual clock) stands in. Dedicated inference GPUs are always idle.
// Admission: a request runs for flops / the GPU's FLOP/s; it is placed where that time
// x (1 + margin) fits inside one predicted bubble, no earlier than its prompt can reach
// the GPU and finishing by its deadline, choosing the placement that finishes first (a
// GPU's outstanding work counts against it, which spreads the load). Work placed earlier whose reserved
// time has passed without it being done is still owed: it takes the GPU's next bubbles
// first. What fits nowhere waits in a queue
// (retried, oldest first, as predictions are renewed and prefills finish and free the rest
// of their reservations); a queued request whose deadline passes is expired: counted as a
// deadline miss, never silently dropped.
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "wanlab/workload/prefill.hpp"

namespace wanlab::bubbletea {

using Ns = std::int64_t;

struct Interval {
  Ns start = 0;
  Ns end = 0;
  bool operator==(const Interval&) const = default;
};

struct Gpu {
  double effective_flops = 0;
  Ns lead_ns = 0;          // from a request's arrival until its prompt can be on this GPU
  bool dedicated = false;  // an inference GPU: no training, always idle
};

struct Options {
  double margin = 0.1;          // predicted run time x (1 + margin) must fit
  Ns min_bubble_ns = 1'000'000; // shorter idle spans are not worth predicting
  int horizon = 2;              // iterations ahead a learned pattern is projected
};

struct Request {
  int id = 0;
  Ns arrived_ns = 0;
  int tokens = 0;
  double flops = 0;
  Ns deadline_ns = 0;  // absolute: arrival + the deadline
};

struct Placement {
  int request = 0;
  int gpu = 0;
  Ns start_ns = 0;  // reserved from
  Ns end_ns = 0;    // to (run time x (1 + margin))
  bool operator==(const Placement&) const = default;
};

/// From a request's arrival until its prompt can be on a GPU: the control round trip (the
/// load generator asks, the dispatcher answers), plus the one-way WAN delay to another DC.
inline constexpr Ns kControlLeadNs = 2'000'000;

/// The dispatcher's GPUs for a resolved prefill load, in PrefillPlan::gpus order.
std::vector<Gpu> dispatcher_gpus(const workload::PrefillPlan& plan, const core::Topology& topo);

class Dispatcher {
 public:
  Dispatcher(std::vector<Gpu> gpus, Options options);

  /// Replaces a GPU's predicted bubbles (absolute times).
  void predict(int gpu, std::vector<Interval> bubbles);
  /// A GPU finished an iteration that ran [start, end) and was idle in `idle` (absolute):
  /// predicts the next `horizon` iterations from it.
  void learn(int gpu, Ns start, Ns end, const std::vector<Interval>& idle);

  /// A new request at `now`: its placement, or none (queued).
  std::optional<Placement> request(const Request& r, Ns now);
  /// Retries the queue, oldest first, at most `attempts` requests (after predictions
  /// changed or a prefill freed its reservation), and expires what passed its deadline.
  std::vector<Placement> retry(Ns now, std::size_t attempts = 256);

  /// What an agent reported about a placed request.
  void started(int request, Ns at);
  void finished(int request, Ns at, int preemptions);
  void kv_delivered(int request, Ns at);

  /// The GPU's free predicted time after reservations, from `from` on (for tests and plots).
  std::vector<Interval> free_bubbles(int gpu, Ns from) const;
  const std::vector<Interval>& reservations(int gpu) const { return gpus_.at(static_cast<std::size_t>(gpu)).reserved; }
  std::size_t queued() const { return queue_.size(); }

  /// summary.json's `prefill` part for the run so far; times measured within [from, to).
  nlohmann::json summary(Ns from, Ns to) const;

 private:
  struct GpuState {
    Gpu gpu;
    std::vector<Interval> predicted;  // sorted, disjoint
    std::vector<Interval> reserved;   // sorted by start
    std::map<int, Interval> pending;  // placed, not reported done: request -> its reservation
  };
  // What place() reads of every GPU before it looks at one closely, side by side (one
  // cache line per two GPUs): with thousands of GPUs most are passed over on these alone.
  struct Bound {
    double effective_flops = 0;
    Ns lead_ns = 0;
    Ns outstanding = 0;  // the GPU's pending reservations' time together
    Ns free_from = 0;    // no free predicted time before this
  };
  struct Record {
    Request request;
    std::optional<Placement> placement;
    std::optional<Ns> started, finished, kv;
    int preemptions = 0;
    bool expired = false;
  };
  std::optional<Placement> place(const Request& r, Ns now);
  template <class F>
  static void for_each_free(const GpuState& g, Ns from, F&& f);
  void prune(GpuState& g, Ns now);

  std::vector<GpuState> gpus_;
  std::vector<Bound> bounds_;  // per GPU, as gpus_
  Options options_;
  std::deque<int> queue_;          // request ids, in arrival order
  std::map<int, Record> records_;  // by request id
};

}  // namespace wanlab::bubbletea
