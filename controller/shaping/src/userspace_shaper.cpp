#include "wanlab/shaping/userspace_shaper.hpp"

#include <fmt/format.h>

#include "wanlab/core/address_plan.hpp"
#include "wanlab/lab/naming.hpp"
#include "wanlab/lab/wan_tc.hpp"

namespace wanlab::shaping {

LinkModelParams model_params(const core::Topology& topo, const core::WanLink& link) {
  const auto& p = link.params;
  LinkModelParams m;
  m.rate = p.rate;
  m.delay = p.delay;
  m.jitter = p.jitter;
  m.loss = LossModel::bernoulli(p.loss);
  if (p.loss_burst) m.loss = {p.loss_burst->p, p.loss_burst->r, p.loss, p.loss_burst->bad};
  m.queue = p.queue ? *p.queue : QueueLimit{QueueLimit::Unit::packets, core::default_queue_packets(topo, link)};
  return m;
}

std::size_t gate_hold_packets(const core::Topology& topo, const core::WanLink& link) {
  const auto q = model_params(topo, link).queue;
  if (q.unit == QueueLimit::Unit::packets) return q.value;
  const auto frame = static_cast<std::uint64_t>(topo.lan.mtu) + 14;
  return static_cast<std::size_t>((q.value + frame - 1) / frame);
}

namespace {

EngineConfig engine_config(const core::Topology& topo, std::uint64_t seed, const ThreadSched& sched) {
  EngineConfig cfg;
  cfg.seed = seed;
  cfg.sched = sched;
  // Small slots for the LAN's MTU-sized frames (jumbo ones included).
  cfg.ring.small.frame_size = topo.lan.mtu + 14 + 128 <= 2048 ? 2048 : 16384;
  for (const auto& l : topo.links) cfg.links.push_back({l.src, l.dst, model_params(topo, l)});
  return cfg;
}

}  // namespace

UserspaceShaper::UserspaceShaper(const core::Topology& topo, const netlink::Netns& router,
                                 const std::vector<const netlink::Netns*>& gateways, std::uint64_t seed,
                                 const ThreadSched& sched, std::vector<RailFabricConfig> rails) {
  EngineConfig cfg = engine_config(topo, seed, sched);
  for (std::size_t k = 0; k < topo.dcs.size(); ++k) {
    const auto& dc = topo.dcs[k];
    EnginePort port;
    port.ifname = lab::if_router_to(dc.name);
    port.router_mac = interface_mac(router, port.ifname);
    port.gateway_mac = interface_mac(*gateways.at(k), lab::if_gateway_wan(dc.name));
    cfg.ports.push_back(port);
  }
  engine_ = std::make_unique<Engine>(router, std::move(cfg));
  engine_->start();
  if (!rails.empty()) {
    rails_ = std::make_unique<RailSwitch>(std::move(rails), sched, seed);
    rails_->start();
  }
}

void UserspaceShaper::set_rail_plan(std::size_t dc, RailPlan plan) {
  if (!rails_) return LinkShaper::set_rail_plan(dc, std::move(plan));
  rails_->set_plan(dc, std::move(plan));
}

void UserspaceShaper::set_rail_latency(std::size_t dc, Duration latency) {
  if (!rails_) return LinkShaper::set_rail_latency(dc, latency);
  rails_->set_latency(dc, latency);
}

void UserspaceShaper::set_rail_scale(double scale) {
  if (rails_) rails_->set_rate_scale(scale);
}

std::vector<RailSwitchStats> UserspaceShaper::rail_stats() const {
  return rails_ ? rails_->stats() : std::vector<RailSwitchStats>{};
}

UserspaceShaper::UserspaceShaper(const core::Topology& topo, const netlink::Netns& router,
                                 const std::vector<std::string>& ports, std::uint64_t seed, const ThreadSched& sched,
                                 bool learn_hosts) {
  EngineConfig cfg = engine_config(topo, seed, sched);
  for (std::size_t k = 0; k < topo.dcs.size(); ++k) {
    EnginePort port;
    port.ifname = ports.at(k);
    port.router_mac = interface_mac(router, port.ifname);
    const int ik = static_cast<int>(k);
    if (learn_hosts) {
      port.learn_hosts = true;
      port.hosts.resize(std::size_t{1} << (32 - core::dc_subnet(ik).length));
      cfg.ports.push_back(std::move(port));
      continue;
    }
    for (int i = 0; i < topo.dcs[k].nodes; ++i) {
      const std::size_t host = core::node_address(ik, i).value - core::dc_subnet(ik).address.value;
      if (port.hosts.size() <= host) port.hosts.resize(host + 1);
      port.hosts[host] = core::node_mac(ik, i);
    }
    cfg.ports.push_back(std::move(port));
  }
  engine_ = std::make_unique<Engine>(router, std::move(cfg));
  engine_->start();
}

UserspaceShaper::~UserspaceShaper() = default;

void UserspaceShaper::apply(const core::Topology& topo, const core::WanLink& link) {
  engine_->set_link(link.src, link.dst, model_params(topo, link));
}

LinkCounters UserspaceShaper::counters(const core::Topology&, const core::WanLink& link) {
  LinkCounters c;
  if (auto m = engine_->counters(link.src, link.dst)) {
    c.packets = m->packets_out;
    c.bytes = m->bytes_out;
    c.drops = m->dropped_queue + m->dropped_loss;
    c.queued_packets = m->queued_packets;
    c.queued_bytes = m->queued_bytes;
    c.packets_in = m->packets_in;
    c.bytes_in = m->bytes_in;
    c.dropped_queue = m->dropped_queue;
    c.dropped_loss = m->dropped_loss;
    c.in_flight_packets = m->in_flight_packets;
    c.payload_bytes = m->payload_bytes_out;
  }
  return c;
}

void UserspaceShaper::set_flows(const core::Topology& topo, const core::WanLink& link,
                                const std::vector<GatedFlow>& flows) {
  engine_->set_flows(link.src, link.dst, flows, gate_hold_packets(topo, link));
}

void UserspaceShaper::set_gate(const core::Topology&, const core::WanLink& link, int flow, bool open) {
  engine_->set_gate(link.src, link.dst, flow, open);
}

std::vector<FlowCounters> UserspaceShaper::flow_counters(const core::Topology&, const core::WanLink& link) {
  return engine_->flow_counters(link.src, link.dst);
}

std::vector<std::pair<std::string, std::uint64_t>> UserspaceShaper::stats() const {
  const auto s = engine_->stats();
  std::vector<std::pair<std::string, std::uint64_t>> out{
      {"rx_frames", s.rx_frames},         {"forwarded", s.forwarded},   {"not_for_wan", s.not_for_wan},
      {"unroutable", s.unroutable},       {"truncated", s.truncated},   {"ttl_expired", s.ttl_expired},
      {"gso_frames", s.gso_frames},       {"gso_split", s.gso_split},
      {"pool_exhausted", s.pool_exhausted}, {"tx_ring_full", s.tx_ring_full},
      {"rx_ring_dropped", s.rx_ring_dropped}, {"rx_big_ring_dropped", s.rx_big_ring_dropped},
      {"sleeps", s.wakeups},
      {"releases", s.releases},           {"release_late_ns_total", s.release_late_ns_total},
      {"release_late_ns_max", s.release_late_ns_max},
      {"released_late_over_100us", s.released_late_over_100us},
      {"released_late_over_1ms", s.released_late_over_1ms},
      {"cpu_us", s.cpu_us},
      {"run_delay_ns", s.run_delay_ns},   {"cpu_steal_ns", s.cpu_steal_ns}};
  // Releases by lateness, one counter per bucket (run/results.hpp reads the percentiles).
  for (std::size_t i = 0; i < kReleaseLateBoundsNs.size(); ++i)
    out.emplace_back(i + 1 < kReleaseLateBoundsNs.size() ? fmt::format("release_late_le_{}ns", kReleaseLateBoundsNs[i])
                                                         : std::string("release_late_le_inf"),
                     s.release_late_hist[i]);
  // Flow gating, once the arbiter has used it.
  if (s.gated_flows > 0 || s.gate_dropped > 0)
    out.insert(out.end(), {{"gated_flows", s.gated_flows},
                           {"open_gates", s.open_gates},
                           {"held_packets", s.held_packets},
                           {"gate_dropped", s.gate_dropped}});
  // The rail switch, per DC with rails (its topology index in the name).
  if (rails_)
    for (const auto& r : rails_->stats()) {
      const auto k = [&](const char* what) { return fmt::format("rails_dc{}_{}", r.dc, what); };
      out.insert(out.end(), {{k("rx_frames"), r.rx_frames},
                             {k("forwarded"), r.forwarded},
                             {k("arp_replies"), r.arp_replies},
                             {k("not_for_rails"), r.not_for_rails},
                             {k("dropped_queue"), r.dropped_queue},
                             {k("rx_ring_dropped"), r.rx_ring_dropped},
                             {k("reconfigurations"), r.circuits.reconfigurations},
                             {k("held_frames"), r.circuits.held_frames},
                             {k("waiting"), r.circuits.waiting_now},
                             {k("no_circuit"), r.circuits.no_circuit}});
    }
  return out;
}

}  // namespace wanlab::shaping
