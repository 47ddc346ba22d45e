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
      p.ops.push_back(compute_op(OpKind::backward, mb, cost.backward_flops));
      if (!first) p.ops.push_back(message(OpKind::send, prev, gradient_tag(mb), mb));
    }
  }
  if (par.dp > 1) {
    Op ar;
    ar.kind = OpKind::allreduce;
    for (int r = 0; r < par.dp; ++r) ar.ring.push_back(worker_id(par, w.stage, r, w.tp_rank));
    // A ring inside one DC scales by lan_scale; one with a WAN hop is WAN traffic.
    bool one_dc = true;
    for (int id : ar.ring) one_dc = one_dc && plan.workers.at(static_cast<std::size_t>(id)).dc == w.dc;
    ar.bytes = scaled_bytes(cost.gradient_bytes_per_gpu, one_dc ? run_lan_scale(s) : s.scale);
    p.ops.push_back(std::move(ar));
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
