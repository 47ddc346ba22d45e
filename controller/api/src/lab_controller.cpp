#include "wanlab/api/lab_controller.hpp"

#include <unistd.h>

#include <ctime>
#include <tuple>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "wanlab/common/printable.hpp"
#include "wanlab/common/text.hpp"
#include "wanlab/core/address_plan.hpp"
#include "wanlab/lab/naming.hpp"
#include "wanlab/lab/wan_tc.hpp"
#include "wanlab/replay/mahimahi.hpp"

namespace wanlab::api {
namespace {

double ms(Duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// The parameters a step sets, for messages: "rate, delay".
std::string fields_of(const replay::Step& s) {
  std::vector<std::string> f;
  if (s.rate) f.emplace_back("rate");
  if (s.delay) f.emplace_back("delay");
  if (s.jitter) f.emplace_back("jitter");
  if (s.loss) f.emplace_back("loss");
  return fmt::format("{}", fmt::join(f, ", "));
}

}  // namespace

std::string resolve_backend(const std::string& requested, bool netem, bool rails) {
  if (requested == "auto") return netem && !rails ? "kernel" : "userspace";
  if (requested == "kernel" || requested == "userspace") return requested;
  throw std::invalid_argument(fmt::format("unknown backend '{}': use auto, kernel or userspace", requested));
}

LabController::LabController(core::Topology topo, const UpOptions& options, std::function<void()> on_shutdown)
    : LabController(std::move(topo), options, nullptr, std::move(on_shutdown)) {}

LabController::LabController(core::Topology topo, const UpOptions& options, std::unique_ptr<LabBackend> lab_backend,
                             std::function<void()> on_shutdown)
    : topo_(std::move(topo)), on_shutdown_(std::move(on_shutdown)), replay_priority_(options.replay_priority) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto backend = resolve_backend(options.backend, options.netem, core::has_rails(topo_));
  lab_ = lab_backend ? std::move(lab_backend) : netlink_backend(options, backend);
  const lab::Plan plan = lab_->plan(topo_, state_);
  op_count_ = plan.ops.size();
  state_.lab = topo_.name;
  state_.topology_file = topo_.source_file;
  state_.topology = core::to_json(topo_);
  state_.backend = backend;
  state_.netem = backend == "userspace" || options.netem;
  state_.namespaces = plan.namespaces;
  state_.controller_pid = static_cast<int>(::getpid());
  state_.started_at = utc_timestamp();
  // The state names every namespace before the first one exists: whatever happens next
  // (even SIGKILL), `down` knows what to remove.
  lab::write_state(state_);
  try {
    lab_->apply(plan);
    const auto t_applied = std::chrono::steady_clock::now();
    spdlog::debug("lab {}: {} kernel operations applied in {:.1f} ms", topo_.name, plan.ops.size(),
                  std::chrono::duration<double, std::milli>(t_applied - t0).count());
    shaper_ = lab_->make_shaper(topo_, state_);
    // Every trace checked before the first replay starts (and changes the topology).
    std::vector<std::tuple<LinkKey, replay::Trace, std::string>> traces;
    for (const auto& l : topo_.links) {
      if (!l.trace) continue;
      const LinkKey k{l.src, l.dst};
      auto trace = replay::load_trace(*l.trace);
      replay::check_against(trace, l.params, link_name(k));
      traces.emplace_back(k, std::move(trace), l.trace->string());
    }
    for (auto& [k, trace, path] : traces) launch_replay(k, std::move(trace), path, "csv");
  } catch (...) {
    stop_all_replays();
    shaper_.reset();
    lab_->release(topo_, state_);
    lab_->teardown(topo_, state_);
    lab::remove_lab_dir(topo_.name);
    torn_down_ = true;
    throw;
  }
  bring_up_time_ = std::chrono::steady_clock::now() - t0;
  spdlog::debug("lab {}: {} backend ready after {:.1f} ms", topo_.name, backend,
                std::chrono::duration<double, std::milli>(bring_up_time_).count());
}

LabController::~LabController() { stop_all_replays(); }

lab::TeardownReport LabController::teardown() {
  stop_all_replays();
  std::lock_guard lock(mutex_);
  if (torn_down_) return {};
  shaper_.reset();  // stops the userspace engine before its interfaces go
  lab_->release(topo_, state_);
  auto report = lab_->teardown(topo_, state_);
  torn_down_ = true;
  return report;
}

nlohmann::json LabController::shutdown() {
  const auto report = teardown();
  if (on_shutdown_) on_shutdown_();
  return {{"lab", topo_.name}, {"removed_namespaces", report.removed.size()},
          {"killed_processes", report.killed_processes}};
}

LabController::LinkKey LabController::link_key(const std::string& src, const std::string& dst) const {
  const auto s = topo_.dc_index(src);
  const auto d = topo_.dc_index(dst);
  // The names come from the request's path: quoted escaped (printable.hpp).
  if (!s)
    throw ApiError(404, "unknown_dc", fmt::format("no DC named '{}' in lab {}", printable(src, 80), topo_.name), "src");
  if (!d)
    throw ApiError(404, "unknown_dc", fmt::format("no DC named '{}' in lab {}", printable(dst, 80), topo_.name), "dst");
  if (!topo_.find_link(*s, *d))
    throw ApiError(404, "unknown_link", fmt::format("lab {} has no WAN link {}->{}", topo_.name, src, dst));
  return {*s, *d};
}

std::string LabController::link_name(const LinkKey& k) const {
  return fmt::format("{}->{}", topo_.dcs[k.first].name, topo_.dcs[k.second].name);
}

void LabController::change_link_locked(core::WanLink& link, const core::LinkParams& params) {
  // The reverse link's default queue limit depends on this link's delay (it is sized to
  // the round trip), so it may change too.
  auto* reverse = topo_.find_link(link.dst, link.src);
  const auto reverse_limit_before = reverse ? lab::queue_limit_packets(topo_, *reverse) : 0;
  const auto old = link.params;
  link.params = params;
  try {
    shaper_->apply(topo_, in_force(link));
    if (reverse && lab::queue_limit_packets(topo_, *reverse) != reverse_limit_before)
      shaper_->apply(topo_, in_force(*reverse));
  } catch (const std::exception& e) {
    link.params = old;
    throw ApiError(500, "kernel", e.what());
  }
}

nlohmann::json LabController::set_link(const std::string& src, const std::string& dst, const LinkChange& change) {
  LinkKey k;
  nlohmann::json out;
  {
    std::lock_guard lock(mutex_);
    k = link_key(src, dst);
    auto* link = topo_.find_link(k.first, k.second);
    core::LinkParams p = link->params;
    if (change.delay) p.delay = *change.delay;
    if (change.jitter) p.jitter = *change.jitter;
    if (change.loss) p.loss = *change.loss;
    if (change.loss_burst) p.loss_burst = *change.loss_burst;
    if (change.rate) p.rate = *change.rate;
    if (change.queue) p.queue = *change.queue;
    if (p.jitter > p.delay)
      throw ApiError(400, "bad_request",
                     fmt::format("jitter {} exceeds the delay {}: it would need negative delays", to_string(p.jitter),
                                 to_string(p.delay)),
                     "jitter");
    if (torn_down_) throw ApiError(409, "torn_down", fmt::format("lab {} is being torn down", topo_.name));
    const auto* reverse = topo_.find_link(link->dst, link->src);
    const auto reverse_before = reverse ? lab::queue_limit_packets(topo_, *reverse) : 0;
    change_link_locked(*link, p);
    out = link_json(topo_, *link);
    // The reverse link's automatic queue limit is sized to the round trip, which this change may move.
    if (reverse && lab::queue_limit_packets(topo_, *reverse) != reverse_before)
      out["note"] = fmt::format("the automatic queue limit of the reverse link {}->{} changed too: {}p -> {}p (it is "
                                "sized to the round trip; set its --queue to keep it fixed)",
                                dst, src, reverse_before, lab::queue_limit_packets(topo_, *reverse));
  }
  // Written by the daemon's next flush (persist_if_dirty), not here: rewriting the state
  // file costs more than the netlink change itself.
  state_dirty_ = true;
  if (spdlog::should_log(spdlog::level::info)) spdlog::info("link {}->{} set: {}", src, dst, out.dump());
  std::lock_guard rl(replays_mutex_);
  if (auto it = replays_.find(k); it != replays_.end()) {
    const auto progress = it->second.thread->progress();
    const auto& path = it->second.trace_path;
    std::string replay_note;
    if (progress.next && progress.state == replay::ReplayState::running)
      replay_note = fmt::format(
          "link {}->{} is replaying {}: this change applies now; the replay's next step (in {:.0f} ms) sets {} again",
          src, dst, path, std::max(0.0, ms(progress.start + progress.next->at - it->second.thread->now())),
          fields_of(it->second.thread->trace().steps[progress.next->step]));
    else
      replay_note = fmt::format("link {}->{} has replayed {} to its end; this change stays", src, dst, path);
    out["note"] = out.contains("note") ? replay_note + "; " + out["note"].get<std::string>() : replay_note;
  }
  return out;
}

core::WanLink LabController::in_force(const core::WanLink& link) const {
  core::WanLink l = link;
  l.params.rate.bps = static_cast<std::uint64_t>(static_cast<double>(link.params.rate.bps) * rate_scale_ + 0.5);
  if (link.params.rate.bps > 0 && l.params.rate.bps < 1000) l.params.rate.bps = 1000;  // an outage stays one
  return l;
}

void LabController::set_rate_scale(double scale) {
  if (!(scale > 0 && scale <= 1)) throw ApiError(400, "bad_request", fmt::format("rate scale {} is not in (0, 1]", scale), "scale");
  std::lock_guard lock(mutex_);
  if (torn_down_) throw ApiError(409, "torn_down", fmt::format("lab {} is being torn down", topo_.name));
  if (scale == rate_scale_) return;
  const double old = rate_scale_;
  rate_scale_ = scale;
  try {
    for (const auto& l : topo_.links) shaper_->apply(topo_, in_force(l));
  } catch (const std::exception& e) {
    rate_scale_ = old;
    for (const auto& l : topo_.links) {
      try {
        shaper_->apply(topo_, in_force(l));
      } catch (const std::exception&) {
      }
    }
    throw ApiError(500, "kernel", e.what());
  }
  spdlog::info("lab {}: WAN link rates now x{} of their configured values", topo_.name, scale);
}

std::vector<std::tuple<std::size_t, std::size_t, shaping::LinkCounters>> LabController::link_counters() {
  std::vector<std::tuple<std::size_t, std::size_t, shaping::LinkCounters>> out;
  std::lock_guard lock(mutex_);
  if (torn_down_ || !shaper_) return out;
  for (const auto& l : topo_.links) out.emplace_back(l.src, l.dst, shaper_->counters(topo_, l));
  return out;
}

void LabController::write_metrics(MetricsText& out) {
  {
    std::lock_guard lock(mutex_);
    if (torn_down_ || !shaper_) return;
    std::vector<shaping::LinkCounters> counters;
    counters.reserve(topo_.links.size());
    for (const auto& l : topo_.links) counters.push_back(shaper_->counters(topo_, l));
    write_link_metrics(out, topo_, counters, shaper_->backend(), rate_scale_);
    write_engine_metrics(out, shaper_->stats());
  }
  std::vector<nlohmann::json> list;
  {
    std::lock_guard rl(replays_mutex_);
    for (const auto& [k, r] : replays_) list.push_back(replay_json(k, r));
  }
  if (list.empty()) return;
  auto each = [&](const char* name, const char* type, const char* help, auto value) {
    out.family(name, type, help);
    for (const auto& j : list)
      out.sample({{"src", j.value("src", "")}, {"dst", j.value("dst", "")}}, value(j));
  };
  each("wanlab_replay_running", "gauge", "1 while the link's trace replay runs, 0 once it has ended or failed.",
       [](const nlohmann::json& j) { return j.value("state", "") == "running" ? 1.0 : 0.0; });
  each("wanlab_replay_position_seconds", "gauge", "Where the replay is in its trace (within the loop for loop traces).",
       [](const nlohmann::json& j) { return j.value("position_ms", 0.0) / 1e3; });
  each("wanlab_replay_step", "gauge", "The trace step last applied (1-based; 0 before the first).",
       [](const nlohmann::json& j) { return j.value("step", 0.0); });
  each("wanlab_replay_loops_total", "counter", "Times a loop trace has started over.",
       [](const nlohmann::json& j) { return j.value("loops", 0.0); });
  each("wanlab_replay_steps_applied_total", "counter", "Steps applied to the link.",
       [](const nlohmann::json& j) { return j.value("applied", 0.0); });
  each("wanlab_replay_steps_skipped_total", "counter", "Steps merged into a later one because the replay was late.",
       [](const nlohmann::json& j) { return j.value("skipped", 0.0); });
  out.family("wanlab_replay_step_lateness_seconds", "summary",
             "How late the replay applied its steps against the trace's times (quantiles over the replay so far).");
  for (const auto& j : list) {
    const auto& l = j.at("lateness_ms");
    for (const auto& [q, key] : {std::pair{"0.5", "p50"}, std::pair{"0.99", "p99"}, std::pair{"1", "max"}})
      out.sample({{"src", j.value("src", "")}, {"dst", j.value("dst", "")}, {"quantile", q}}, l.value(key, 0.0) / 1e3);
    const MetricLabels link{{"src", j.value("src", "")}, {"dst", j.value("dst", "")}};
    out.sample(link, j.value("applied", 0.0), "_count");
  }
}

std::string LabController::metrics() {
  MetricsText out;
  write_metrics(out);
  return out.take();
}

std::vector<std::pair<std::string, std::uint64_t>> LabController::backend_counters() {
  std::lock_guard lock(mutex_);
  if (torn_down_ || !shaper_) return {};
  return shaper_->stats();
}

std::string LabController::backend_scheduling() {
  std::lock_guard lock(mutex_);
  if (torn_down_ || !shaper_) return {};
  return shaper_->scheduling();
}

bool LabController::gates_flows() const {
  std::lock_guard lock(mutex_);
  return !torn_down_ && shaper_ && shaper_->gates_flows();
}

const core::WanLink& LabController::gated_link(std::size_t src, std::size_t dst) const {
  if (torn_down_ || !shaper_) throw std::runtime_error("the lab is torn down");
  const auto* link = topo_.find_link(src, dst);
  if (!link) throw std::runtime_error(fmt::format("no WAN link from DC {} to DC {}", src, dst));
  return *link;
}

void LabController::set_flows(std::size_t src, std::size_t dst, const std::vector<shaping::GatedFlow>& flows) {
  std::lock_guard lock(mutex_);
  shaper_->set_flows(topo_, in_force(gated_link(src, dst)), flows);
}

void LabController::set_gate(std::size_t src, std::size_t dst, int flow, bool open) {
  std::lock_guard lock(mutex_);
  shaper_->set_gate(topo_, in_force(gated_link(src, dst)), flow, open);
}

std::vector<shaping::FlowCounters> LabController::flow_counters(std::size_t src, std::size_t dst) {
  std::lock_guard lock(mutex_);
  return shaper_->flow_counters(topo_, in_force(gated_link(src, dst)));
}

nlohmann::json LabController::set_rails(const std::string& dc, const RailsChange& change) {
  nlohmann::json out;
  {
    std::lock_guard lock(mutex_);
    const auto k = topo_.dc_index(dc);
    if (!k) throw ApiError(404, "unknown_dc", fmt::format("lab {} has no DC '{}'", topo_.name, printable(dc, 80)), "dc");
    auto& fabric = topo_.dcs[*k].fabric;
    if (!fabric.ocs())
      throw ApiError(400, "bad_request",
                     fmt::format("DC {}'s fabric is {}: only OCS rails have a reconfiguration latency", dc,
                                 core::to_string(fabric)),
                     "reconfiguration");
    const auto latency = *change.reconfiguration;
    if (latency.count() < 0 || latency > core::kMaxReconfiguration)
      throw ApiError(400, "bad_request",
                     fmt::format("reconfiguration {}: from 0 to {}", wanlab::to_string(latency),
                                 wanlab::to_string(core::kMaxReconfiguration)),
                     "reconfiguration");
    if (torn_down_ || !shaper_) throw ApiError(409, "torn_down", fmt::format("lab {} is being torn down", topo_.name));
    shaper_->set_rail_latency(*k, latency);
    fabric.reconfiguration = latency;
    out = {{"dc", dc}, {"fabric", core::to_string(fabric)}, {"reconfiguration", wanlab::to_string(latency)}};
  }
  state_dirty_ = true;
  spdlog::info("rails of DC {} set: {}", dc, out.dump());
  return out;
}

bool LabController::has_rails() const {
  std::lock_guard lock(mutex_);
  return !torn_down_ && shaper_ && shaper_->has_rails();
}

void LabController::set_rail_plan(std::size_t dc, shaping::RailPlan plan) {
  std::lock_guard lock(mutex_);
  if (torn_down_ || !shaper_) throw std::runtime_error("the lab is torn down");
  shaper_->set_rail_plan(dc, std::move(plan));
}

void LabController::set_rail_scale(double scale) {
  std::lock_guard lock(mutex_);
  if (torn_down_ || !shaper_) return;
  shaper_->set_rail_scale(scale);
}

std::vector<shaping::RailSwitchStats> LabController::rail_stats() {
  std::lock_guard lock(mutex_);
  if (torn_down_ || !shaper_) return {};
  return shaper_->rail_stats();
}

void LabController::apply_replay_step(const LinkKey& k, const replay::Step& step) {
  std::lock_guard lock(mutex_);
  if (torn_down_ || !shaper_) throw std::runtime_error("the lab is torn down");
  auto* link = topo_.find_link(k.first, k.second);
  const auto p = replay::apply_step(link->params, step);
  // Checked against the trace at start; a `link set` since may have broken it.
  if (p.jitter > p.delay)
    throw std::runtime_error(fmt::format("step at line {}: jitter {} would exceed delay {}; step not applied",
                                         step.line, to_string(p.jitter), to_string(p.delay)));
  change_link_locked(*link, p);
}

void LabController::persist_if_dirty() {
  if (state_dirty_.exchange(false)) persist_state();
}

void LabController::record_run(std::optional<lab::RunRecord> run) {
  {
    std::lock_guard lock(mutex_);
    if (run && run->alive_at.empty()) run->alive_at = utc_timestamp();
    state_.run = std::move(run);
  }
  persist_state();
}

void LabController::note_run_progress(int iterations_done, const std::string& phase) {
  std::lock_guard lock(mutex_);
  if (!state_.run) return;
  state_.run->iterations_done = iterations_done;
  state_.run->phase = phase;
  state_.run->alive_at = utc_timestamp();
  state_dirty_ = true;
}

void LabController::persist_state() {
  // The snapshot is taken holding the file lock, so the last write carries the latest state.
  std::lock_guard file_lock(state_file_mutex_);
  lab::LabState snapshot;
  {
    std::lock_guard lock(mutex_);
    if (torn_down_) return;
    state_.topology = core::to_json(topo_);
    snapshot = state_;
  }
  lab::write_state(snapshot);
}

nlohmann::json LabController::start_replay(const ReplayRequest& r) {
  LinkKey k;
  core::LinkParams params;
  {
    std::lock_guard lock(mutex_);
    if (torn_down_) throw ApiError(409, "torn_down", fmt::format("lab {} is being torn down", topo_.name));
    k = link_key(r.src, r.dst);
    params = topo_.find_link(k.first, k.second)->params;
  }
  replay::Trace trace;
  try {
    if (r.format == "mahimahi") {
      replay::MahimahiOptions mo;
      if (r.window) mo.window = *r.window;
      trace = replay::load_mahimahi(r.trace, mo);
    } else {
      trace = replay::load_trace(r.trace);
    }
    if (r.mode) {
      if (*r.mode == replay::EndMode::loop && !trace.end)
        throw ApiError(400, "bad_trace",
                       fmt::format("{}: cannot loop: the trace has no end (add \"#@ end=<time>\", the loop's period)",
                                   r.trace),
                       "mode");
      trace.mode = *r.mode;
    }
    replay::check_against(trace, params, link_name(k));
  } catch (const core::ConfigError& e) {
    throw ApiError(400, "bad_trace", e.what(), "trace");
  }
  return launch_replay(k, std::move(trace), r.trace, r.format);
}

nlohmann::json LabController::launch_replay(const LinkKey& k, replay::Trace trace, const std::string& path,
                                            const std::string& format) {
  // Replace (stop) a replay already on this link, joining it with no lock held.
  ActiveReplay old;
  {
    std::lock_guard rl(replays_mutex_);
    if (auto it = replays_.find(k); it != replays_.end()) {
      old = std::move(it->second);
      replays_.erase(it);
    }
  }
  old.thread.reset();
  const auto summary = replay::summarize(trace);
  const auto mode = trace.mode;
  ActiveReplay a;
  a.trace_path = path;
  a.format = format;
  a.started_at = utc_timestamp(true);
  a.thread = std::make_unique<replay::ReplayThread>(
      std::move(trace), [this, k](const replay::Step& s) { apply_replay_step(k, s); },
      [this, k] {
        spdlog::info("replay on link {} is done; the link keeps its last values", link_name(k));
        persist_state();
      },
      replay::ReplayThreadOptions{replay_priority_});
  spdlog::info("replay of {} on link {}: {} steps over {} ({})", path, link_name(k), summary.steps,
               replay::format_trace_time(summary.length), replay::to_string(mode));
  std::lock_guard rl(replays_mutex_);
  auto& slot = replays_[k];
  slot = std::move(a);
  return replay_json(k, slot);
}

nlohmann::json LabController::replays() {
  std::lock_guard rl(replays_mutex_);
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [k, r] : replays_) list.push_back(replay_json(k, r));
  return {{"replays", list}};
}

