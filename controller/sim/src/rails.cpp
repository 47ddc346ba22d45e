// The simulated photonic rails (rails.hpp says what they model).
#include "wanlab/sim/rails.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <stdexcept>

#include "wanlab/core/diagnostics.hpp"

namespace wanlab::sim {

using arbiter::RailPhase;

namespace {

// Where each phase's traffic goes inside one fabric: group -> the groups it sends to and
// receives from, to check that one circuit per port is enough.
struct PhaseUse {
  bool present = false;
  std::map<std::uint32_t, std::uint32_t> out, in;  // group -> its one peer
};

std::string where(const SimContext& ctx, std::uint32_t group) {
  const auto& w = ctx.plan.workers.at(static_cast<std::size_t>(group) * static_cast<std::size_t>(ctx.tp));
  return fmt::format("stage {} replica {} (node {})", w.stage, w.dp_rank,
                     core::node_name(ctx.plan.topology.dcs.at(w.dc), w.node));
}

// The phases each fabric carries: where their traffic goes, and the phases in the order first seen.
struct RailUse {
  std::vector<std::map<RailPhase, PhaseUse>> use;
  std::vector<std::vector<RailPhase>> order;
};

// Records every transfer across the rails: same rail index at both ends, and per phase one
// circuit out of and one into each port (on fabrics that switch circuits).
class RailUseRecorder {
 public:
  RailUseRecorder(const SimContext& ctx, const Workers& workers, const RailFabrics& rails, std::vector<bool> circuits)
      : ctx_(ctx), workers_(workers), rails_(rails), circuits_(std::move(circuits)) {
    use.use.resize(circuits_.size());
    use.order.resize(circuits_.size());
  }

  void note(std::uint32_t a, std::uint32_t b, RailPhase phase) {
    if (!rails_.on_rails(a, b)) return;
    if (gpu(a) != gpu(b))
      throw std::invalid_argument(fmt::format(
          "simulate: {} (GPUs {}..) sends to {} (GPUs {}..) across the rails of DC {}: a rail joins GPUs of one index, "
          "so TP groups that talk across nodes must start at the same GPU (give tp = gpus_per_node)",
          where(ctx_, a), gpu(a), where(ctx_, b), gpu(b), dc_name(a)));
    const auto fi = rails_.fabric_of(a);
    auto& u = use.use[fi][phase];
    if (!u.present) use.order[fi].push_back(phase);
    u.present = true;
    if (circuits_[fi]) {
      check(u.out, a, b, "send to", phase, a);
      check(u.in, b, a, "receive from", phase, a);
    }
  }

  RailUse use;

 private:
  int gpu(std::uint32_t g) const {
    return ctx_.plan.workers.at(static_cast<std::size_t>(workers_.groups[g].worker)).gpu;
  }
  const std::string& dc_name(std::uint32_t g) const { return ctx_.plan.topology.dcs[workers_.groups[g].dc].name; }

  void check(std::map<std::uint32_t, std::uint32_t>& m, std::uint32_t port, std::uint32_t peer, const char* dir,
             RailPhase phase, std::uint32_t a) const {
    const auto [it, fresh] = m.emplace(port, peer);
    if (!fresh && it->second != peer)
      throw std::invalid_argument(fmt::format(
          "simulate: phase {} needs the rail port of {} to {} two ports ({} and {}) on the OCS rails of DC {}; an "
          "OCS port connects to one port at a time",
          arbiter::to_string(phase), where(ctx_, port), dir, where(ctx_, it->second), where(ctx_, peer),
          dc_name(a)));
  }

