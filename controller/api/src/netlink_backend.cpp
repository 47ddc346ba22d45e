// The lab on this kernel: namespaces and links through netlink (lab::NetlinkKernel), the
// kernel (HTB + netem) or userspace shaper, a router-only lab's ports borrowed and given back.
#include <spdlog/spdlog.h>

#include "wanlab/api/lab_backend.hpp"
#include "wanlab/api/lab_controller.hpp"
#include "wanlab/lab/apply.hpp"
#include "wanlab/lab/naming.hpp"
#include "wanlab/lab/router_only.hpp"
#include "wanlab/netlink/rps.hpp"
#include "wanlab/shaping/kernel_shaper.hpp"
#include "wanlab/shaping/userspace_shaper.hpp"

namespace wanlab::api {
namespace {

class NetlinkLabBackend final : public LabBackend {
 public:
  NetlinkLabBackend(const UpOptions& options, std::string backend)
      : options_(options), backend_(std::move(backend)), engine_sched_(options.engine_sched) {}

  lab::Plan plan(const core::Topology& topo, lab::LabState& state) override {
    // A real-time engine in a namespace lab gets a CPU of its own by default (the last one
    // this process may use), and every lab veth's receive path is steered to the other CPUs,
    // so the receivers' TCP stacks do not run on the engine's thread (netlink/rps.hpp).
    std::optional<std::string> rps;
    if (backend_ == "userspace" && !options_.router_only && engine_sched_.policy != ThreadSched::Policy::deadline) {
      if (!engine_sched_.cpu && engine_sched_.realtime()) {
        const auto cpus = netlink::allowed_cpus_except(-1);
        if (cpus.size() >= 2) engine_sched_.cpu = cpus.back();
      }
      if (engine_sched_.cpu) {
        const auto others = netlink::allowed_cpus_except(*engine_sched_.cpu);
        if (!others.empty()) rps = netlink::rps_mask(others);
      }
    }
    const lab::PlanOptions plan_options{
        .backend = backend_ == "kernel" ? lab::Backend::kernel : lab::Backend::userspace,
        .netem = options_.netem,
        .tcp_congestion = options_.tcp_congestion,
        .rps_cpus = rps};
    kernel_ = std::make_unique<lab::NetlinkKernel>();
    lab::Plan plan;
    if (options_.router_only) {
      // The ports are found (and their forwarding settings read) before anything changes.
      auto& here = kernel_->socket(lab::kOwnNetns);
      state.router_ports = options_.swarm ? lab::find_swarm_router_ports(topo, here.ipv4_addresses())
                                          : lab::find_router_ports(topo, here.ipv4_addresses());
      for (const auto& port : state.router_ports) forwarding_before_.push_back(here.ipv4_forwarding(port));
      plan = options_.swarm ? lab::plan_swarm_router(topo, state.router_ports, plan_options)
                            : lab::plan_router(topo, state.router_ports, plan_options);
    } else {
      plan = lab::plan_lab(topo, plan_options);
    }
    state.namespaces = plan.namespaces;
    return plan;
  }

  void apply(const lab::Plan& plan) override { lab::apply(plan, *kernel_); }

  std::unique_ptr<shaping::LinkShaper> make_shaper(const core::Topology& topo, const lab::LabState& state) override {
    const auto& router = kernel_->netns(options_.router_only ? lab::kOwnNetns : lab::ns_router(topo.name));
    if (backend_ == "kernel")
      return std::make_unique<shaping::KernelShaper>(netlink::Socket::open_in(router), options_.netem,
                                                     state.router_ports);
    if (options_.router_only)
      return std::make_unique<shaping::UserspaceShaper>(topo, router, state.router_ports, options_.seed, engine_sched_,
                                                        options_.swarm);
    std::vector<const netlink::Netns*> gateways;
    for (const auto& dc : topo.dcs) gateways.push_back(&kernel_->netns(lab::ns_gateway(topo.name, dc.name)));
    std::vector<shaping::RailFabricConfig> rails;
    for (std::size_t k = 0; k < topo.dcs.size(); ++k) {
      const auto& dc = topo.dcs[k];
      if (dc.fabric.kind != core::Fabric::Kind::rails) continue;
      rails.push_back({.dc = k,
                       .ns = &kernel_->netns(lab::ns_rails(topo.name, dc.name)),
                       .nodes = dc.nodes,
                       .rails = dc.fabric.rails,
                       .port_rate = dc.fabric.port_rate,
                       .delay = topo.lan.delay,
                       .reconfiguration = dc.fabric.reconfiguration});
    }
    return std::make_unique<shaping::UserspaceShaper>(topo, router, gateways, options_.seed, engine_sched_,
                                                      std::move(rails));
  }

  void release(const core::Topology& topo, const lab::LabState& state) override {
    if (!kernel_) return;
    for (std::size_t k = 0; k < state.router_ports.size(); ++k) {
      const auto& port = state.router_ports[k];
      try {
        auto& here = kernel_->socket(lab::kOwnNetns);
        if (backend_ == "kernel") here.delete_root_qdisc(port);
        if (k < forwarding_before_.size()) here.set_ipv4_forwarding(port, forwarding_before_[k]);
      } catch (const std::exception& e) {
        spdlog::warn("lab {}: port {} not released: {}", topo.name, port, e.what());
      }
    }
    forwarding_before_.clear();
    kernel_->release();
  }

  lab::TeardownReport teardown(const core::Topology& topo, const lab::LabState& state) override {
    return lab::teardown(topo.name, state.namespaces);
  }

 private:
  UpOptions options_;
  std::string backend_;
  ThreadSched engine_sched_;
  std::unique_ptr<lab::NetlinkKernel> kernel_;
  std::vector<bool> forwarding_before_;  // router-only: each port's IPv4 forwarding before the lab
};

}  // namespace

std::unique_ptr<LabBackend> netlink_backend(const UpOptions& options, const std::string& backend) {
  return std::make_unique<NetlinkLabBackend>(options, backend);
}

}  // namespace wanlab::api
