#include "wanlab/workload/metrics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace wanlab::workload {
using nlohmann::json;
using program::Span;
using program::SpanKind;

namespace {

constexpr double kNsPerSecond = 1e9;

bool is_training_compute(SpanKind k) {
  return k == SpanKind::forward || k == SpanKind::backward || k == SpanKind::optimizer;
}

std::int64_t overlap(const Span& s, std::int64_t from, std::int64_t to) {
  return std::max<std::int64_t>(0, std::min(s.end_ns, to) - std::max(s.start_ns, from));
}

// Every worker has a report, with iterations enough when they are needed.
void check(const Plan& plan, const ReportRefs& refs, bool need_iterations) {
  if (refs.size() != plan.workers.size())
    throw std::invalid_argument(fmt::format("{} reports for the plan's {} workers", refs.size(), plan.workers.size()));
  for (std::size_t w = 0; w < refs.size(); ++w) {
    if (refs[w] == nullptr) throw std::invalid_argument(fmt::format("no report of worker {}", w));
    if (need_iterations && refs[w]->iterations.size() < static_cast<std::size_t>(plan.scenario.iterations))
      throw std::invalid_argument(fmt::format("worker {} reports {} of the scenario's {} iterations", w,
                                              refs[w]->iterations.size(), plan.scenario.iterations));
  }
}

ReportRefs indexed(const Plan& plan, const std::vector<program::WorkerReport>& reports) {
  ReportRefs out(plan.workers.size(), nullptr);
  for (const auto& r : reports) {
    if (r.worker < 0 || static_cast<std::size_t>(r.worker) >= out.size())
      throw std::invalid_argument(
          fmt::format("report of worker {}, which the plan ({} workers) lacks", r.worker, out.size()));
    if (out[static_cast<std::size_t>(r.worker)] != nullptr)
      throw std::invalid_argument(fmt::format("two reports of worker {}", r.worker));
    out[static_cast<std::size_t>(r.worker)] = &r;
  }
  return out;
}

double mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

std::string gpu_label(const Plan& plan, const WorkerPlacement& w) {
  return fmt::format("{} gpu{} stage{}/dp{}/tp{}", core::node_name(plan.topology.dcs.at(w.dc), w.node), w.gpu, w.stage,
                     w.dp_rank, w.tp_rank);
}

}  // namespace

double quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(q, 0.0, 1.0) * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(rank));
  const auto hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (rank - static_cast<double>(lo));
}

ReportRefs by_worker(const Plan& plan, const std::vector<program::WorkerReport>& reports) {
  auto out = indexed(plan, reports);
  check(plan, out, true);
  return out;
}

json summarize(const Plan& plan, const std::vector<program::WorkerReport>& reports) {
  return summarize(plan, by_worker(plan, reports));
}

json summarize(const Plan& plan, const ReportRefs& workers) {
  const auto& s = plan.scenario;
  check(plan, workers, true);
  const auto iterations = static_cast<std::size_t>(s.iterations);
  const auto warmup = static_cast<std::size_t>(s.warmup);

  std::vector<std::int64_t> ends(iterations, 0);
  for (const auto* r : workers)
    for (std::size_t i = 0; i < iterations; ++i) ends[i] = std::max(ends[i], r->iterations[i].end_ns);
  std::vector<double> per_iteration;
  for (std::size_t i = 0; i < iterations; ++i)
    per_iteration.push_back(static_cast<double>(ends[i] - (i == 0 ? 0 : ends[i - 1])) / kNsPerSecond);
  const std::vector<double> measured(per_iteration.begin() + static_cast<std::ptrdiff_t>(warmup), per_iteration.end());

  const std::int64_t from = warmup == 0 ? 0 : ends[warmup - 1];
  const std::int64_t to = ends.back();
  const double window = static_cast<double>(to - from);

  json per_gpu = json::array();
  std::vector<double> utilization, training_share, training_s;
  std::vector<std::vector<double>> stage_training_s(plan.stages.size());
  for (const auto& w : plan.workers) {
    std::int64_t busy = 0;
    std::int64_t training = 0;
    for (const auto& span : workers[static_cast<std::size_t>(w.worker)]->spans) {
      if (is_training_compute(span.kind)) training += overlap(span, from, to);
      if (is_training_compute(span.kind) || span.kind == SpanKind::prefill) busy += overlap(span, from, to);
    }
    const double u = window > 0 ? static_cast<double>(busy) / window : 0;
    utilization.push_back(u);
    training_share.push_back(window > 0 ? static_cast<double>(training) / window : 0);
    const double per_iter_s = static_cast<double>(training) / kNsPerSecond / static_cast<double>(measured.size());
    training_s.push_back(per_iter_s);
    stage_training_s.at(static_cast<std::size_t>(w.stage)).push_back(per_iter_s);
    per_gpu.push_back({{"worker", w.worker},
                       {"dc", plan.topology.dcs.at(w.dc).name},
                       {"node", core::node_name(plan.topology.dcs.at(w.dc), w.node)},
                       {"gpu", w.gpu},
                       {"stage", w.stage},
                       {"dp_rank", w.dp_rank},
                       {"tp_rank", w.tp_rank},
                       {"utilization", u}});
  }
  json per_stage = json::array();
  for (const auto& v : stage_training_s) per_stage.push_back(mean(v));

  json wan = json::array();
  for (const auto& l : plan.wan_bytes_per_iteration)
    wan.push_back(
        {{"src", plan.topology.dcs.at(l.src).name}, {"dst", plan.topology.dcs.at(l.dst).name}, {"bytes", l.bytes}});

  return {{"scenario", s.name},
          {"schedule", to_string(s.schedule)},
          {"workers", plan.workers.size()},
          {"scale", s.scale},
          {"iteration_time_s",
           {{"mean", mean(measured)},
            {"p50", quantile(measured, 0.5)},
            {"p99", quantile(measured, 0.99)},
            {"warmup", s.warmup},
            {"per_iteration", per_iteration}}},
          {"window_s",
           {{"start", static_cast<double>(from) / kNsPerSecond}, {"end", static_cast<double>(to) / kNsPerSecond}}},
          {"gpu_utilization", {{"mean", mean(utilization)}, {"per_gpu", std::move(per_gpu)}}},
          {"bubble_fraction", 1 - mean(training_share)},
          {"compute_time_s", {{"per_iteration", mean(training_s)}, {"per_stage_per_iteration", std::move(per_stage)}}},
          {"wan_bytes_per_iteration", std::move(wan)}};
}

