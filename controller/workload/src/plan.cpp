#include "wanlab/workload/plan.hpp"
#include "wanlab/workload/program_file.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>

#include "wanlab/core/diagnostics.hpp"
#include "wanlab/workload/gpu.hpp"
#include "wanlab/workload/memory.hpp"

namespace wanlab::workload {
using program::Op;
using program::OpKind;

std::vector<std::pair<OpKind, int>> pipeline_order(Schedule schedule, int pp, int stage, int micro_batches) {
  if (pp < 1 || stage < 0 || stage >= pp || micro_batches < 0)
    throw std::invalid_argument(
        fmt::format("pipeline_order: stage {} of {} with {} micro-batches", stage, pp, micro_batches));
  if (schedule != Schedule::gpipe && schedule != Schedule::one_f_one_b)
    throw std::invalid_argument(fmt::format("pipeline_order: {} has chunks or split backwards; use pipeline_steps",
                                            to_string(schedule)));
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

namespace {

std::vector<PipelineStep> interleaved_steps(int v, int pp, int stage, int m) {
  const int total = m * v;
  const int warmup = m == pp ? total : std::min((pp - stage - 1) * 2 + (v - 1) * pp, total);
  const auto step = [&](int k, bool forward) {
    const int group = pp * v;
    const int chunk_f = (k % group) / pp;
    PipelineStep st;
    st.kind = forward ? OpKind::forward : OpKind::backward;
    st.microbatch = (k / group) * pp + k % pp;
    st.chunk = forward ? chunk_f : v - 1 - chunk_f;
    return st;
  };
  std::vector<PipelineStep> out;
  out.reserve(2 * static_cast<std::size_t>(total));
  for (int k = 0; k < warmup; ++k) out.push_back(step(k, true));
  const int steady = total - warmup;
  for (int i = 0; i < steady; ++i) {
    out.push_back(step(warmup + i, true));
    out.push_back(step(i, false));
  }
  for (int k = steady; k < total; ++k) out.push_back(step(k, false));
  return out;
}

// ZB-H1 as a greedy list schedule on unit-cost F, B and W with no communication time
// (see plan.hpp); every stage's order is built together since each waits on its neighbours.
std::vector<std::vector<PipelineStep>> zb_h1_steps(int pp, int m) {
  const auto P = static_cast<std::size_t>(pp);
  const auto M = static_cast<std::size_t>(m);
  std::vector<std::vector<std::int64_t>> f_end(P, std::vector<std::int64_t>(M, kNever));
  std::vector<std::vector<std::int64_t>> b_end = f_end;
  std::vector<int> next_f(P, 0), next_b(P, 0);
  std::vector<std::vector<int>> waiting_w(P);
  std::vector<std::size_t> next_w(P, 0);
  std::vector<std::vector<PipelineStep>> out(P);
  const std::size_t ops = 3 * P * M;
  std::size_t placed = 0;
  for (std::int64_t t = 0; placed < ops; ++t) {
    for (std::size_t i = 0; i < P; ++i) {
      const int b = next_b[i];
      const auto bi = static_cast<std::size_t>(b);
      const bool b_ready = b < m && (i + 1 == P ? f_end[i][bi] <= t : b_end[i + 1][bi] <= t);
      const int f = next_f[i];
      const auto fi = static_cast<std::size_t>(f);
      const bool f_ready = f < m && (i == 0 || f_end[i - 1][fi] <= t) && f - b < pp - static_cast<int>(i);
      const std::size_t pending_w = waiting_w[i].size() - next_w[i];
      const bool w_ready = pending_w > 0;
      char pick = 0;
      if (w_ready && pending_w > P - 1) pick = 'W';
      else if (b_ready) pick = 'B';
      else if (f_ready) pick = 'F';
      else if (w_ready) pick = 'W';
      if (pick == 0) continue;
      PipelineStep st;
      if (pick == 'F') {
        st.kind = OpKind::forward;
        st.microbatch = f;
        f_end[i][fi] = t + 1;
        ++next_f[i];
      } else if (pick == 'B') {
        st.kind = OpKind::backward;
        st.microbatch = b;
        st.part = program::BackwardPart::input;
        b_end[i][bi] = t + 1;
        ++next_b[i];
        waiting_w[i].push_back(b);
      } else {
        st.kind = OpKind::backward;
        st.microbatch = waiting_w[i][next_w[i]++];
        st.part = program::BackwardPart::weight;
      }
      out[i].push_back(st);
      ++placed;
    }
  }
  return out;
}

}  // namespace

std::vector<PipelineStep> pipeline_steps(Schedule schedule, int virtual_stages, int pp, int stage, int micro_batches) {
  if (pp < 1 || stage < 0 || stage >= pp || micro_batches < 0 || virtual_stages < 1)
    throw std::invalid_argument(fmt::format("pipeline_steps: stage {} of {} with {} micro-batches and {} chunks",
                                            stage, pp, micro_batches, virtual_stages));
  std::vector<PipelineStep> out;
  switch (schedule) {
    case Schedule::gpipe:
    case Schedule::one_f_one_b:
      for (auto [kind, mb] : pipeline_order(schedule, pp, stage, micro_batches)) {
        PipelineStep st;
        st.kind = kind;
        st.microbatch = mb;
        out.push_back(st);
      }
      return out;
    case Schedule::interleaved_1f1b:
      if (pp < 2 || virtual_stages < 2 || micro_batches % pp != 0)
        throw std::invalid_argument(fmt::format("pipeline_steps: interleaved-1f1b needs pp >= 2, virtual_stages >= 2 "
                                                "and micro-batches a multiple of pp (pp {}, {} chunks, {} micro-batches)",
                                                pp, virtual_stages, micro_batches));
      return interleaved_steps(virtual_stages, pp, stage, micro_batches);
    case Schedule::zb_h1:
      return zb_h1_steps(pp, micro_batches).at(static_cast<std::size_t>(stage));
  }
  return out;
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
  // Rendezvous transfers (gloo, NCCL): the ring's members start together, each step's
  // chunk leaving once its receiver is in the collective (program.hpp).
  ar.rendezvous = plan.scenario.send_mode == SendMode::rendezvous;
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

// A stage's layers split into v model chunks (earlier chunks take the extra layers); the
// LM head goes with the last chunk of the last stage.
std::vector<program::StageShape> chunk_shapes(const program::StageShape& stage, int v, bool last_stage) {
  std::vector<program::StageShape> out;
  const auto layers = split_layers(stage.layers, v);
  for (int c = 0; c < v; ++c) {
    auto shape = stage;
    shape.layers = layers[static_cast<std::size_t>(c)];
    shape.vocab = last_stage && c == v - 1 ? stage.vocab : 0;
    out.push_back(shape);
  }
  return out;
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

  program::WorkerProgram p{w.worker, w.stage, w.dp_rank, w.tp_rank, cost.shape, {}, {}};
  const int v = s.virtual_stages;
  const int m = s.micro_batches;
  std::vector<double> forward_flops{cost.forward_flops};
  std::vector<double> backward_flops{cost.backward_flops};
  if (v > 1) {
    p.chunks = chunk_shapes(cost.shape, v, last);
    forward_flops.clear();
    backward_flops.clear();
    for (const auto& c : p.chunks) {
      forward_flops.push_back(program::gemm_flops(program::stage_gemms(c, OpKind::forward)));
      backward_flops.push_back(program::gemm_flops(program::stage_gemms(c, OpKind::backward)));
    }
  }
  // With chunks, the first stage's chunk c > 0 takes its input from the last stage's chunk
  // c - 1, and the last stage's chunk c < v - 1 feeds the first stage's chunk c + 1.
  const int first_worker = worker_id(par, 0, w.dp_rank, w.tp_rank);
  const int last_worker = worker_id(par, par.pp - 1, w.dp_rank, w.tp_rank);
  for (const auto& st : pipeline_steps(s.schedule, v, par.pp, w.stage, m)) {
    const int mb = st.microbatch;
    const int c = st.chunk;
    const auto ci = static_cast<std::size_t>(c);
    const bool model_input = first && c == 0;
    const bool model_output = last && c == v - 1;
    const int from = first ? last_worker : prev;  // the worker before this chunk
    const int to = last ? first_worker : next;    // the worker after it
    const int from_chunk = first ? c - 1 : c;     // the tag's chunk on the boundary before
    if (st.kind == OpKind::forward) {
      if (!model_input) p.ops.push_back(message(OpKind::recv, from, activation_tag(mb, from_chunk, m), mb));
      auto op = compute_op(OpKind::forward, mb, forward_flops[ci]);
      op.chunk = c;
      p.ops.push_back(op);
      if (!model_output) p.ops.push_back(message(OpKind::send, to, activation_tag(mb, c, m), mb));
    } else {
      const bool weight = st.part == program::BackwardPart::weight;
      if (!model_output && !weight) p.ops.push_back(message(OpKind::recv, to, gradient_tag(mb, c, m), mb));
      // Recomputation runs the micro-batch's chunk forward again before its backward (before
      // the input half where the backward is split).
      const double again = s.memory.recompute && st.part != program::BackwardPart::weight
                               ? forward_flops[ci]
                               : 0;
      const double flops =
          (st.part == program::BackwardPart::full ? backward_flops[ci] : backward_flops[ci] / 2) + again;
      auto op = compute_op(OpKind::backward, mb, flops);
      op.chunk = c;
      op.part = st.part;
      p.ops.push_back(op);
      if (!model_input && !weight) p.ops.push_back(message(OpKind::send, from, gradient_tag(mb, from_chunk, m), mb));
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

// A scenario's programs replayed as given (program_file.hpp): bytes scaled as the model's
// would be (a ring inside one DC by lan_scale), compute at the file's FLOP/s or the GPU's.
Plan program_plan(Plan plan) {
  const auto& s = plan.scenario;
  plan.workers = place_programs(s, plan.topology);
  for (const auto& w : plan.workers) {
    auto p = s.programs.at(static_cast<std::size_t>(w.worker));
    p.stage = w.stage;
    p.dp_rank = w.dp_rank;
    p.tp_rank = w.tp_rank;
    for (auto& op : p.ops) {
      if (op.kind == program::OpKind::allreduce) {
        bool one_dc = true;
        for (int m : op.ring) one_dc = one_dc && plan.workers.at(static_cast<std::size_t>(m)).dc == w.dc;
        op.bytes = scaled_bytes(op.bytes, one_dc ? run_lan_scale(s) : s.scale);
      } else if (op.kind == program::OpKind::send || op.kind == program::OpKind::recv) {
        op.bytes = scaled_bytes(s, op.bytes);
        if (op.kind == program::OpKind::send) plan.pipeline_message_bytes = std::max(plan.pipeline_message_bytes, op.bytes);
      }
    }
    plan.programs.push_back(std::move(p));
    plan.effective_flops.push_back(
        s.programs_effective_flops.value_or(effective_flops(plan.topology.dcs.at(w.dc).gpu, s.model.dtype, s.mfu)));
    StageCost c;
    c.stage = w.stage;
    plan.stages.push_back(c);
  }
  plan.wan_bytes_per_iteration = wan_bytes(plan);
  return plan;
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
  if (!scenario.programs.empty()) return program_plan(std::move(plan));
  plan.workers = place_workers(scenario, topo);
  std::vector<std::vector<std::size_t>> stage_dcs(static_cast<std::size_t>(scenario.parallelism.pp));
  for (const auto& w : plan.workers) stage_dcs.at(static_cast<std::size_t>(w.stage)).push_back(w.dc);
  check_memory(scenario, memory_fit(scenario, topo, stage_dcs));
  plan.stages = stage_costs(scenario.model, scenario.parallelism, scenario.micro_batch_size, stage_layers(scenario));
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
