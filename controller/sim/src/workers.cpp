#include "wanlab/sim/workers.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <tuple>

#include "wanlab/workload/execute.hpp"
#include "wanlab/workload/wan_transfer.hpp"

namespace wanlab::sim {
namespace {
struct Recv {
  int peer = 0;
  std::uint32_t tag = 0;
  std::uint32_t slot = 0;
};
struct Send {
  std::uint32_t group = 0;
  std::uint32_t slot = 0;
  std::uint32_t tag = 0;
};
bool by_peer_tag(const Recv& a, const Recv& b) { return std::tie(a.peer, a.tag) < std::tie(b.peer, b.tag); }
}  // namespace

Workers::Workers(const SimContext& ctx) : ctx_(ctx), iterations_(ctx.sc.iterations) {
  const auto& plan = ctx.plan;
  const int tp = ctx.tp;
  const auto& par = ctx.sc.parallelism;
  if (plan.programs.size() != plan.workers.size() || plan.workers.size() != static_cast<std::size_t>(par.gpus()))
    throw std::invalid_argument("simulate: the plan's programs and workers do not match its parallelism");
  const auto ngroups = plan.workers.size() / static_cast<std::size_t>(tp);
  groups.resize(ngroups);
  std::uint32_t slots = 0;
  for (std::size_t g = 0; g < ngroups; ++g) {
    auto& gr = groups[g];
    gr.worker = static_cast<int>(g) * tp;
    gr.prog = &plan.programs.at(static_cast<std::size_t>(gr.worker));
    if (gr.prog->worker != gr.worker) throw std::invalid_argument("simulate: programs must be in worker id order");
    const auto& w = plan.workers.at(static_cast<std::size_t>(gr.worker));
    // The symmetry the simulator relies on: a replica's TP ranks share one node.
    for (int t = 1; t < tp; ++t) {
      const auto& o = plan.workers.at(static_cast<std::size_t>(gr.worker + t));
      if (o.dc != w.dc || o.node != w.node)
        throw std::invalid_argument(
            fmt::format("simulate: the TP ranks of stage {} replica {} are not on one node", w.stage, w.dp_rank));
    }
    gr.dc = w.dc;
    gr.node = ctx.node_base.at(w.dc) + static_cast<std::size_t>(w.node);
    gr.slot_base = slots;
    gr.nops = gr.prog->ops.size();
    slots += static_cast<std::uint32_t>(gr.nops);
    gr.report.worker = gr.worker;
  }
  ops.resize(slots);
  match_sends();
  slot_owner.resize(slots);
  for (std::uint32_t g = 0; g < groups.size(); ++g)
    for (std::size_t i = 0; i < groups[g].nops; ++i) slot_owner[groups[g].slot_base + i] = g;
}

// One pass over the plan's programs: the ops the event loop reads (ops), every recv and
// every send. Then each send's matching recv: the receiver's recvs sorted by (sender, tag),
// one flat table with a range per receiver, searched per send (a scan of the receiver's
// program per send was quadratic in micro-batches). A tag repeated between one pair
// matches its last recv, as the scan did.
void Workers::match_sends() {
  using program::OpKind;
  const auto& plan = ctx_.plan;
  std::vector<Recv> recvs;
  std::vector<Send> sends;
  std::vector<std::size_t> recv_begin(groups.size() + 1, 0);
  for (std::uint32_t gi = 0; gi < groups.size(); ++gi) {
    auto& gr = groups[gi];
    const double flops_per_s = plan.effective_flops.at(static_cast<std::size_t>(gr.worker));
    recv_begin[gi] = recvs.size();
    for (std::size_t i = 0; i < gr.nops; ++i) {
      const auto& op = gr.prog->ops[i];
      const auto slot = gr.slot_base + static_cast<std::uint32_t>(i);
      auto& o = ops[slot];
      o.kind = op.kind;
      o.gradient = workload::is_gradient_tag(op.tag);
      o.rendezvous = op.rendezvous;
      o.microbatch = op.microbatch;
      o.peer = op.peer;
      o.bytes = op.bytes;
      if (op.kind == OpKind::forward || op.kind == OpKind::backward || op.kind == OpKind::optimizer)
        o.seconds = op.flops / flops_per_s;
      if (op.kind == OpKind::recv) recvs.push_back({op.peer, op.tag, slot});
      if (op.kind == OpKind::send) sends.push_back({gi, slot, op.tag});
    }
    std::stable_sort(recvs.begin() + static_cast<std::ptrdiff_t>(recv_begin[gi]), recvs.end(), by_peer_tag);
    // The spans it will report: at most one per op and iteration.
    gr.report.spans.reserve(gr.nops * static_cast<std::size_t>(std::max(iterations_, 0)));
  }
  recv_begin[groups.size()] = recvs.size();
  const auto& topo = plan.topology;
  for (const auto& x : sends) {
    const auto& gr = groups[x.group];
    auto& op = ops[x.slot];
    const auto dst = ctx_.group_of(op.peer);
    const auto first = recvs.begin() + static_cast<std::ptrdiff_t>(recv_begin[dst]);
    const auto last = recvs.begin() + static_cast<std::ptrdiff_t>(recv_begin[dst + 1]);
    const auto it = std::upper_bound(first, last, Recv{gr.worker, x.tag, 0}, by_peer_tag);
    if (it != first && std::prev(it)->peer == gr.worker && std::prev(it)->tag == x.tag) op.target = std::prev(it)->slot;
    if (op.target == kNone)
      throw std::invalid_argument(fmt::format("simulate: worker {} sends tag {} to worker {}, which never receives it",
                                              gr.worker, x.tag, op.peer));
    if (gr.dc != groups[dst].dc && ctx_.link_of[gr.dc][groups[dst].dc] == kNoLink)
      throw std::invalid_argument(fmt::format("simulate: lab {} has no WAN link from DC {} to DC {}", topo.name,
                                              topo.dcs[gr.dc].name, topo.dcs[groups[dst].dc].name));
  }
}

Nanos Workers::needed_at(std::uint32_t slot) {
  if (needed_at_.empty()) needed_at_.assign(slot_owner.size(), kNotYet);
  if (needed_at_[slot] == kNotYet) {
    // Every slot of the group at once, in one pass over its program (one call of
    // compute_before() per slot would scan the program again each time: quadratic in
    // micro-batches).
    const auto& g = groups[slot_owner[slot]];
    const auto each = workload::compute_before_each(ctx_.plan, g.worker);
    for (std::size_t i = 0; i + 1 < each.size(); ++i) needed_at_[g.slot_base + i] = each[i];
  }
  return needed_at_[slot];
}

}  // namespace wanlab::sim