json chrome_trace(const Plan& plan, const std::vector<program::WorkerReport>& reports) {
  const auto workers = indexed(plan, reports);
  check(plan, workers, false);
  const auto& topo = plan.topology;
  std::vector<int> first_pid;  // per DC: the pid of its node 0
  int pid = 1;
  for (const auto& dc : topo.dcs) {
    first_pid.push_back(pid);
    pid += dc.nodes;
  }
  json events = json::array();
  const auto metadata = [&](std::string_view what, int p, int tid, json args) {
    json e{{"ph", "M"}, {"name", what}, {"pid", p}, {"args", std::move(args)}};
    if (tid >= 0) e["tid"] = tid;
    events.push_back(std::move(e));
  };
  const auto us = [](std::int64_t ns) { return static_cast<double>(ns) / 1000.0; };

  std::vector<bool> named(static_cast<std::size_t>(pid), false);
  for (const auto& w : plan.workers) {
    const auto& dc = topo.dcs.at(w.dc);
    const int p = first_pid[w.dc] + w.node;
    if (!named[static_cast<std::size_t>(p)]) {
      named[static_cast<std::size_t>(p)] = true;
      metadata("process_name", p, -1, {{"name", core::node_name(dc, w.node)}});
      metadata("process_sort_index", p, -1, {{"sort_index", p}});
    }
    // Per GPU: tid gpu*100+1 compute, +2 blocking communication, +3... sends.
    const int base = w.gpu * 100 + 1;
    const std::string label = gpu_label(plan, w);
    const auto track = [&](int lane, const std::string& name) {
      metadata("thread_name", p, base + lane, {{"name", name}});
      metadata("thread_sort_index", p, base + lane, {{"sort_index", base + lane}});
    };
    track(0, label);
    track(1, label + " wait");

    std::vector<std::int64_t> lane_end;  // send lanes: when each is free again
    std::vector<const Span*> spans;
    for (const auto& span : workers[static_cast<std::size_t>(w.worker)]->spans) spans.push_back(&span);
    std::stable_sort(spans.begin(), spans.end(),
                     [](const Span* a, const Span* b) { return a->start_ns < b->start_ns; });
    for (const Span* span : spans) {
      int lane = 0;
      std::string name;
      const std::string mb = span->microbatch >= 0 ? fmt::format(" mb{}", span->microbatch) : "";
      switch (span->kind) {
        case SpanKind::forward:
        case SpanKind::backward:
        case SpanKind::optimizer:
        case SpanKind::prefill:
          name = program::to_string(span->kind) + mb;
          break;
        case SpanKind::recv_wait:
          lane = 1;
          name = fmt::format("wait{} from w{}", mb, span->peer);
          break;
        case SpanKind::allreduce:
          lane = 1;
          name = "allreduce";
          break;
        case SpanKind::send: {
          auto free =
              std::find_if(lane_end.begin(), lane_end.end(), [&](std::int64_t e) { return e <= span->start_ns; });
          if (free == lane_end.end()) {
            lane_end.push_back(span->end_ns);
            track(static_cast<int>(lane_end.size()) + 1,
                  lane_end.size() == 1 ? label + " send" : fmt::format("{} send {}", label, lane_end.size()));
            free = lane_end.end() - 1;
          }
          *free = span->end_ns;
          lane = static_cast<int>(free - lane_end.begin()) + 2;
          name = fmt::format("send{} to w{}", mb, span->peer);
          break;
        }
      }
      json args{{"iteration", span->iteration}, {"worker", w.worker}};
      if (span->microbatch >= 0) args["microbatch"] = span->microbatch;
      if (span->bytes != 0) args["bytes"] = span->bytes;
      if (span->peer >= 0) args["peer"] = span->peer;
      events.push_back({{"name", std::move(name)},
                        {"cat", program::to_string(span->kind)},
                        {"ph", "X"},
                        {"ts", us(span->start_ns)},
                        {"dur", us(span->end_ns - span->start_ns)},
                        {"pid", p},
                        {"tid", base + lane},
                        {"args", std::move(args)}});
    }
  }
  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"scenario", plan.scenario.name}, {"lab", topo.name}}}};
}

}  // namespace wanlab::workload
