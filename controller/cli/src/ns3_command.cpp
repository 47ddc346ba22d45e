// The variants of `wanlab bench --mode ns3`, in the ns-3 reference executor.
#include "ns3_command.hpp"

#include <chrono>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "bench_runner.hpp"
#include "run_support.hpp"
#include "wanlab/arbiter/arbiter.hpp"
#include "wanlab/common/version.hpp"
#include "wanlab/run/results.hpp"
#include "wanlab/workload/plan.hpp"
#ifdef WANLAB_HAVE_NS3
#include "wanlab/ns3ref/reference.hpp"
#include "wanlab/sim/simulator.hpp"
#include "wanlab/sim/windows_csv.hpp"
#include "wanlab/workload/metrics.hpp"
#endif

namespace wanlab::cli {

namespace fs = std::filesystem;
using nlohmann::json;

std::optional<std::string> ns3_unavailable() {
#ifdef WANLAB_HAVE_NS3
  return std::nullopt;
#else
  return "this build has no ns-3 reference executor: ns-3 was not found when it was configured (Debian: apt install "
         "libns3-dev, then configure again)";
#endif
}

#ifdef WANLAB_HAVE_NS3
namespace {

// The ns-3 reference as the bench runner's executor: each variant one packet-level run.
class Ns3Executor final : public BenchExecutor {
 public:
  Ns3Executor(const std::string& scenario_file, const core::Topology& topo, const workload::Scenario& scenario,
              double compute_jitter)
      : scenario_file_(scenario_file), topo_(topo), scenario_(scenario), compute_jitter_(compute_jitter) {}

  std::string failed() const override { return "not run in ns-3"; }
  bool twins() const override { return false; }  // the reference lacks prefill

  VariantOutcome run(const bench::Variant& v, const workload::Scenario& base, const fs::path& folder,
                     const std::string& tag) override {
    workload::Scenario scen = base;
    scen.policy = v.policy;
    scen.connections = v.connections;
    try {
      return finished_run(simulate(v, scen, folder, tag));
    } catch (const std::exception& e) {
      return failed_run(e.what());
    }
  }

  void describe(json& result) const override {
    result["backend"] = "ns3";
    result["gpus"] = scenario_.parallelism.gpus();
  }