nlohmann::json LabController::stop_replays(const std::optional<std::pair<std::string, std::string>>& link) {
  std::optional<LinkKey> only;
  if (link) {
    std::lock_guard lock(mutex_);
    only = link_key(link->first, link->second);
  }
  std::map<LinkKey, ActiveReplay> stopping;
  {
    std::lock_guard rl(replays_mutex_);
    if (only) {
      auto it = replays_.find(*only);
      if (it == replays_.end())
        throw ApiError(404, "no_replay", fmt::format("no trace is replaying on link {}", link_name(*only)));
      stopping.insert(replays_.extract(it));
    } else {
      stopping.swap(replays_);
    }
  }
  nlohmann::json stopped = nlohmann::json::array();
  for (auto& [k, r] : stopping) {
    r.thread->stop();
    stopped.push_back(replay_json(k, r));
    spdlog::info("replay of {} on link {} stopped", r.trace_path, link_name(k));
  }
  if (!stopping.empty()) persist_state();
  return {{"stopped", stopped}};
}

void LabController::stop_all_replays() {
  std::map<LinkKey, ActiveReplay> stopping;
  {
    std::lock_guard rl(replays_mutex_);
    stopping.swap(replays_);
  }
  // Destroying them stops and joins their threads.
}

nlohmann::json LabController::replay_json(const LinkKey& k, const ActiveReplay& r) const {
  auto j = replay_status_json(r.thread->progress(), r.thread->trace(), r.thread->now());
  j["link"] = fmt::format("{}:{}", topo_.dcs[k.first].name, topo_.dcs[k.second].name);
  j["src"] = topo_.dcs[k.first].name;
  j["dst"] = topo_.dcs[k.second].name;
  j["trace"] = r.trace_path;
  j["format"] = r.format;
  j["started_at"] = r.started_at;
  j["scheduling"] = r.thread->scheduling();
  return j;
}

