#pragma once
#include <memory>

#include "wanlab/core/topology.hpp"
#include "wanlab/shaping/engine.hpp"
#include "wanlab/shaping/link_shaper.hpp"
#include "wanlab/shaping/rail_switch.hpp"

namespace wanlab::shaping {

/// The engine's parameters for a topology link: rate, delay, jitter, loss (Bernoulli) and
/// the queue limit (the topology's, or 1.5 x bandwidth-delay product in packets).
LinkModelParams model_params(const core::Topology& topo, const core::WanLink& link);

/// Packets a gated flow's closed gate holds on `link`: its queue limit in packets (a limit in
/// bytes counts full-size frames of the topology's MTU).
std::size_t gate_hold_packets(const core::Topology& topo, const core::WanLink& link);

/// WAN links shaped by the userspace engine running in this process. Same topologies and
/// `link set` as the kernel backend; delay, jitter and loss work on any kernel. Gates flows
/// (flow_gate.hpp: a flow's counters count packets as the link releases them onto the wire;
/// a gate's capacity is fixed when the flows are declared).
class UserspaceShaper final : public LinkShaper {
 public:
  /// `router` and `gateways` (per DC index) are the lab's namespaces; the router must not
  /// forward in the kernel (the lab plan for this backend turns forwarding off there).
  /// `rails`: the DCs with rails and their switches' namespaces (rail_switch.hpp), switched
  /// by a RailSwitch thread beside the engine's, under the same scheduling.
  UserspaceShaper(const core::Topology& topo, const netlink::Netns& router,
                  const std::vector<const netlink::Netns*>& gateways, std::uint64_t seed,
                  const ThreadSched& sched = default_engine_sched(), std::vector<RailFabricConfig> rails = {});
  /// A router-only lab (lab/router_only.hpp): the engine runs in `router` on `ports[k]`
  /// (toward DC k; IPv4 forwarding off there) and sends each frame straight to its
  /// destination node, at the node's hardware address from the address plan
  /// (core::node_mac; the nodes of router-only labs set it).
  /// With `learn_hosts` (swarm labs, whose nodes keep Docker's hardware addresses) the
  /// engine learns each node's hardware address from its frames instead (EnginePort::learn_hosts).
  UserspaceShaper(const core::Topology& topo, const netlink::Netns& router, const std::vector<std::string>& ports,
                  std::uint64_t seed, const ThreadSched& sched = default_engine_sched(), bool learn_hosts = false);
  ~UserspaceShaper() override;
  std::string backend() const override { return "userspace"; }
  bool applies_delay() const override { return true; }
  void apply(const core::Topology& topo, const core::WanLink& link) override;
  LinkCounters counters(const core::Topology& topo, const core::WanLink& link) override;
  bool gates_flows() const override { return true; }
  void set_flows(const core::Topology& topo, const core::WanLink& link, const std::vector<GatedFlow>& flows) override;
  void set_gate(const core::Topology& topo, const core::WanLink& link, int flow, bool open) override;
  std::vector<FlowCounters> flow_counters(const core::Topology& topo, const core::WanLink& link) override;
  std::vector<std::pair<std::string, std::uint64_t>> stats() const override;
  std::string scheduling() const override { return engine_->scheduling(); }
  bool has_rails() const override { return rails_ != nullptr; }
  void set_rail_plan(std::size_t dc, RailPlan plan) override;
  void set_rail_latency(std::size_t dc, Duration latency) override;
  void set_rail_scale(double scale) override;
  std::vector<RailSwitchStats> rail_stats() const override;

 private:
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<RailSwitch> rails_;
};

}  // namespace wanlab::shaping
