// The rails' power and cost (fabric_cost.hpp; figures and sources in docs/rails.md).
#include "wanlab/core/fabric_cost.hpp"

#include <algorithm>

namespace wanlab::core {

RailsBill rails_bill(const Dc& dc, const PortFigures& f) {
  RailsBill b;
  const int rails = dc.fabric.kind == Fabric::Kind::rails ? dc.fabric.rails : dc.gpus_per_node;
  const double rate = dc.fabric.port_rate.bps > 0 ? static_cast<double>(dc.fabric.port_rate.bps) : 400e9;
  const double per_400g = rate / 400e9;  // figures scale with the port rate
  const int endpoints = dc.nodes * rails;
  // Tiers of one rail's Clos: its nodes are the rail's endpoints.
  const double r = f.switch_radix;
  int tiers = 1;
  if (dc.nodes > f.switch_radix) tiers = dc.nodes <= r * r / 2 ? 2 : 3;
  const double per_endpoint = 2.0 * tiers - 1;
  b.packet.endpoints = b.ocs.endpoints = endpoints;
  b.packet.tiers = tiers;
  b.packet.switch_ports = per_endpoint * endpoints;
  b.packet.transceivers = per_endpoint * endpoints;
  b.packet.power_w = (b.packet.switch_ports * f.switch_port_w + b.packet.transceivers * f.transceiver_w) * per_400g;
  b.packet.cost_usd =
      (b.packet.switch_ports * f.switch_port_usd + b.packet.transceivers * f.transceiver_usd) * per_400g;
  b.ocs.tiers = 1;
  b.ocs.ocs_ports = endpoints;
  b.ocs.power_w = b.ocs.ocs_ports * f.ocs_port_w;  // mirrors: the same whatever the rate
  b.ocs.cost_usd = b.ocs.ocs_ports * f.ocs_port_usd;
  b.nic_transceivers = endpoints;
  b.nic_power_w = endpoints * f.transceiver_w * per_400g;
  b.nic_cost_usd = endpoints * f.transceiver_usd * per_400g;
  return b;
}

nlohmann::json rails_bill_json(const Dc& dc) {
  const auto bill = rails_bill(dc);
  const auto part = [](const FabricBill& b) {
    return nlohmann::json{{"tiers", b.tiers},          {"switch_ports", b.switch_ports}, {"transceivers", b.transceivers},
                          {"ocs_ports", b.ocs_ports}, {"power_w", b.power_w},           {"cost_usd", b.cost_usd}};
  };
  return {{"endpoints", bill.packet.endpoints},
          {"packet", part(bill.packet)},
          {"ocs", part(bill.ocs)},
          {"nic", {{"transceivers", bill.nic_transceivers}, {"power_w", bill.nic_power_w}, {"cost_usd", bill.nic_cost_usd}}},
          {"power_ratio", bill.power_ratio()},
          {"cost_ratio", bill.cost_ratio()}};
}

nlohmann::json rails_run_json(const Dc& dc, const RailsActivity& a, int iterations, double run_s) {
  const double switching_s = static_cast<double>(a.reconfiguring_ns) / 1e9;
  return {{"dc", dc.name},
          {"fabric", to_string(dc.fabric)},
          {"policy", a.policy},
          {"circuits", a.circuits},
          {"phases", a.phases},
          {"reconfigurations", a.reconfigurations},
          {"reconfigurations_per_iteration", static_cast<double>(a.reconfigurations) / std::max(iterations, 1)},
          {"reconfiguring_s", switching_s},
          {"reconfiguring_fraction", run_s > 0 ? switching_s / run_s : 0.0},
          {"bill", rails_bill_json(dc)}};
}

}  // namespace wanlab::core