nlohmann::json replay_status_json(const replay::ReplayProgress& p, const replay::Trace& trace, Duration now) {
  const Duration elapsed = p.state == replay::ReplayState::running ? now - p.start : Duration{};
  nlohmann::json j = {{"mode", replay::to_string(trace.mode)},
                      {"state", replay::to_string(p.state)},
                      {"step", p.last ? p.last->step + 1 : 0},
                      {"steps", trace.steps.size()},
                      {"loops", p.last ? p.last->loop : 0},
                      {"length", replay::format_trace_time(trace.length())},
                      {"applied", p.applied},
                      {"skipped", p.skipped},
                      {"failed", p.failed},
                      {"lateness_ms",
                       {{"p50", ms(p.lateness.p50)}, {"p99", ms(p.lateness.p99)}, {"max", ms(p.lateness.max)}}},
                      {"apply_ms",
                       {{"p50", ms(p.apply_time.p50)}, {"p99", ms(p.apply_time.p99)}, {"max", ms(p.apply_time.max)}}},
                      {"wake_ms",
                       {{"p50", ms(p.wake_time.p50)}, {"p99", ms(p.wake_time.p99)}, {"max", ms(p.wake_time.max)}}}};
  if (p.state == replay::ReplayState::running) {
    j["elapsed_ms"] = ms(elapsed);
    j["position_ms"] = ms(trace.mode == replay::EndMode::loop && trace.end ? elapsed % *trace.end : elapsed);
  }
  if (p.next && p.state == replay::ReplayState::running)
    j["next_step_in_ms"] = std::max(0.0, ms(p.start + p.next->at - now));
  else
    j["next_step_in_ms"] = nullptr;
  if (p.last) j["line"] = trace.steps[p.last->step].line;
  if (!p.last_error.empty()) j["last_error"] = p.last_error;
  return j;
}

