#pragma once
// The power and cost of a DC's rails (docs/rails.md has the figures and their sources):
// electrical packet rails against OCS rails with the same ports. Pure arithmetic over the
// topology; the per-port figures are inputs, so a reader with other quotes can redo it.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wanlab/core/topology.hpp"

namespace wanlab::core {

/// Per-port figures at 400 Gbit/s (docs/rails.md, "Power and cost").
struct PortFigures {
  double switch_port_w = 11.7;  // electrical switch, per port
  double switch_port_usd = 450;
  double transceiver_w = 8.5;  // one optical transceiver (one end of a link)
  double transceiver_usd = 600;
  double ocs_port_w = 0.8;  // optical circuit switch, per port (passive mirrors)
  double ocs_port_usd = 520;
  int switch_radix = 64;  // ports of one electrical switch
};

/// One DC's rail network beyond the GPUs' own NIC transceivers (those are the same in both
/// designs and are counted apart).
struct FabricBill {
  int endpoints = 0;        // GPU ports: nodes x rails
  int tiers = 0;            // electrical: switch tiers per rail (1: one switch, 2: leaf-spine...)
  double switch_ports = 0;  // electrical switch ports
  double transceivers = 0;  // transceivers on the switch side
  double ocs_ports = 0;
  double power_w = 0;
  double cost_usd = 0;
};

struct RailsBill {
  FabricBill packet;            // electrical packet rails
  FabricBill ocs;               // OCS rails
  double nic_transceivers = 0;  // one per GPU port, in both
  double nic_power_w = 0, nic_cost_usd = 0;
  double power_ratio() const { return ocs.power_w > 0 ? packet.power_w / ocs.power_w : 0; }
  double cost_ratio() const { return ocs.cost_usd > 0 ? packet.cost_usd / ocs.cost_usd : 0; }
};

/// The bill of DC `dc`'s rails (a rails fabric; any other gets its nodes x gpus_per_node
/// ports as if it had rails). Electrical rails: one non-blocking folded Clos per rail of
/// as many tiers as its nodes need (a tier of radix r serves r endpoints; two tiers r^2/2;
/// three r^3/4), 2 x tiers - 1 switch ports and as many switch-side transceivers per
/// endpoint. OCS rails: one OCS port per endpoint, no switch-side transceiver (the OCS
/// steers the NIC's light). Figures per 400 Gbit/s port, scaled linearly with the rail's
/// port rate.
RailsBill rails_bill(const Dc& dc, const PortFigures& figures = {});

/// summary.json `rails[].bill` (the simulator's runs and the lab's): the DC's rails_bill().
nlohmann::json rails_bill_json(const Dc& dc);

/// What a DC's rails did in a run, as the simulator and the lab's rail switch both count it.
struct RailsActivity {
  std::string policy;               // arbiter::RailPolicy::name()
  bool circuits = false;            // OCS circuits gated the traffic
  std::vector<std::string> phases;  // phases with a configuration
  std::uint64_t reconfigurations = 0;
  std::int64_t reconfiguring_ns = 0;  // total time the rails were switching
};

/// A summary.json `rails[]` entry's keys common to the simulator's runs and the lab's: the
/// DC, its fabric, the activity per `iterations` and as a share of `run_s`, and its bill.
/// Each executor adds what it counts on its own (held transfers, held frames).
nlohmann::json rails_run_json(const Dc& dc, const RailsActivity& a, int iterations, double run_s);

}  // namespace wanlab::core
