// simulate: a scenario's variants in the flow-level simulator, written as `bench` writes them.
#include "simulate_command.hpp"

#include "evidence_commands.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "bench_plots.hpp"
#include "bench_runner.hpp"
#include "wanlab/arbiter/rail_policy.hpp"
#include "wanlab/common/version.hpp"
#include "run_support.hpp"
#include "wanlab/core/diagnostics.hpp"
#include "wanlab/replay/trace.hpp"
#include "wanlab/run/results.hpp"
#include "wanlab/sim/prefill.hpp"
#include "wanlab/sim/rescale.hpp"
#include "wanlab/workload/baselines.hpp"
#include "wanlab/workload/metrics.hpp"
#include "wanlab/workload/plan.hpp"
#include "wanlab/sim/windows_csv.hpp"

namespace wanlab::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The simulated connections as the lab's agents report theirs (summary.json `tcp`).
std::vector<run::TcpSample> tcp_samples(const sim::SimResult& r) {
  using sim::kMss;
  std::vector<run::TcpSample> out;
  for (const auto& t : r.tcp) {
    run::TcpSample x;
    x.src = t.src;
    x.dst = t.dst;
    x.cwnd = static_cast<std::uint32_t>(std::llround(t.cwnd_bytes / kMss));
    if (std::isfinite(t.ssthresh_bytes)) x.ssthresh = static_cast<std::uint32_t>(std::llround(t.ssthresh_bytes / kMss));
    x.srtt_us = static_cast<std::uint32_t>(std::llround(t.srtt_ns / 1e3));
    x.mss = static_cast<std::uint32_t>(kMss);
    x.retransmits = static_cast<std::uint32_t>(std::llround(t.resent_bytes / kMss));
    out.insert(out.end(), static_cast<std::size_t>(t.connections), x);
  }
  return out;
}

std::string timeline_mode(const SimFlags& flags, std::size_t gpus) {
  if (flags.timeline != "auto") return flags.timeline;
  return gpus <= sim::kFullTimelineGpus ? "full" : "per-stage";
}

json options_json(const sim::SimOptions& o, const workload::Scenario& s, const std::string& timeline) {
  return {{"lan_rate_bps", o.lan_rate_bps ? json(*o.lan_rate_bps) : json(nullptr)},
          {"tcp_window_bytes", o.tcp_window_bytes.value_or(workload::run_tcp_window(s))},
          {"slow_start", o.slow_start},
          {"bursts", sim::to_string(o.bursts)},
          {"acks", o.acks},
          {"paced_piece_ms", static_cast<double>(o.paced_piece_ns) / 1e6},
          {"paced_stream_ms", static_cast<double>(o.paced_stream_ns) / 1e6},
          {"compute_jitter", o.compute_jitter},
          {"progress_period_ms", static_cast<double>(o.progress_period_ns) / 1e6},
          {"traces", o.traces.size()},
          {"timeline", timeline}};
}

}  // namespace

std::optional<sim::SimOptions> sensitivity_options(const sim::SimOptions& given, std::string_view knob) {
  if (given.bursts != sim::SimOptions::Bursts::paced) return std::nullopt;
  auto o = given;
  if (knob == "default") return o;
  if (knob == "step/4") {
    o.paced_piece_ns = std::max<std::int64_t>(1, o.paced_piece_ns / 4);
    o.paced_piece_ns_per_message /= 4;
    if (o.paced_stream_ns != 0) o.paced_stream_ns = std::max(o.paced_stream_ns / 4, o.paced_piece_ns + 1);
    return o;
  }
  if (knob == "jitter x10") {
    // How far the head starts that the jitter gives identical replicas move the result
    // (two-dc-1b at the 1 ms step: 5 %; bench/results/2026-12-03-stock-pairs.md).
    if (!(o.compute_jitter > 0)) return std::nullopt;
    o.compute_jitter = std::min(0.5, 10 * o.compute_jitter);
    return o;
  }
  o.paced_stream_ns = 0;
  if (knob == "shared") {
    o.bursts = sim::SimOptions::Bursts::shared;
    return o;
  }
  if (knob == "fifo") {
    o.bursts = sim::SimOptions::Bursts::fifo;
    return o;
  }
  return std::nullopt;
}

