// A lab run's circuit plan for its DCs' rails (run_rails.hpp).
#include "wanlab/run/run_rails.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "wanlab/common/program.hpp"
#include "wanlab/common/ring.hpp"
#include "wanlab/core/diagnostics.hpp"
#include "wanlab/core/fabric_cost.hpp"
#include "wanlab/workload/wan_transfer.hpp"

namespace wanlab::run {

using arbiter::RailPhase;

namespace {

// One DC's rails: per phase, each node's one peer (OCS ports connect one port at a time).
struct DcUse {
  bool ocs = false;
  std::vector<RailPhase> order;                // phases seen
  std::map<RailPhase, std::vector<int>> out;   // node -> node it sends to
  std::map<RailPhase, std::vector<int>> in;    // node -> node it receives from
};

std::string where(const workload::Plan& plan, int w) {
  const auto& p = plan.workers.at(static_cast<std::size_t>(w));
  return fmt::format("worker {} (stage {}, replica {}, {} GPU {})", w, p.stage, p.dp_rank,
                     core::node_name(plan.topology.dcs.at(p.dc), p.node), p.gpu);
}

void note(const workload::Plan& plan, std::map<std::size_t, DcUse>& use, int a, int b, RailPhase phase) {
  const auto& wa = plan.workers.at(static_cast<std::size_t>(a));
  const auto& wb = plan.workers.at(static_cast<std::size_t>(b));
  if (wa.dc != wb.dc || wa.node == wb.node) return;
  const auto it = use.find(wa.dc);
  if (it == use.end()) return;
  const auto& dc = plan.topology.dcs[wa.dc];
  if (wa.gpu != wb.gpu)
    throw std::invalid_argument(fmt::format(
        "run: {} sends to {} across the rails of DC {}: a rail joins GPUs of one index, so GPUs that talk across "
        "nodes must have the same index (give tp = gpus_per_node)",
        where(plan, a), where(plan, b), dc.name));
  auto& u = it->second;
  const auto n = static_cast<std::size_t>(dc.nodes);
  if (!u.out.contains(phase)) {
    u.order.push_back(phase);
    u.out[phase].assign(n, -1);
    u.in[phase].assign(n, -1);
  }
  auto& out = u.out[phase][static_cast<std::size_t>(wa.node)];
  auto& in = u.in[phase][static_cast<std::size_t>(wb.node)];
  if (u.ocs && ((out >= 0 && out != wb.node) || (in >= 0 && in != wa.node)))
    throw std::invalid_argument(fmt::format(
        "run: phase {} needs the rail port of {} to connect to two ports on the OCS rails of DC {}; an OCS port "
        "connects to one port at a time",
        arbiter::to_string(phase), where(plan, out >= 0 && out != wb.node ? a : b), dc.name));
  out = wb.node;
  in = wa.node;
}

}  // namespace

std::map<std::size_t, shaping::RailPlan> rail_plans(const workload::Plan& plan) {
  const auto& topo = plan.topology;
  const auto& sc = plan.scenario;
  std::map<std::size_t, DcUse> use;
  bool any_ocs = false;
  for (std::size_t k = 0; k < topo.dcs.size(); ++k)
    if (topo.dcs[k].fabric.kind == core::Fabric::Kind::rails) {
      use[k].ocs = topo.dcs[k].fabric.ocs();
      any_ocs |= use[k].ocs;
    }
  if (use.empty()) return {};
  const auto spec = sc.rails.value_or(workload::RailsSpec{});
  auto policy = arbiter::make_rail_policy(spec.policy);
  core::Diagnostics d(sc.source_file);
  if (sc.rails && !any_ocs && policy->circuits())
    d.add("/rails/policy", fmt::format("the {} policy switches circuits, but no DC of topology {} has OCS rails "
                                       "(a DC's fabric with \"switching\": \"ocs\")",
                                       spec.policy, topo.name));
  d.throw_if_any();
  for (std::size_t w = 0; w < plan.programs.size(); ++w) {
    const int me = static_cast<int>(w);
    for (const auto& op : plan.programs[w].ops) {
      if (op.kind == program::OpKind::send)
        note(plan, use, me, op.peer, workload::is_gradient_tag(op.tag) ? RailPhase::pp_backward : RailPhase::pp_forward);
      else if (op.kind == program::OpKind::allreduce && op.ring.size() >= 2)
        if (const auto around = program::ring_neighbours(op.ring, me))
          note(plan, use, me, around->next, RailPhase::dp_allreduce);
    }
  }
  // An iteration's order: forwards, backwards, then the all-reduce (as the simulator's).
  for (auto& [k, u] : use) std::sort(u.order.begin(), u.order.end());
  std::vector<RailPhase> asked;
  for (std::size_t i = 0; i < spec.phases.size(); ++i) {
    const auto p = arbiter::parse_rail_phase(spec.phases[i]);
    if (!p) continue;  // the scenario parser refused it
    if (std::none_of(use.begin(), use.end(), [&](const auto& u) { return u.second.out.contains(*p); }))
      d.add(fmt::format("/rails/phases/{}", i),
            fmt::format("the program has no {} traffic across the rails of any DC", spec.phases[i]));
    asked.push_back(*p);
  }
  d.throw_if_any();
  std::map<std::size_t, shaping::RailPlan> out;
  for (auto& [k, u] : use) {
    auto& rp = out[k];
    if (!u.ocs || !policy->circuits()) continue;  // packet rails: no circuits
    rp.policy = spec.policy;
    std::vector<RailPhase> mine;
    for (const auto p : asked)
      if (u.out.contains(p)) mine.push_back(p);
    rp.configs = policy->configurations(u.order, asked.empty() ? std::span<const RailPhase>{} : mine);
    std::string missing;
    for (const auto p : u.order)
      if (std::find(rp.configs.begin(), rp.configs.end(), p) == rp.configs.end())
        missing += (missing.empty() ? "" : ", ") + arbiter::to_string(p);
    if (!missing.empty())
      d.add(spec.policy == "static" ? "/rails/policy" : "/rails/phases",
            fmt::format("the rails of DC {} carry {} traffic, which the {} policy gives no configuration", topo.dcs[k].name,
                        missing, spec.policy));
    for (const auto p : rp.configs) rp.out.push_back(u.out.contains(p) ? u.out[p] : std::vector<int>(
                                                                                      static_cast<std::size_t>(topo.dcs[k].nodes), -1));
  }
  d.throw_if_any();
  return out;
}

nlohmann::json rails_json(const core::Topology& topo, const std::vector<shaping::RailSwitchStats>& start,
                          const std::vector<shaping::RailSwitchStats>& stats, int iterations, double run_s) {
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t i = 0; i < stats.size(); ++i) {
    const auto& s = stats[i];
    const shaping::RailSwitchStats base = i < start.size() ? start[i] : shaping::RailSwitchStats{};
    const auto& c = s.circuits;
    const core::RailsActivity a{c.policy, c.circuits, c.phases, c.reconfigurations, c.reconfiguring_ns};
    auto j = core::rails_run_json(topo.dcs.at(s.dc), a, iterations, run_s);
    j.update({{"held_frames", c.held_frames},
              {"held_dropped", c.held_dropped},
              {"no_circuit", c.no_circuit},
              {"dropped_queue", s.dropped_queue - base.dropped_queue},
              {"rx_ring_dropped", s.rx_ring_dropped - base.rx_ring_dropped},
              {"forwarded", s.forwarded - base.forwarded},
              {"bytes", s.bytes - base.bytes}});
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace wanlab::run