nlohmann::json link_json(const core::Topology& topo, const core::WanLink& link) {
  const auto& p = link.params;
  nlohmann::json j = {{"src", topo.dcs[link.src].name},
                      {"dst", topo.dcs[link.dst].name},
                      {"delay", to_string(p.delay)},
                      {"jitter", to_string(p.jitter)},
                      {"loss", to_string(p.loss)},
                      {"rate", to_string(p.rate)},
                      {"queue_limit_packets", lab::queue_limit_packets(topo, link)},
                      {"queue", p.queue ? to_string(*p.queue) : "auto (1.5 x BDP)"}};
  if (p.loss_burst) j["loss_burst"] = to_string(*p.loss_burst);
  if (link.trace) j["trace"] = link.trace->string();
  return j;
}

nlohmann::json LabController::status() {
  nlohmann::json s;
  {
    std::lock_guard lock(mutex_);
    s = lab_status(topo_, state_, shaper_.get(), true);
    s["rate_scale"] = rate_scale_;
    if (rate_scale_ != 1.0)
      for (std::size_t i = 0; i < topo_.links.size(); ++i)
        s["links"][i]["rate_in_force"] = to_string(in_force(topo_.links[i]).params.rate);
  }
  s["replays"] = replays()["replays"];
  return s;
}