sim::SimOptions parse_sim_flags(const SimFlags& f) {
  sim::SimOptions o;
  if (f.lan_rate) {
    const auto r = parse_rate(*f.lan_rate);
    if (!r) throw std::invalid_argument(fmt::format("--lan-rate {}: {}", *f.lan_rate, r.error));
    o.lan_rate_bps = static_cast<double>(r.value.bps);
  }
  if (f.tcp_window) {
    const auto b = parse_bytes(*f.tcp_window);
    if (!b) throw std::invalid_argument(fmt::format("--tcp-window {}: {}", *f.tcp_window, b.error));
    o.tcp_window_bytes = static_cast<double>(b.value.value);
  }
  if (f.slow_start && o.tcp_window_bytes && *o.tcp_window_bytes <= 0)
    throw std::invalid_argument("--slow-start needs a TCP window (--tcp-window 0 turns the window off)");
  o.slow_start = f.slow_start;
  const auto bursts = sim::parse_bursts(f.bursts);
  if (!bursts) throw std::invalid_argument(fmt::format("--bursts {}: give paced, shared or fifo", f.bursts));
  o.bursts = *bursts;
  o.acks = !f.no_acks;
  if (f.paced_piece) {
    const auto d = parse_duration(*f.paced_piece);
    if (!d) throw std::invalid_argument(fmt::format("--paced-piece {}: {}", *f.paced_piece, d.error));
    if (d.value.count() < 10'000 || d.value.count() > 100'000'000)
      throw std::invalid_argument(fmt::format("--paced-piece {}: give a step from 10us to 100ms", *f.paced_piece));
    if (o.bursts != sim::SimOptions::Bursts::paced)
      throw std::invalid_argument(fmt::format("--paced-piece {}: only with --bursts paced", *f.paced_piece));
    o.paced_piece_ns = d.value.count();
    // Long pieces (many messages entering a link at once) in proportion: with the default
    // 100 us per message, a finer step switched busy links to long pieces of 1 ms and more
    // (10 messages at 0.25 ms steps), so a finer --paced-piece was a coarser model there
    // (bench/results/2026-11-27-sim-robust.md, "--paced-piece was not a finer step").
    const sim::SimOptions defaults;
    o.paced_piece_ns_per_message = defaults.paced_piece_ns_per_message * o.paced_piece_ns / defaults.paced_piece_ns;
  }
  if (f.paced_stream) {
    const auto d = parse_duration(*f.paced_stream);
    if (!d) throw std::invalid_argument(fmt::format("--paced-stream {}: {}", *f.paced_stream, d.error));
    o.paced_stream_ns = d.value.count();
    if (o.paced_stream_ns != 0 && o.paced_stream_ns <= o.paced_piece_ns)
      throw std::invalid_argument(fmt::format("--paced-stream {}: give more than a plain piece ({} ms), or 0",
                                              *f.paced_stream, static_cast<double>(o.paced_piece_ns) / 1e6));
    if (o.paced_stream_ns != 0 && o.bursts != sim::SimOptions::Bursts::paced)
      throw std::invalid_argument(fmt::format("--paced-stream {}: only with --bursts paced", *f.paced_stream));
  }
  if (!(f.compute_jitter >= 0 && f.compute_jitter <= 0.5))
    throw std::invalid_argument(fmt::format("--compute-jitter {}: give a fraction from 0 to 0.5", f.compute_jitter));
  o.compute_jitter = f.compute_jitter;
  if (f.timeline != "auto" && f.timeline != "full" && f.timeline != "per-stage" && f.timeline != "none")
    throw std::invalid_argument(fmt::format("--timeline {}: give auto, full, per-stage or none", f.timeline));
  return o;
}

std::vector<sim::LinkTrace> load_link_traces(const core::Topology& topo) {
  std::vector<sim::LinkTrace> out;
  for (std::size_t i = 0; i < topo.links.size(); ++i) {
    const auto& l = topo.links[i];
    if (!l.trace) continue;
    const auto trace = replay::load_trace(*l.trace);
    sim::LinkTrace t;
    t.link = i;
    for (const auto& s : trace.steps)
      if (s.rate) t.steps.push_back({s.at.count(), static_cast<double>(s.rate->bps)});
    if (trace.mode == replay::EndMode::loop) t.loop_ns = trace.length().count();
    if (!t.steps.empty()) out.push_back(std::move(t));
  }
  return out;
}

namespace {

// The simulator as the bench runner's executor: each variant one simulation (with a prefill
// load, the feedback rounds of sim::simulate_with_prefill), then, under the paced model,
// the sensitivity runs of the same plan under the other knobs.
class SimExecutor final : public BenchExecutor {
 public:
  SimExecutor(const workload::Scenario& scenario, const std::string& scenario_file, const core::Topology& topo,
              const SimFlags& flags)
      : scenario_(scenario), scenario_file_(scenario_file), topo_(topo), flags_(flags), options_(parse_sim_flags(flags)) {
    options_.traces = load_link_traces(topo);
    // Sensitivity runs: each variant again under the other knobs (training only).
    sensitivity_ = !flags.no_sensitivity && options_.bursts == sim::SimOptions::Bursts::paced;
  }

  std::string failed() const override { return "not simulated"; }

  VariantOutcome run(const bench::Variant& v, const workload::Scenario& base, const fs::path& folder,
                     const std::string& tag) override {
    workload::Scenario scen = base;
    scen.policy = v.policy;
    scen.connections = v.connections;
    try {
      return simulate(v, scen, folder, tag);
    } catch (const std::exception& e) {
      return failed_run(e.what());
    }
  }

  void describe(json& result) const override {
    result["backend"] = "simulate";
    result["gpus"] = scenario_.parallelism.gpus();
    result["simulation"] =
        options_json(options_, scenario_, timeline_mode(flags_, static_cast<std::size_t>(scenario_.parallelism.gpus())));
    result["sensitivity"] =
        sensitivity_ ? json{{"knobs", std::vector<std::string>(std::begin(bench::kSensitivityKnobs),
                                                               std::end(bench::kSensitivityKnobs))},
                            {"default_wall_s", default_wall_},
                            {"extra_wall_s", extra_wall_}}
                     : json(nullptr);
  }

  void finish(const fs::path& out, const json& result, int rc) override {
    (void)rc;
    // A plot that cannot be drawn is a warning: the variants ran and their results are written.
    if (all_full_ && !result.at("variants").empty() && !make_bench_plots(out))
      fmt::print(stderr, "warning: plots not drawn (above); the variants' results stand (wanlab bench --plots-only {} "
                         "draws them again)\n",
                 out.string());
  }

 private:
  VariantOutcome simulate(const bench::Variant& v, const workload::Scenario& scen, const fs::path& folder,
                          const std::string& tag) {
    const auto plan = workload::build_plan(scen, topo_);
    const auto t0 = std::chrono::steady_clock::now();
    // BubbleTea: the prefill load placed into the simulated run's bubbles, what it makes
    // training wait fed back into the timeline (sim/prefill.hpp). Prefill runs on each GPU
    // of its own, so then every worker needs its own report; otherwise the TP ranks of a
    // group share their group's (sim::SimResult::groups).
    std::optional<json> prefill;
    std::vector<program::WorkerReport> own;
    sim::SimResult r;
    if (scen.prefill) {
      auto fed = sim::simulate_with_prefill(plan, options_, flags_.feedback_rounds);
      r = std::move(fed.result);
      own = std::move(fed.reports);
      prefill = std::move(fed.prefill);
    } else {
      r = sim::simulate(plan, options_);
    }
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    default_wall_ += wall;
    json knobs = sensitivity(plan, r);
    const auto reports = scen.prefill ? workload::by_worker(plan, own) : r.by_worker();
    const std::int64_t end_ns = r.end_ns();
    std::vector<run::LinkSample> samples;
    for (const auto& l : r.wan)
      samples.push_back({static_cast<double>(end_ns) / 1e9, l.src, l.dst, static_cast<std::uint64_t>(std::llround(l.wire_bytes)),
                         static_cast<std::uint64_t>(std::llround(l.payload_bytes)), 0, 0});
    const auto meta = executor_meta("sim-" + v.name, "simulate", topo_, scen, scenario_file_);
    auto summary = run::make_summary(plan, topo_, reports, samples, meta);
    if (prefill) summary["prefill"] = std::move(*prefill);
    const auto timeline = timeline_mode(flags_, plan.workers.size());
    all_full_ = all_full_ && timeline == "full";
    if (!r.tcp.empty()) summary["tcp"] = run::tcp_summary(plan, tcp_samples(r));
    if (!r.rails.empty()) summary["rails"] = sim::rails_json(topo_, plan, r);
    summary["simulation"] = options_json(options_, scen, timeline);
    summary["simulation"]["wall_s"] = wall;
    summary["simulation"]["stats"] = {{"events", r.stats.events},
                                      {"flows", r.stats.flows},
                                      {"transfers", r.stats.transfers},
                                      {"fillings", r.stats.fillings},
                                      {"bundles_filled", r.stats.bundles_filled},
                                      {"overflows", r.stats.overflows},
                                      {"overflow_bytes", r.stats.overflow_bytes},
                                      {"simulated_workers", r.stats.simulated_workers}};
    write_folder(folder, v, plan, scen, r, own, summary, samples, timeline);
    const auto num = [&](const char* pointer) { return bench::number(summary, pointer).value_or(0.0); };
    fmt::print(
        "{}: iteration time {:.3f} s (p99 {:.3f} s), GPU utilization {:.1f} %, bubble {:.1f} %, WAN "
        "utilization {:.1f} % ({} GPUs simulated in {:.3f} s)\n",
        tag, num("/iteration_time_s/mean"), num("/iteration_time_s/p99"), 100 * num("/gpu_utilization/mean"),
        100 * num("/bubble_fraction"), 100 * bench::wan_utilization(summary), plan.workers.size(), wall);
    std::fflush(stdout);
    auto out = finished_run(std::move(summary));
    if (sensitivity_) out.entry["sensitivity"] = std::move(knobs);
    return out;
  }

  // The model's sensitivity: the training run again under each other knob (without the
  // prefill load; the default is the run `r`).
  json sensitivity(const workload::Plan& plan, const sim::SimResult& r) {
    json knobs = json::object();
    if (!sensitivity_) return knobs;
    const auto t1 = std::chrono::steady_clock::now();
    for (const auto* knob : bench::kSensitivityKnobs) {
      if (std::string_view(knob) == "default") {
        knobs[knob] = workload::summarize(plan, r.by_worker()).at("iteration_time_s").at("mean");
        continue;
      }
      const auto o = sensitivity_options(options_, knob);
      if (!o) continue;
      const auto k = sim::simulate(plan, *o);
      knobs[knob] = workload::summarize(plan, k.by_worker()).at("iteration_time_s").at("mean");
    }
    extra_wall_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    return knobs;
  }

  void write_folder(const fs::path& folder, const bench::Variant& v, const workload::Plan& plan,
                    const workload::Scenario& scen, const sim::SimResult& r,
                    const std::vector<program::WorkerReport>& own, const json& summary,
                    const std::vector<run::LinkSample>& samples, const std::string& timeline) const {
    fs::create_directories(folder);
    write_text_file(folder / "summary.json", summary.dump(2) + "\n");
    write_text_file(folder / "links.csv", run::links_csv(topo_, samples));
    // As in the lab: windows.csv for policies with windows only.
    if (arbiter::make_policy(scen.policy)->exclusive()) write_text_file(folder / "windows.csv", sim::windows_csv(topo_, r));
    auto scen_json = workload::to_json(scen);
    if (topo_.dcs.size() != 0 && !core::same_dcs(topo_, core::load_topology(scen.topology_path))) {
      write_text_file(folder / "topology.json", core::to_json(topo_).dump(2) + "\n");
      scen_json["topology"] = fs::absolute(folder / "topology.json").string();
    }
    write_text_file(folder / "scenario.json", scen_json.dump(2) + "\n");
    {
      evidence::CardInputs card;
      card.plan = &plan;
      card.topology = &plan.topology;
      card.summary = summary;
      card.framework = "wanlab simulator";
      card.variant = v.name;
      write_run_card(folder, card);
    }
    if (timeline == "full") {
      write_text_file(folder / "timeline.json",
                      workload::chrome_trace(plan, scen.prefill ? own : r.reports()).dump() + "\n");
    } else if (timeline == "per-stage") {
      const auto sub = scen.prefill ? sim::subset(plan, own, sim::per_stage_workers(plan))
                                    : sim::subset(plan, r, sim::per_stage_workers(plan));
      write_text_file(folder / "timeline.json", workload::chrome_trace(sub.plan, sub.reports).dump() + "\n");
    }
  }

  const workload::Scenario& scenario_;
  const std::string scenario_file_;
  const core::Topology& topo_;
  const SimFlags flags_;
  sim::SimOptions options_;
  bool sensitivity_ = false;
  bool all_full_ = true;
  double default_wall_ = 0, extra_wall_ = 0;
};

}  // namespace

json simulate_variants(BenchSetup setup, const SimFlags& flags, int& rc) {
  SimExecutor executor(*setup.scenario, setup.scenario_file, *setup.topology, flags);
  fs::create_directories(setup.out);
  setup.command = "simulate";
  int run_rc = 0;
  auto result = run_bench(executor, setup, run_rc);
  rc = rc != 0 ? rc : run_rc;
  return result;
}

void apply_rails_flags(const std::optional<std::string>& policy, const std::optional<std::string>& latency,
                       workload::Scenario& scenario, core::Topology& topo) {
  if (!policy && !latency) return;
  const bool ocs = std::any_of(topo.dcs.begin(), topo.dcs.end(), [](const core::Dc& dc) { return dc.fabric.ocs(); });
  const auto flag = policy ? "--rails-policy" : "--rails-latency";
  if (!ocs)
    throw std::invalid_argument(fmt::format("{}: topology {} ({}) has no DC with OCS rails (docs/rails.md)", flag,
                                            topo.name, topo.source_file));
  if (policy) {
    const auto names = arbiter::rail_policy_names();
    if (std::find(names.begin(), names.end(), *policy) == names.end())
      throw std::invalid_argument(
          fmt::format("--rails-policy: '{}' is not a rail policy: {}", *policy, fmt::join(names, ", ")));
    workload::RailsSpec spec = scenario.rails.value_or(workload::RailsSpec{});
    if (spec.policy != *policy) spec.phases.clear();  // only phase takes phases
    spec.policy = *policy;
    scenario.rails = std::move(spec);
  }
  if (latency) {
    if (latency->starts_with("-"))
      throw std::invalid_argument(fmt::format("--rails-latency: '{}' is negative", *latency));
    const auto t = parse_duration(*latency);
    if (!t) throw std::invalid_argument(fmt::format("--rails-latency: '{}': {}", *latency, t.error));
    if (t.value > core::kMaxReconfiguration)
      throw std::invalid_argument(fmt::format("--rails-latency: {} is longer than {}: no optical circuit switch takes "
                                              "that long (MEMS: about 10 to 25 ms)",
                                              to_string(t.value), to_string(core::kMaxReconfiguration)));
    for (auto& dc : topo.dcs)
      if (dc.fabric.ocs()) dc.fabric.reconfiguration = t.value;
  }
}

int cmd_simulate(const SimulateArgs& a) {
  workload::Scenario scenario;
  core::Topology topo;
  std::vector<std::string> policies;
  std::vector<int> connections;
  PlacementScenarios dp_across;
  json skipped = json::array();
  std::vector<bench::Variant> variants;
  try {
    (void)parse_sim_flags(a.sim);
    policies = bench::parse_known_policies(a.policies.value_or("fair,atlas"));
    scenario = workload::load_scenario(a.scenario);
    topo = core::load_topology(scenario.topology_path);
    connections =
        a.connections ? bench::parse_connections(*a.connections) : bench::default_connections(scenario.connections);
    if (a.gpus) {
      try {
        auto r = sim::rescale_gpus(scenario, topo, *a.gpus);
        scenario = std::move(r.scenario);
        topo = std::move(r.topology);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(fmt::format("--gpus: {}", e.what()));
      }
    }
    apply_rails_flags(a.rails_policy, a.rails_latency, scenario, topo);
    (void)workload::build_plan(scenario, topo);
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "wanlab: simulate: {}\n", e.what());
    return 2;
  } catch (const core::ConfigError& e) {
    fmt::print(stderr, "wanlab: {}\n", e.what());
    return 2;
  }
  std::vector<std::string> baselines;
  try {
    if (a.baselines) baselines = bench::parse_baselines(*a.baselines);
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "wanlab: simulate: --baselines: {}\n", e.what());
    return 2;
  }
  variants = bench::expand_variants(policies, connections, !a.no_placement_baseline,
                                    scenario.placement.empty() ? bench::kAtlasRule : bench::kScenarioPlacement,
                                    baselines);
  dp_across = dp_across_dcs_variant(scenario, topo, variants, skipped, "simulating");
  const fs::path out =
      fs::absolute(a.out ? fs::path(*a.out) : fs::path("sim-results") / (scenario.name + "-" + timestamp()));
  if (!usable_results_folder(out)) {
    fmt::print(stderr,
               "wanlab: simulate: --out {} exists and is not an earlier bench's or simulation's folder (no "
               "bench.json); give an empty or new one\n",
               out.string());
    return 2;
  }
  std::string names;
  for (const auto& v : variants) names += (names.empty() ? "" : ", ") + v.name;
  fmt::print("simulate {}: {} GPUs, {} variant{} ({}), results in {}\n", scenario.name, scenario.parallelism.gpus(),
             variants.size(), variants.size() == 1 ? "" : "s", names, out.string());
  int rc = 0;
  try {
    const BenchSetup setup{.scenario = &scenario,
                           .scenario_file = fs::absolute(a.scenario).lexically_normal().string(),
                           .topology = &topo,
                           .variants = variants,
                           .dp_across = &dp_across,
                           .skipped = skipped,
                           .policies = policies,
                           .connections = connections,
                           .rounds = a.repeat,
                           .out = out};
    const auto result = simulate_variants(setup, a.sim, rc);
    fmt::print("\n{}\nresults: {}/bench.json, bench.md, one run folder per variant\n", bench::markdown(result),
               out.string());
  } catch (const core::ConfigError& e) {
    fmt::print(stderr, "wanlab: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "wanlab: simulate: {}\n", e.what());
    return 1;
  }
  return rc;
}

}  // namespace wanlab::cli