 private:
  json simulate(const bench::Variant& v, const workload::Scenario& scen, const fs::path& folder,
                const std::string& tag) const {
    const auto plan = workload::build_plan(scen, topo_);
    if (const auto why = ns3ref::unsupported(plan)) throw std::invalid_argument(*why);
    ns3ref::Options options;
    options.compute_jitter = compute_jitter_;
    const auto t0 = std::chrono::steady_clock::now();
    const auto res = ns3ref::run(plan, options);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto& r = res.run;
    const std::int64_t end_ns = r.end_ns();
    std::vector<run::LinkSample> samples;
    for (std::size_t l = 0; l < r.wan.size(); ++l)
      samples.push_back({static_cast<double>(end_ns) / 1e9, r.wan[l].src, r.wan[l].dst,
                         static_cast<std::uint64_t>(std::llround(r.wan[l].wire_bytes)),
                         static_cast<std::uint64_t>(std::llround(r.wan[l].payload_bytes)), res.queues[l].drops, 0});
    const auto meta = executor_meta("ns3-" + v.name, "ns3", topo_, scen, scenario_file_);
    auto summary = run::make_summary(plan, topo_, r.by_worker(), samples, meta);
    json queues = json::array();
    for (std::size_t l = 0; l < res.queues.size(); ++l) {
      const auto& q = res.queues[l];
      queues.push_back({{"src", topo_.dcs.at(topo_.links[l].src).name},
                        {"dst", topo_.dcs.at(topo_.links[l].dst).name},
                        {"queue_packets", q.queue_packets},
                        {"queue_bytes", q.queue_bytes},
                        {"packets", q.packets},
                        {"drops", q.drops},
                        {"dropped_bytes", q.dropped_bytes}});
    }
    json tcp = json::array();
    std::uint64_t recoveries = 0, timeouts = 0;
    for (std::size_t i = 0; i < r.tcp.size(); ++i) {
      const auto& t = r.tcp[i];
      const auto& rec = res.recovery.at(i);
      recoveries += rec.recoveries;
      timeouts += rec.timeouts;
      tcp.push_back({{"src", t.src},
                     {"dst", t.dst},
                     {"connections", t.connections},
                     {"cwnd_bytes", t.cwnd_bytes},
                     {"ssthresh_bytes", std::isfinite(t.ssthresh_bytes) ? json(t.ssthresh_bytes) : json()},
                     {"srtt_ms", t.srtt_ns / 1e6},
                     {"fast_recoveries", rec.recoveries},
                     {"timeouts", rec.timeouts},
                     {"rto_ms", rec.rto_ns / 1e6}});
    }
    summary["ns3"] = {{"wall_s", wall},
                      {"events", res.events},
                      {"connections", res.connections},
                      {"compute_jitter", compute_jitter_},
                      {"tcp_window_bytes", workload::run_tcp_window(scen)},
                      {"queues", queues},
                      {"fast_recoveries", recoveries},
                      {"timeouts", timeouts},
                      {"tcp", tcp}};
    fs::create_directories(folder);
    write_text_file(folder / "summary.json", summary.dump(2) + "\n");
    write_text_file(folder / "links.csv", run::links_csv(topo_, samples));
    if (arbiter::make_policy(scen.policy)->exclusive()) write_text_file(folder / "windows.csv", sim::windows_csv(topo_, r));
    write_text_file(folder / "scenario.json", workload::to_json(scen).dump(2) + "\n");
    // As the simulator's (every GPU up to sim::kFullTimelineGpus, above one per stage), so
    // the two timelines can be laid side by side, message by message.
    if (plan.workers.size() <= sim::kFullTimelineGpus) {
      write_text_file(folder / "timeline.json", workload::chrome_trace(plan, r.reports()).dump() + "\n");
    } else {
      const auto sub = sim::subset(plan, r, sim::per_stage_workers(plan));
      write_text_file(folder / "timeline.json", workload::chrome_trace(sub.plan, sub.reports).dump() + "\n");
    }
    const auto num = [&](const char* pointer) { return bench::number(summary, pointer).value_or(0.0); };
    std::uint64_t drops = 0;
    for (const auto& q : res.queues) drops += q.drops;
    fmt::print("{}: iteration time {:.3f} s (p99 {:.3f} s), GPU utilization {:.1f} %, WAN utilization {:.1f} %, {} "
               "packets dropped, {} fast recoveries, {} timeouts ({} GPUs, {} TCP connections, run in ns-3 in {:.1f} s)\n",
               tag, num("/iteration_time_s/mean"), num("/iteration_time_s/p99"), 100 * num("/gpu_utilization/mean"),
               100 * bench::wan_utilization(summary), drops, recoveries, timeouts, plan.workers.size(), res.connections,
               wall);
    std::fflush(stdout);
    return summary;
  }

  const std::string scenario_file_;
  const core::Topology& topo_;
  const workload::Scenario& scenario_;
  const double compute_jitter_;
};

}  // namespace
#endif

json ns3_variants(BenchSetup setup, double compute_jitter, int& rc) {
#ifndef WANLAB_HAVE_NS3
  (void)setup, (void)compute_jitter, (void)rc;
  throw std::runtime_error(*ns3_unavailable());
#else
  fs::create_directories(setup.out);
  Ns3Executor executor(setup.scenario_file, *setup.topology, *setup.scenario, compute_jitter);
  int run_rc = 0;
  auto result = run_bench(executor, setup, run_rc);
  rc = rc != 0 ? rc : run_rc;
  return result;
#endif
}

}  // namespace wanlab::cli
