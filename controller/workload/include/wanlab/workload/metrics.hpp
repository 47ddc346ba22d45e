#pragma once
// The run metrics of DESIGN.md, computed from worker reports, and the run's timeline.
//
//   iteration i ends when the last worker ends it: end_i = max over workers; its time is
//   end_i - end_{i-1}, with end_{-1} = 0 (the start barrier). mean, p50 and p99 cover the
//   iterations after the warm-up; percentiles interpolate linearly between ranks.
//   The measured window runs from the end of the last warm-up iteration (0 without
//   warm-up) to the end of the last iteration.
//   GPU utilization: compute time (forward, backward, optimizer, prefill) inside the
//   window / window length, per GPU, and its mean.
//   Bubble fraction: 1 - mean over GPUs of training compute time (forward, backward,
//   optimizer) inside the window / window length.
#include <nlohmann/json.hpp>

#include <vector>

#include "wanlab/common/program.hpp"
#include "wanlab/workload/plan.hpp"

namespace wanlab::workload {

/// Each worker's report, by worker id, without copies. The report a worker points to may be
/// another worker's that ran the same timeline (the simulator's TP ranks share their
/// group's, sim::SimResult::by_worker); only spans and iterations are read through it.
using ReportRefs = std::vector<const program::WorkerReport*>;

/// summary.json's training part. Throws std::invalid_argument when the reports do not match
/// the plan (a missing worker, two reports of one, too few iterations).
nlohmann::json summarize(const Plan& plan, const std::vector<program::WorkerReport>& reports);
nlohmann::json summarize(const Plan& plan, const ReportRefs& reports);

/// `reports` by worker id, checked against the plan as summarize() checks them.
ReportRefs by_worker(const Plan& plan, const std::vector<program::WorkerReport>& reports);

/// The linear-interpolation quantile (q in [0, 1]) of unsorted values; 0 for none.
double quantile(std::vector<double> values, double q);

/// Chrome trace-event JSON (opens in Perfetto and chrome://tracing): one process per node,
/// per GPU one track for compute, one for blocking communication (recv waits, all-reduces)
/// and as many as needed for the sends in flight, which may overlap each other.
nlohmann::json chrome_trace(const Plan& plan, const std::vector<program::WorkerReport>& reports);

}  // namespace wanlab::workload
