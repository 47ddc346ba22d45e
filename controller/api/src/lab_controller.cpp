#include "wanlab/api/lab_controller.hpp"

#include <unistd.h>

#include <ctime>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "wanlab/core/address_plan.hpp"
#include "wanlab/lab/apply.hpp"
#include "wanlab/lab/naming.hpp"
#include "wanlab/lab/plan.hpp"
#include "wanlab/lab/wan_tc.hpp"
#include "wanlab/shaping/kernel_shaper.hpp"
#include "wanlab/shaping/userspace_shaper.hpp"

namespace wanlab::api {
namespace {

std::string now_iso8601() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

std::string resolve_backend(const std::string& requested, bool netem) {
  if (requested == "auto") return netem ? "kernel" : "userspace";
  if (requested == "kernel" || requested == "userspace") return requested;
  throw std::invalid_argument(fmt::format("unknown backend '{}': use auto, kernel or userspace", requested));
}

LabController::LabController(core::Topology topo, const UpOptions& options, std::function<void()> on_shutdown)
    : topo_(std::move(topo)), on_shutdown_(std::move(on_shutdown)) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto backend = resolve_backend(options.backend, options.netem);
  const auto plan = lab::plan_lab(
      topo_, {.backend = backend == "kernel" ? lab::Backend::kernel : lab::Backend::userspace, .netem = options.netem});
  op_count_ = plan.ops.size();
  state_.lab = topo_.name;
  state_.topology_file = topo_.source_file;
  state_.topology = core::to_json(topo_);
  state_.backend = backend;
  state_.netem = backend == "userspace" || options.netem;
  state_.namespaces = plan.namespaces;
  state_.controller_pid = static_cast<int>(::getpid());
  state_.started_at = now_iso8601();
  // The state names every namespace before the first one exists: whatever happens next
  // (even SIGKILL), `down` knows what to remove.
  lab::write_state(state_);
  kernel_ = std::make_unique<lab::NetlinkKernel>();
  try {
    lab::apply(plan, *kernel_);
    const auto& router = kernel_->netns(lab::ns_router(topo_.name));
    if (backend == "kernel") {
      shaper_ = std::make_unique<shaping::KernelShaper>(netlink::Socket::open_in(router), options.netem);
    } else {
      std::vector<const netlink::Netns*> gateways;
      for (const auto& dc : topo_.dcs) gateways.push_back(&kernel_->netns(lab::ns_gateway(topo_.name, dc.name)));
      shaper_ = std::make_unique<shaping::UserspaceShaper>(topo_, router, gateways, options.seed);
    }
  } catch (...) {
    shaper_.reset();
    kernel_->release();
    lab::teardown(topo_.name, state_.namespaces);
    lab::remove_lab_dir(topo_.name);
    torn_down_ = true;
    throw;
  }
  bring_up_time_ = std::chrono::steady_clock::now() - t0;
}

LabController::~LabController() = default;

lab::TeardownReport LabController::teardown() {
  if (torn_down_) return {};
  shaper_.reset();  // stops the userspace engine before its interfaces go
  if (kernel_) kernel_->release();
  auto report = lab::teardown(topo_.name, state_.namespaces);
  torn_down_ = true;
  return report;
}

nlohmann::json LabController::shutdown() {
  const auto report = teardown();
  if (on_shutdown_) on_shutdown_();
  return {{"lab", topo_.name}, {"removed_namespaces", report.removed.size()},
          {"killed_processes", report.killed_processes}};
}

nlohmann::json LabController::set_link(const std::string& src, const std::string& dst, const LinkChange& change) {
  const auto s = topo_.dc_index(src);
  const auto d = topo_.dc_index(dst);
  if (!s) throw ApiError(404, "unknown_dc", fmt::format("no DC named '{}' in lab {}", src, topo_.name), "src");
  if (!d) throw ApiError(404, "unknown_dc", fmt::format("no DC named '{}' in lab {}", dst, topo_.name), "dst");
  auto* link = topo_.find_link(*s, *d);
  if (!link) throw ApiError(404, "unknown_link", fmt::format("lab {} has no WAN link {}->{}", topo_.name, src, dst));

  core::LinkParams p = link->params;
  if (change.delay) p.delay = *change.delay;
  if (change.jitter) p.jitter = *change.jitter;
  if (change.loss) p.loss = *change.loss;
  if (change.rate) p.rate = *change.rate;
  if (change.queue) p.queue = *change.queue;
  if (p.jitter > p.delay)
    throw ApiError(400, "bad_request",
                   fmt::format("jitter {} exceeds the delay {}: it would need negative delays", to_string(p.jitter),
                               to_string(p.delay)),
                   "jitter");

  // The reverse link's default queue limit depends on this link's delay (it is sized to
  // the round trip), so it may change too.
  auto* reverse = topo_.find_link(*d, *s);
  const auto reverse_limit_before = reverse ? lab::wan_link_tc(topo_, *reverse).limit_packets : 0;
  const auto old = link->params;
  link->params = p;
  try {
    shaper_->apply(topo_, *link);
    if (reverse && lab::wan_link_tc(topo_, *reverse).limit_packets != reverse_limit_before)
      shaper_->apply(topo_, *reverse);
  } catch (const std::exception& e) {
    link->params = old;
    throw ApiError(500, "kernel", e.what());
  }
  state_.topology = core::to_json(topo_);
  lab::write_state(state_);
  spdlog::info("link {}->{} set: {}", src, dst, link_json(topo_, *link).dump());
  return link_json(topo_, *link);
}

nlohmann::json link_json(const core::Topology& topo, const core::WanLink& link) {
  const auto& p = link.params;
  nlohmann::json j = {{"src", topo.dcs[link.src].name},
                      {"dst", topo.dcs[link.dst].name},
                      {"delay", to_string(p.delay)},
                      {"jitter", to_string(p.jitter)},
                      {"loss", to_string(p.loss)},
                      {"rate", to_string(p.rate)},
                      {"queue_limit_packets", lab::wan_link_tc(topo, link).limit_packets},
                      {"queue", p.queue ? to_string(*p.queue) : "auto (1.5 x BDP)"}};
  if (link.trace) j["trace"] = link.trace->string();
  return j;
}

nlohmann::json LabController::status() { return lab_status(topo_, state_, shaper_.get(), true); }

nlohmann::json lab_status(const core::Topology& topo, const lab::LabState& state, shaping::LinkShaper* shaper,
                          bool controller_running) {
  nlohmann::json dcs = nlohmann::json::array();
  for (std::size_t k = 0; k < topo.dcs.size(); ++k) {
    const auto& dc = topo.dcs[k];
    const int ik = static_cast<int>(k);
    nlohmann::json nodes = nlohmann::json::array();
    for (int i = 0; i < dc.nodes; ++i) {
      const auto name = core::node_name(dc, i);
      nodes.push_back({{"name", name},
                       {"namespace", lab::ns_node(topo.name, name)},
                       {"interface", lab::if_node(dc.name, i)},
                       {"address", core::node_address(ik, i).to_string()}});
    }
    dcs.push_back({{"name", dc.name},
                   {"region", dc.region},
                   {"gpu", dc.gpu},
                   {"gpus_per_node", dc.gpus_per_node},
                   {"subnet", core::dc_subnet(ik).to_string()},
                   {"gateway", {{"namespace", lab::ns_gateway(topo.name, dc.name)},
                                {"address", core::dc_gateway(ik).to_string()}}},
                   {"nodes", nodes}});
  }
  nlohmann::json links = nlohmann::json::array();
  for (const auto& l : topo.links) {
    auto j = link_json(topo, l);
    j["shaped_on"] = fmt::format("{}{}:{}", state.backend == "userspace" ? "engine in " : "",
                                 lab::ns_router(topo.name), lab::if_router_to(topo.dcs[l.dst].name));
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
        }
      } catch (const std::exception& e) {
        j["counters_error"] = e.what();
      }
    }
    links.push_back(std::move(j));
  }
  return {{"lab", topo.name},
          {"topology_file", state.topology_file},
          {"backend", state.backend},
          {"delay_applied", state.netem},
          {"controller", {{"running", controller_running}, {"pid", state.controller_pid}, {"started_at", state.started_at}}},
          {"router", {{"namespace", lab::ns_router(topo.name)}}},
          {"namespaces", state.namespaces.size()},
          {"dcs", dcs},
          {"links", links}};
}

}  // namespace wanlab::api
