// The variants of `wanlab bench --mode ns3`, in the ns-3 reference executor.
#include "ns3_command.hpp"

#include <chrono>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "run_support.hpp"
#include "wanlab/arbiter/arbiter.hpp"
#include "wanlab/common/version.hpp"
#include "wanlab/run/results.hpp"
#include "wanlab/workload/plan.hpp"
#ifdef WANLAB_HAVE_NS3
#include "wanlab/ns3ref/reference.hpp"
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

std::string windows_csv(const core::Topology& topo, const sim::SimResult& r) {
  const auto s = [](arbiter::Nanos t) {
    return t < 0 ? std::string{} : fmt::format("{:.6f}", static_cast<double>(t) / 1e9);
  };
  std::string csv =
      "src,dst,transfer,iteration,pipeline,src_stage,dst_stage,kind,microbatch,bytes,ready_s,planned_start_s,"
      "planned_end_s,granted_s,closed_s,wire_first_s,wire_last_s,revoked\n";
  for (const auto& w : r.windows) {
    const auto wire = w.id < r.wire.size() && !w.revoked ? r.wire[w.id] : sim::SimResult::Wire{};
    csv += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", topo.dcs.at(w.spec.link.src).name,
                       topo.dcs.at(w.spec.link.dst).name, w.id, w.spec.iteration, w.spec.pipeline, w.spec.src_stage,
                       w.spec.dst_stage, arbiter::to_string(w.spec.kind), w.spec.microbatch, w.spec.bytes, s(w.ready),
                       s(w.start), s(w.planned_end), s(w.start), s(w.end), s(wire.first), s(wire.last),
                       w.revoked ? 1 : 0);
  }
  return csv;
}

}  // namespace
#endif

json ns3_variants(const workload::Scenario& scenario, const std::string& scenario_file, const core::Topology& topo,
                  const std::vector<bench::Variant>& variants, const PlacementScenarios& dp_across,
                  json skipped, const std::vector<std::string>& policies, const std::vector<int>& connections,
                  double compute_jitter, const fs::path& out, int& rc) {
#ifndef WANLAB_HAVE_NS3
  (void)scenario, (void)scenario_file, (void)topo, (void)variants, (void)dp_across, (void)skipped, (void)policies,
      (void)connections, (void)compute_jitter, (void)out, (void)rc;
  throw std::runtime_error(*ns3_unavailable());
#else
  fs::create_directories(out);
  const auto baseline = bench::baseline_name(connections);
  json done = json::array();
  for (std::size_t i = 0; i < variants.size(); ++i) {
    const auto& v = variants[i];
    const auto tag = fmt::format("[{}/{}] {}", i + 1, variants.size(), v.name);
    const auto special = dp_across.find(v.placement);
    workload::Scenario scen = special != dp_across.end() ? special->second : scenario;
    scen.policy = v.policy;
    scen.connections = v.connections;
    const fs::path folder = out / v.name;
    std::error_code ec;
    fs::remove_all(folder, ec);
    try {
      const auto plan = workload::build_plan(scen, topo);
      if (const auto why = ns3ref::unsupported(plan)) throw std::invalid_argument(*why);
      ns3ref::Options options;
      options.compute_jitter = compute_jitter;
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
      run::RunMeta meta;
      meta.run_id = "ns3-" + v.name;
      meta.lab = topo.name;
      meta.backend = "ns3";
      meta.started_at = timestamp();
      meta.scale = scen.scale;
      meta.scenario_file = scenario_file;
      for (const auto& l : topo.links)
        meta.rate_bps.push_back(static_cast<std::uint64_t>(std::llround(static_cast<double>(l.params.rate.bps) * scen.scale)));
      auto summary = run::make_summary(plan, topo, r.by_worker(), samples, meta);
      json queues = json::array();
      for (std::size_t l = 0; l < res.queues.size(); ++l) {
        const auto& q = res.queues[l];
        queues.push_back({{"src", topo.dcs.at(topo.links[l].src).name},
                          {"dst", topo.dcs.at(topo.links[l].dst).name},
                          {"queue_packets", q.queue_packets},
                          {"queue_bytes", q.queue_bytes},
                          {"packets", q.packets},
                          {"drops", q.drops},
                          {"dropped_bytes", q.dropped_bytes}});
      }
      json tcp = json::array();
      for (const auto& t : r.tcp)
        tcp.push_back({{"src", t.src},
                       {"dst", t.dst},
                       {"connections", t.connections},
                       {"cwnd_bytes", t.cwnd_bytes},
                       {"ssthresh_bytes", std::isfinite(t.ssthresh_bytes) ? json(t.ssthresh_bytes) : json()},
                       {"srtt_ms", t.srtt_ns / 1e6}});
      summary["ns3"] = {{"wall_s", wall},
                        {"events", res.events},
                        {"connections", res.connections},
                        {"compute_jitter", compute_jitter},
                        {"tcp_window_bytes", workload::run_tcp_window(scen)},
                        {"queues", queues},
                        {"tcp", tcp}};
      fs::create_directories(folder);
      write_text_file(folder / "summary.json", summary.dump(2) + "\n");
      write_text_file(folder / "links.csv", run::links_csv(topo, samples));
      if (arbiter::make_policy(scen.policy)->exclusive()) write_text_file(folder / "windows.csv", windows_csv(topo, r));
      write_text_file(folder / "scenario.json", workload::to_json(scen).dump(2) + "\n");
      const auto num = [&](const char* pointer) { return bench::number(summary, pointer).value_or(0.0); };
      std::uint64_t drops = 0;
      for (const auto& q : res.queues) drops += q.drops;
      fmt::print("{}: iteration time {:.3f} s (p99 {:.3f} s), GPU utilization {:.1f} %, WAN utilization {:.1f} %, {} "
                 "packets dropped ({} GPUs, {} TCP connections, run in ns-3 in {:.1f} s)\n",
                 tag, num("/iteration_time_s/mean"), num("/iteration_time_s/p99"), 100 * num("/gpu_utilization/mean"),
                 100 * bench::wan_utilization(summary), drops, plan.workers.size(), res.connections, wall);
      std::fflush(stdout);
      done.push_back({{"name", v.name},
                      {"policy", v.policy},
                      {"connections", v.connections},
                      {"placement", v.placement},
                      {"folder", v.name},
                      {"summary", summary}});
    } catch (const std::exception& e) {
      fmt::print(stderr, "{}: not run in ns-3: {}\n", tag, e.what());
      skipped.push_back({{"name", v.name}, {"reason", e.what()}});
      rc = 1;
    }
  }
  const json* base = nullptr;
  for (const auto& d : done)
    if (d.at("name") == baseline) base = &d.at("summary");
  for (auto& d : done) d["ratios"] = bench::ratios(d.at("summary"), base ? *base : json::object());
  json result = {{"scenario", scenario.name},
                 {"scenario_file", scenario_file},
                 {"wanlab", build_info()},
                 {"lab", topo.name},
                 {"topology", scenario.topology_path.string()},
                 {"backend", "ns3"},
                 {"scale", scenario.scale},
                 {"gpus", scenario.parallelism.gpus()},
                 {"created_at", timestamp()},
                 {"baseline", baseline},
                 {"policies", policies},
                 {"connections", connections},
                 {"variants", done},
                 {"skipped", skipped}};
  write_text_file(out / "bench.json", result.dump(2) + "\n");
  write_text_file(out / "bench.md", bench::markdown(result));
  return result;
#endif
}

}  // namespace wanlab::cli