nlohmann::json lab_status(const core::Topology& topo, const lab::LabState& state, shaping::LinkShaper* shaper,
                          bool controller_running) {
  // Router-only labs own no namespace: their nodes are containers, the router (and each
  // DC's gateway address) is the controller's own namespace.
  const bool router_only = !state.router_ports.empty();
  nlohmann::json dcs = nlohmann::json::array();
  for (std::size_t k = 0; k < topo.dcs.size(); ++k) {
    const auto& dc = topo.dcs[k];
    const int ik = static_cast<int>(k);
    nlohmann::json nodes = nlohmann::json::array();
    for (int i = 0; i < dc.nodes; ++i) {
      const auto name = core::node_name(dc, i);
      nlohmann::json node = {{"name", name}, {"address", core::node_address(ik, i).to_string()}};
      if (router_only) {
        node["mac"] = core::mac_text(core::node_mac(ik, i));
      } else {
        node["namespace"] = lab::ns_node(topo.name, name);
        node["interface"] = lab::if_node(dc.name, i);
      }
      nodes.push_back(std::move(node));
    }
    nlohmann::json gateway = {{"address", core::dc_gateway(ik).to_string()}};
    if (router_only)
      gateway["interface"] = state.router_ports.at(k);
    else
      gateway["namespace"] = lab::ns_gateway(topo.name, dc.name);
    dcs.push_back({{"name", dc.name},
                   {"region", dc.region},
                   {"gpu", dc.gpu},
                   {"gpus_per_node", dc.gpus_per_node},
                   {"subnet", core::dc_subnet(ik).to_string()},
                   {"gateway", gateway},
                   {"nodes", nodes}});
    // A DC on rails: its fabric (as `rails set` leaves it), the switch's namespace and the rails' subnets.
    if (dc.fabric.kind == core::Fabric::Kind::rails && !router_only) {
      nlohmann::json subnets = nlohmann::json::array();
      for (int r = 0; r < dc.fabric.rails && ik < core::kMaxRailDcs && r < core::kMaxRails; ++r)
        subnets.push_back(core::rail_subnet(ik, r).to_string());
      dcs.back()["rails"] = {{"fabric", core::to_string(dc.fabric)},
                             {"namespace", lab::ns_rails(topo.name, dc.name)},
                             {"subnets", subnets}};
    }
  }
  nlohmann::json links = nlohmann::json::array();
  for (const auto& l : topo.links) {
    auto j = link_json(topo, l);
    j["shaped_on"] = fmt::format("{}{}:{}", state.backend == "userspace" ? "engine in " : "",
                                 router_only ? std::string(lab::kOwnNetns) : lab::ns_router(topo.name),
                                 router_only ? state.router_ports.at(l.dst) : lab::if_router_to(topo.dcs[l.dst].name));
    if (shaper) {
      try {
        const auto c = shaper->counters(topo, l);
        j["counters"] = {{"packets", c.packets},       {"bytes", c.bytes},
                         {"drops", c.drops},           {"overlimits", c.overlimits},
                         {"queued_packets", c.queued_packets}, {"queued_bytes", c.queued_bytes}};
        if (state.backend == "userspace") {
          j["counters"]["packets_in"] = c.packets_in;
          j["counters"]["bytes_in"] = c.bytes_in;
          j["counters"]["dropped_queue"] = c.dropped_queue;
          j["counters"]["dropped_loss"] = c.dropped_loss;
          j["counters"]["in_flight_packets"] = c.in_flight_packets;
          j["counters"]["payload_bytes"] = c.payload_bytes;
        }
      } catch (const std::exception& e) {
        j["counters_error"] = e.what();
      }
    }
    links.push_back(std::move(j));
  }
  nlohmann::json engine = nlohmann::json::object();
  if (shaper)
    for (const auto& [k, v] : shaper->stats()) engine[k] = v;
  return {{"lab", topo.name},
          {"backend_counters", engine},
          {"topology_file", state.topology_file},
          {"backend", state.backend},
          {"delay_applied", state.netem},
          {"controller", {{"running", controller_running}, {"pid", state.controller_pid}, {"started_at", state.started_at}}},
          {"mode", router_only ? "router-only" : "namespaces"},
          {"router", router_only ? nlohmann::json{{"namespace", lab::kOwnNetns}, {"ports", state.router_ports}}
                                 : nlohmann::json{{"namespace", lab::ns_router(topo.name)}}},
          {"namespaces", state.namespaces.size()},
          {"dcs", dcs},
          {"links", links}};
}

}  // namespace wanlab::api
