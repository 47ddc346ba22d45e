#include "wanlab/workload/plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include "wanlab/core/diagnostics.hpp"
#include "wanlab/workload/gpu.hpp"

namespace wanlab::workload {
using program::Op;
using program::OpKind;

std::vector<std::pair<OpKind, int>> pipeline_order(Schedule schedule, int pp, int stage, int micro_batches) {
  if (pp < 1 || stage < 0 || stage >= pp || micro_batches < 0)
    throw std::invalid_argument(
        fmt::format("pipeline_order: stage {} of {} with {} micro-batches", stage, pp, micro_batches));
  std::vector<std::pair<OpKind, int>> order;
  order.reserve(2 * static_cast<std::size_t>(micro_batches));
  if (schedule == Schedule::gpipe) {
    for (int mb = 0; mb < micro_batches; ++mb) order.emplace_back(OpKind::forward, mb);
    for (int mb = 0; mb < micro_batches; ++mb) order.emplace_back(OpKind::backward, mb);
    return order;
  }
  // 1F1B: enough forwards to fill the pipeline below this stage, then alternate, then drain.
  const int warmup = std::min(pp - stage - 1, micro_batches);
  const int steady = micro_batches - warmup;
  for (int mb = 0; mb < warmup; ++mb) order.emplace_back(OpKind::forward, mb);
  for (int i = 0; i < steady; ++i) {
    order.emplace_back(OpKind::forward, warmup + i);
    order.emplace_back(OpKind::backward, i);
  }
  for (int mb = steady; mb < micro_batches; ++mb) order.emplace_back(OpKind::backward, mb);
  return order;
}

std::uint64_t scaled_bytes(const Scenario& scenario, std::uint64_t bytes) {
  return scaled_bytes(bytes, scenario.scale);
}

std::uint64_t scaled_bytes(std::uint64_t bytes, double scale) {
  const double scaled = std::round(static_cast<double>(bytes) * scale);
  return std::max<std::uint64_t>(1, static_cast<std::uint64_t>(scaled));
}

std::int64_t compute_before(const Plan& plan, int worker, std::size_t index) {
  const auto each = compute_before_each(plan, worker);
  return each[std::min(index, each.size() - 1)];
}

std::vector<std::int64_t> compute_before_each(const Plan& plan, int worker) {
  const auto& prog = plan.programs.at(static_cast<std::size_t>(worker));
  const double flops_per_s = plan.effective_flops.at(static_cast<std::size_t>(worker));
  std::vector<std::int64_t> out;
  out.reserve(prog.ops.size() + 1);
  double s = 0;
  for (const auto& op : prog.ops) {
    out.push_back(static_cast<std::int64_t>(s * 1e9));
    if (op.kind == OpKind::forward || op.kind == OpKind::backward || op.kind == OpKind::optimizer)
      s += op.flops / flops_per_s;
  }
  out.push_back(static_cast<std::int64_t>(s * 1e9));
  return out;
}

std::uint64_t Plan::wan_bytes_total() const {
  std::uint64_t total = 0;
  for (const auto& l : wan_bytes_per_iteration) total += l.bytes;
  return total;
}

namespace {

Op compute_op(OpKind kind, int mb, double flops) {
  Op op;
  op.kind = kind;
  op.microbatch = mb;
  op.flops = flops;
  return op;
}

// A ring all-reduce op of `bytes` (unscaled) among `ring`: inside one DC it scales by
// lan_scale, with a WAN hop by scale.
Op ring_allreduce(const Plan& plan, std::vector<int> ring, std::uint64_t bytes) {
  Op ar;
  ar.kind = OpKind::allreduce;
  ar.ring = std::move(ring);
  const auto dc = plan.workers.at(static_cast<std::size_t>(ar.ring.front())).dc;
  bool one_dc = true;
  for (int id : ar.ring) one_dc = one_dc && plan.workers.at(static_cast<std::size_t>(id)).dc == dc;
  ar.bytes = scaled_bytes(bytes, one_dc ? run_lan_scale(plan.scenario) : plan.scenario.scale);
  return ar;
}

}  // namespace

std::vector<Op> allreduce_ops(const Plan& plan, const WorkerPlacement& w, std::uint64_t gradient_bytes) {
  const auto& s = plan.scenario;
  const auto& par = s.parallelism;
  std::vector<int> all;
  for (int r = 0; r < par.dp; ++r) all.push_back(worker_id(par, w.stage, r, w.tp_rank));
  if (s.allreduce == AllReduce::ring) return {ring_allreduce(plan, all, gradient_bytes)};

  // Hierarchical: the stage's replicas by DC, DCs in order of their first replica.
  std::vector<std::size_t> dcs;
  std::vector<std::vector<int>> by_dc;
  for (int id : all) {
    const auto dc = plan.workers.at(static_cast<std::size_t>(id)).dc;
    const auto it = std::find(dcs.begin(), dcs.end(), dc);
    if (it == dcs.end()) {
      dcs.push_back(dc);
      by_dc.push_back({id});
    } else {
      by_dc[static_cast<std::size_t>(it - dcs.begin())].push_back(id);
    }
  }
  const std::size_t m = by_dc.front().size();
  for (std::size_t i = 0; i < by_dc.size(); ++i)
    if (by_dc[i].size() != m) {
      core::Diagnostics d(s.source_file);
      d.add("/allreduce",
            fmt::format("hierarchical all-reduce needs as many replicas of stage {} in every DC it spans (one shard "
                        "per replica inside a DC, one ring per shard across DCs): DC {} has {}, DC {} has {}; give a "
                        "dp that is a multiple of the DCs used, or \"allreduce\": \"ring\"",
                        w.stage, plan.topology.dcs.at(dcs.front()).name, m, plan.topology.dcs.at(dcs[i]).name,
                        by_dc[i].size()));
      d.throw_if_any();
    }
  const auto mine = static_cast<std::size_t>(std::find(dcs.begin(), dcs.end(), w.dc) - dcs.begin());
  const auto& local = by_dc.at(mine);
  const auto j = static_cast<std::size_t>(std::find(local.begin(), local.end(), w.worker) - local.begin());
  std::vector<Op> ops;
  // Reduce-scatter and all-gather inside the DC: 2(m-1) steps of bytes/m, one ring's worth.
  if (m > 1) ops.push_back(ring_allreduce(plan, local, gradient_bytes));
  // Across DCs, among the holders of shard j: a ring all-reduce of bytes/m.
  if (dcs.size() > 1) {
    std::vector<int> across;
    for (const auto& members : by_dc) across.push_back(members[j]);
    ops.push_back(ring_allreduce(plan, across, (gradient_bytes + m - 1) / m));
  }
  return ops;
}

namespace {

program::WorkerProgram worker_program(const Plan& plan, const WorkerPlacement& w) {
  const auto& s = plan.scenario;
  const auto& par = s.parallelism;
  const auto& cost = plan.stages[static_cast<std::size_t>(w.stage)];
  const bool first = w.stage == 0;
  const bool last = w.stage == par.pp - 1;
  const int prev = first ? -1 : worker_id(par, w.stage - 1, w.dp_rank, w.tp_rank);
  const int next = last ? -1 : worker_id(par, w.stage + 1, w.dp_rank, w.tp_rank);
  const auto message = [&](OpKind kind, int peer, std::uint32_t tag, int mb) {
    Op op;
    op.kind = kind;
    op.microbatch = mb;
    op.peer = peer;
    op.bytes = plan.pipeline_message_bytes;
    op.tag = tag;
    op.rendezvous = s.send_mode == SendMode::rendezvous;
    return op;
  };

  program::WorkerProgram p{w.worker, w.stage, w.dp_rank, w.tp_rank, cost.shape, {}};
  for (auto [kind, mb] : pipeline_order(s.schedule, par.pp, w.stage, s.micro_batches)) {
    if (kind == OpKind::forward) {
      if (!first) p.ops.push_back(message(OpKind::recv, prev, activation_tag(mb), mb));
      p.ops.push_back(compute_op(OpKind::forward, mb, cost.forward_flops));
      if (!last) p.ops.push_back(message(OpKind::send, next, activation_tag(mb), mb));
    } else {
      if (!last) p.ops.push_back(message(OpKind::recv, next, gradient_tag(mb), mb));
      // Recomputation runs the micro-batch's forward again before its backward.
      p.ops.push_back(compute_op(OpKind::backward, mb, cost.backward_flops + (s.recompute ? cost.forward_flops : 0)));
      if (!first) p.ops.push_back(message(OpKind::send, prev, gradient_tag(mb), mb));
    }
  }
  if (par.dp > 1) {
    for (auto& ar : allreduce_ops(plan, w, cost.gradient_bytes_per_gpu)) p.ops.push_back(std::move(ar));
  }
  p.ops.push_back(compute_op(OpKind::optimizer, -1, cost.optimizer_flops));
  return p;
}

// Directed DC pair -> payload bytes, from what the programs send.
std::vector<Plan::LinkBytes> wan_bytes(const Plan& plan) {
  std::map<std::pair<std::size_t, std::size_t>, std::uint64_t> bytes;
  const auto dc_of = [&](int worker) { return plan.workers.at(static_cast<std::size_t>(worker)).dc; };
  for (const auto& p : plan.programs) {
    const std::size_t src = dc_of(p.worker);
    for (const auto& op : p.ops) {
      if (op.kind == OpKind::send && dc_of(op.peer) != src) bytes[{src, dc_of(op.peer)}] += op.bytes;
      if (op.kind != OpKind::allreduce || op.ring.size() < 2) continue;
      const auto n = op.ring.size();
      const auto pos = static_cast<std::size_t>(std::find(op.ring.begin(), op.ring.end(), p.worker) - op.ring.begin());
      const std::size_t dst = dc_of(op.ring[(pos + 1) % n]);
      // 2(n-1) steps (reduce-scatter, then all-gather), each one chunk to the next rank.
      if (dst != src) bytes[{src, dst}] += 2 * (n - 1) * program::ring_chunk_bytes(op.bytes, n);
    }
  }
  std::vector<Plan::LinkBytes> out;
  for (const auto& [pair, b] : bytes) out.push_back({pair.first, pair.second, b});
  return out;
}

}  // namespace

Plan build_plan(const Scenario& scenario, const core::Topology& topo) {
  Plan plan;
  plan.scenario = scenario;
  plan.topology = topo;
  if (scenario.lan_scale && (topo.lan.rate.bps > 0 || topo.lan.delay.count() > 0)) {
    core::Diagnostics d(scenario.source_file);
    d.add("/lan_scale", fmt::format("topology {} shapes its LAN (lan.rate {}, lan.delay {}): all-reduce bytes inside a "
                                    "DC must scale as its rate does; leave lan_scale out (it is for unshaped LANs)",
                                    topo.name, wanlab::to_string(topo.lan.rate), wanlab::to_string(topo.lan.delay)));
    d.throw_if_any();
  }
  plan.workers = place_workers(scenario, topo);
  plan.stages = stage_costs(scenario.model, scenario.parallelism, scenario.micro_batch_size);
  plan.pipeline_message_bytes = scaled_bytes(activation_bytes(scenario.model, scenario.micro_batch_size) /
                                                               static_cast<std::uint64_t>(scenario.parallelism.tp),
                                                           scenario.scale);
  for (const auto& w : plan.workers) {
    plan.programs.push_back(worker_program(plan, w));
    plan.effective_flops.push_back(effective_flops(topo.dcs.at(w.dc).gpu, scenario.model.dtype, scenario.mfu));
  }
  plan.wan_bytes_per_iteration = wan_bytes(plan);
  return plan;
}

}  // namespace wanlab::workload