  const SimContext& ctx_;
  const Workers& workers_;
  const RailFabrics& rails_;
  std::vector<bool> circuits_;  // by fabric: whether it switches circuits
};

// Every transfer of the program across the rails, per fabric and phase.
RailUse rail_use(const SimContext& ctx, const Workers& workers, const RailFabrics& rails,
                 const std::vector<int>& fabric_of, std::vector<bool> circuits) {
  RailUseRecorder rec(ctx, workers, rails, std::move(circuits));
  const auto& groups = workers.groups;
  for (std::uint32_t g = 0; g < groups.size(); ++g) {
    if (fabric_of[g] < 0) continue;
    const auto& prog = *groups[g].prog;
    for (std::size_t i = 0; i < groups[g].nops; ++i) {
      const auto& op = workers.ops[groups[g].slot_base + i];
      if (op.kind == program::OpKind::send) {
        rec.note(g, workers.slot_owner[op.target], op.gradient ? RailPhase::pp_backward : RailPhase::pp_forward);
      } else if (op.kind == program::OpKind::allreduce) {
        const auto& ring = prog.ops[i].ring;
        const auto me = std::find(ring.begin(), ring.end(), groups[g].worker);
        if (ring.size() < 2 || me == ring.end()) continue;
        const auto next = std::next(me) == ring.end() ? ring.front() : *std::next(me);
        rec.note(g, ctx.group_of(next), RailPhase::dp_allreduce);
      }
    }
  }
  // An iteration's order: forwards, backwards, then the all-reduce.
  for (auto& o : rec.use.order) std::sort(o.begin(), o.end());
  return std::move(rec.use);
}

// The policy's configurations (the scenario's /rails/phases), against the phases the program has.
std::vector<RailPhase> asked_phases(const workload::RailsSpec& spec, RailUse& u, core::Diagnostics& d) {
  std::vector<RailPhase> asked;
  for (std::size_t i = 0; i < spec.phases.size(); ++i) {
    const auto p = arbiter::parse_rail_phase(spec.phases[i]);
    if (!p) continue;  // the scenario parser refused it
    const bool somewhere =
        std::any_of(u.use.begin(), u.use.end(), [&](auto& m) { return m.contains(*p) && m[*p].present; });
    if (!somewhere)
      d.add(fmt::format("/rails/phases/{}", i),
            fmt::format("the program has no {} traffic across the rails of any DC (phases it has there: {})",
                        spec.phases[i], [&] {
                          std::string s;
                          for (const auto& o : u.order)
                            for (const auto q : o)
                              if (s.find(arbiter::to_string(q)) == std::string::npos)
                                s += (s.empty() ? "" : ", ") + arbiter::to_string(q);
                          return s.empty() ? std::string("none") : s;
                        }()));
    asked.push_back(*p);
  }
  return asked;
}

// A diagnostic when the rails of DC `name` carry phases that `configs` leaves out.
void refuse_unconfigured(const workload::RailsSpec& spec, const std::string& name,
                         const std::vector<RailPhase>& carried, const std::vector<RailPhase>& configs,
                         core::Diagnostics& d) {
  std::string missing;  // the phases the rails carry without a configuration
  for (const auto p : carried)
    if (std::find(configs.begin(), configs.end(), p) == configs.end())
      missing += (missing.empty() ? "" : ", ") + arbiter::to_string(p);
  if (missing.empty()) return;
  if (spec.policy == "static")
    d.add("/rails/policy",
          fmt::format("static keeps the DP all-reduce ring's circuits for the whole run, but the rails of DC {} "
                      "carry {} traffic too (pipeline stages on different nodes of the DC); use phase or packet",
                      name, missing));
  else
    d.add("/rails/phases", fmt::format("the rails of DC {} carry {} traffic, which the list gives no "
                                       "configuration; add it or leave \"phases\" out",
                                       name, missing));
}

}  // namespace

std::unique_ptr<RailFabrics> RailFabrics::make(SimContext& ctx, const Workers& workers) {
  const auto& topo = ctx.plan.topology;
  const auto& sc = ctx.sc;
  if (std::none_of(topo.dcs.begin(), topo.dcs.end(),
                   [](const core::Dc& dc) { return dc.fabric.kind == core::Fabric::Kind::rails; })) {
    return nullptr;
  }
  const bool any_ocs =
      std::any_of(topo.dcs.begin(), topo.dcs.end(), [](const core::Dc& dc) { return dc.fabric.ocs(); });
  const auto spec = sc.rails.value_or(workload::RailsSpec{});
  core::Diagnostics d(sc.source_file);
  auto policy = arbiter::make_rail_policy(spec.policy);  // the scenario parser knows the names
  if (sc.rails && !any_ocs && policy->circuits())
    d.add("/rails/policy", fmt::format("the {} policy switches circuits, but no DC of topology {} has OCS rails "
                                       "(a DC's fabric with \"switching\": \"ocs\")",
                                       spec.policy, topo.name));
  d.throw_if_any();

  std::unique_ptr<RailFabrics> r(new RailFabrics(ctx, std::move(policy)));
  const auto& groups = workers.groups;
  const auto ngroups = groups.size();
  r->fabric_of_.assign(ngroups, -1);
  r->node_.resize(ngroups);
  r->up_.assign(ngroups, 0);
  r->down_.assign(ngroups, 0);
  std::vector<int> fabric_of_dc(topo.dcs.size(), -1);
  std::vector<bool> circuits;
  for (std::size_t i = 0; i < topo.dcs.size(); ++i) {
    const auto& f = topo.dcs[i].fabric;
    if (f.kind != core::Fabric::Kind::rails) continue;
    Fabric fab;
    fab.dc = i;
    fab.circuits = f.ocs() && r->policy_->circuits();
    fab.latency = f.reconfiguration.count();
    fabric_of_dc[i] = static_cast<int>(r->fabrics_.size());
    circuits.push_back(fab.circuits);
    r->fabrics_.push_back(std::move(fab));
  }
  for (std::uint32_t g = 0; g < ngroups; ++g) {
    r->node_[g] = groups[g].node;
    const int fi = fabric_of_dc[groups[g].dc];
    if (fi < 0) continue;
    r->fabric_of_[g] = fi;
    const double rate = static_cast<double>(topo.dcs[groups[g].dc].fabric.port_rate.bps) * ctx.tp * sc.scale;
    r->up_[g] = ctx.net.add_link(rate);
    r->down_[g] = ctx.net.add_link(rate);
  }

  auto use = rail_use(ctx, workers, *r, r->fabric_of_, std::move(circuits));
  const auto asked = asked_phases(spec, use, d);
  d.throw_if_any();
  for (std::size_t fi = 0; fi < r->fabrics_.size(); ++fi) {
    auto& fab = r->fabrics_[fi];
    if (!fab.circuits) continue;
    std::vector<RailPhase> mine;  // the asked phases this DC has, in the list's order
    for (const auto p : asked)
      if (use.use[fi].contains(p)) mine.push_back(p);
    fab.configs = r->policy_->configurations(use.order[fi], asked.empty() ? std::span<const RailPhase>{} : mine);
    refuse_unconfigured(spec, topo.dcs[fab.dc].name, use.order[fi], fab.configs, d);
    if (!fab.configs.empty()) fab.current = fab.target = fab.configs.front();  // set up before the run
  }
  d.throw_if_any();
  return r;
}

bool RailFabrics::admit(std::uint32_t a, RailPhase phase, Waiter w, Nanos now) {
  const auto fi = fabric_of(a);
  auto& f = fabrics_[fi];
  if (!f.circuits) return true;
  if (!f.switching && f.current == phase) {
    ++f.active;
    return true;
  }
  f.waiting.emplace_back(phase, w);
  ++f.held;
  maybe_switch(fi, now);
  return false;
}

void RailFabrics::done(std::uint32_t fi, Nanos now) {
  auto& f = fabrics_[fi];
  if (!f.circuits) return;
  --f.active;
  maybe_switch(fi, now);
}

void RailFabrics::maybe_switch(std::uint32_t fi, Nanos now) {
  auto& f = fabrics_[fi];
  if (f.switching || f.active > 0 || f.waiting.empty()) return;
  phases_.clear();
  for (const auto& [p, w] : f.waiting) phases_.push_back(p);
  const auto next = policy_->next(f.current, phases_);
  if (!next && phases_.front() != f.current) return;  // the policy keeps its circuits: held for good
  f.switching = true;
  if (!next) {  // what waits is the current phase's own (released at a boundary): no switch
    f.target = f.current;
    ctx_.events.push(now, ev::RailsReady{fi});
    return;
  }
  f.target = *next;
  ++f.reconfigurations;
  f.reconfiguring_ns += f.latency;
  ctx_.events.push(now + f.latency, ev::RailsReady{fi});
}

std::vector<RailFabrics::Waiter> RailFabrics::ready(std::uint32_t fi, Nanos now) {
  auto& f = fabrics_[fi];
  f.switching = false;
  f.current = f.target;
  std::vector<Waiter> out;
  std::deque<std::pair<RailPhase, Waiter>> rest;
  for (const auto& [p, w] : f.waiting) {
    if (p == f.current)
      out.push_back(w);
    else
      rest.emplace_back(p, w);
  }
  f.waiting = std::move(rest);
  f.active += static_cast<int>(out.size());
  if (out.empty()) maybe_switch(fi, now);
  return out;
}

std::vector<RailStats> RailFabrics::stats() const {
  std::vector<RailStats> out;
  for (const auto& f : fabrics_) {
    RailStats s;
    s.dc = f.dc;
    s.policy = policy_->name();
    s.circuits = f.circuits;
    for (const auto p : f.configs) s.phases.push_back(arbiter::to_string(p));
    s.reconfigurations = f.reconfigurations;
    s.reconfiguring_ns = f.reconfiguring_ns;
    s.held = f.held;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace wanlab::sim
