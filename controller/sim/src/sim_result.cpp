// What simulate() returns, read per worker; the burst models' names; subsets of large runs.
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "wanlab/core/fabric_cost.hpp"
#include "wanlab/sim/simulator.hpp"
#include "wanlab/sim/windows_csv.hpp"
#include "wanlab/workload/wan_transfer.hpp"

namespace wanlab::sim {

std::string to_string(SimOptions::Bursts b) {
  switch (b) {
    case SimOptions::Bursts::shared: return "shared";
    case SimOptions::Bursts::fifo: return "fifo";
    case SimOptions::Bursts::paced: return "paced";
  }
  return "shared";
}

std::optional<SimOptions::Bursts> parse_bursts(std::string_view name) {
  for (const auto b : {SimOptions::Bursts::shared, SimOptions::Bursts::fifo, SimOptions::Bursts::paced})
    if (to_string(b) == name) return b;
  return std::nullopt;
}

program::WorkerReport SimResult::report(int worker) const {
  if (worker < 0 || tp < 1 || static_cast<std::size_t>(worker / tp) >= groups.size())
    throw std::out_of_range(fmt::format("simulated run: no worker {} ({} TP groups of {})", worker, groups.size(), tp));
  const auto& g = groups[static_cast<std::size_t>(worker / tp)];
  const int t = worker - g.worker;
  program::WorkerReport rep = g;
  rep.worker = worker;
  if (t != 0)
    for (auto& s : rep.spans)
      if (s.peer >= 0) s.peer += t;
  return rep;
}

std::vector<program::WorkerReport> SimResult::reports() const {
  std::vector<program::WorkerReport> out;
  out.reserve(groups.size() * static_cast<std::size_t>(std::max(tp, 1)));
  for (std::size_t w = 0; w < groups.size() * static_cast<std::size_t>(std::max(tp, 1)); ++w)
    out.push_back(report(static_cast<int>(w)));
  return out;
}

workload::ReportRefs SimResult::by_worker() const {
  workload::ReportRefs out;
  out.reserve(groups.size() * static_cast<std::size_t>(std::max(tp, 1)));
  for (const auto& g : groups)
    for (int t = 0; t < tp; ++t) out.push_back(&g);
  return out;
}

std::int64_t SimResult::end_ns() const {
  std::int64_t end = 0;
  for (const auto& g : groups)
    for (const auto& it : g.iterations) end = std::max(end, it.end_ns);
  return end;
}

namespace {
template <class ReportOf>
PlanSubset subset_of(const workload::Plan& plan, const std::vector<int>& keep, ReportOf report_of) {
  PlanSubset out;
  out.plan.scenario = plan.scenario;
  out.plan.topology = plan.topology;
  out.plan.stages = plan.stages;
  out.plan.pipeline_message_bytes = plan.pipeline_message_bytes;
  out.plan.wan_bytes_per_iteration = plan.wan_bytes_per_iteration;
  int id = 0;
  for (const int w : keep) {
    std::optional<program::WorkerReport> rep;
    if (w >= 0 && static_cast<std::size_t>(w) < plan.workers.size()) rep = report_of(w);
    if (!rep) throw std::invalid_argument(fmt::format("subset: no worker {} in the plan or its reports", w));
    auto p = plan.workers[static_cast<std::size_t>(w)];
    p.worker = id;
    out.plan.workers.push_back(p);
    auto prog = plan.programs[static_cast<std::size_t>(w)];
    prog.worker = id;
    out.plan.programs.push_back(std::move(prog));
    out.plan.effective_flops.push_back(plan.effective_flops[static_cast<std::size_t>(w)]);
    rep->worker = id;
    out.reports.push_back(std::move(*rep));
    ++id;
  }
  return out;
}
}  // namespace

PlanSubset subset(const workload::Plan& plan, const std::vector<program::WorkerReport>& reports,
                  const std::vector<int>& keep) {
  std::vector<const program::WorkerReport*> by_worker(plan.workers.size(), nullptr);
  for (const auto& r : reports)
    if (r.worker >= 0 && static_cast<std::size_t>(r.worker) < by_worker.size()) by_worker[static_cast<std::size_t>(r.worker)] = &r;
  return subset_of(plan, keep, [&](int w) -> std::optional<program::WorkerReport> {
    if (const auto* r = by_worker[static_cast<std::size_t>(w)]) return *r;
    return std::nullopt;
  });
}

std::vector<int> per_stage_workers(const workload::Plan& plan) {
  std::vector<int> keep;
  for (const auto& w : plan.workers)
    if (w.dp_rank == 0 && w.tp_rank == 0) keep.push_back(w.worker);
  return keep;
}

PlanSubset subset(const workload::Plan& plan, const SimResult& result, const std::vector<int>& keep) {
  return subset_of(plan, keep, [&](int w) -> std::optional<program::WorkerReport> {
    if (static_cast<std::size_t>(w / std::max(result.tp, 1)) >= result.groups.size()) return std::nullopt;
    return result.report(w);
  });
}

std::string windows_csv(const core::Topology& topo, const SimResult& result) {
  return workload::windows_csv(topo, result.windows, [&](const arbiter::WindowRecord& w) {
    return w.id < result.wire.size() ? result.wire[w.id] : workload::WireTimes{};
  });
}

nlohmann::json rails_json(const core::Topology& topo, const workload::Plan& plan, const SimResult& result) {
  if (result.rails.empty()) return nullptr;
  const double run_s = static_cast<double>(result.end_ns()) / 1e9;
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : result.rails) {
    const core::RailsActivity a{r.policy, r.circuits, r.phases, static_cast<std::uint64_t>(r.reconfigurations),
                                r.reconfiguring_ns};
    auto j = core::rails_run_json(topo.dcs.at(r.dc), a, plan.scenario.iterations, run_s);
    j["held_transfers"] = r.held;
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace wanlab::sim
