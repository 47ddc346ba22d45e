#pragma once
// A scenario on a lab: where every worker runs, what each stage costs, and the program each
// worker executes every iteration (wanlab/common/program.hpp has the op semantics).
//
// Per worker (stage s, replica d, TP rank t), one iteration:
//   - the pipeline schedule's forwards and backwards of the micro-batches (GPipe: all
//     forwards, then all backwards; 1F1B: Megatron's non-interleaved schedule; interleaved
//     1F1B: the same per model chunk, chunks wrapping from the last stage to the first;
//     ZB-H1: backwards split into input- and weight-gradient passes; pipeline_steps);
//   - before a forward, except on the first stage: recv the activations from (s-1, d, t);
//     after it, except on the last stage: send them to (s+1, d, t);
//   - before a backward, except on the last stage: recv the activation gradients from
//     (s+1, d, t); after it, except on the first stage: send them to (s-1, d, t);
//   - after the backwards, with dp > 1: the all-reduce of the gradients among the
//     replicas (s, *, t) (allreduce_ops()); then the optimizer step.
//   - with the scenario's memory.recompute, each backward's FLOPs include its forward's again.
// Each TP rank carries 1/tp of a stage boundary's tensor (the receiving TP group gathers
// the rest inside its node, which is not modeled). Bytes on the wire are multiplied by the
// scenario's scale and rounded, at least 1.
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "wanlab/common/program.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/workload/cost.hpp"
#include "wanlab/workload/placement.hpp"
#include "wanlab/workload/scenario.hpp"

namespace wanlab::workload {

/// Tags of the pipeline messages of micro-batch `mb`, unique per direction per iteration.
constexpr std::uint32_t activation_tag(int mb) {
  return 2 * static_cast<std::uint32_t>(mb);
}
constexpr std::uint32_t gradient_tag(int mb) {
  return 2 * static_cast<std::uint32_t>(mb) + 1;
}

/// The order in which one stage runs its micro-batches: (forward or backward, micro-batch).
/// GPipe and 1F1B only (pipeline_steps covers every schedule).
std::vector<std::pair<program::OpKind, int>> pipeline_order(Schedule schedule, int pp, int stage, int micro_batches);

/// Tags with model chunks (interleaved schedules): the boundary after chunk `chunk` of a
/// stage (to the next stage's same chunk, or from the last stage to the first's next
/// chunk) carries tags 2 (chunk x micro_batches + mb) and that + 1; chunk 0 is as above.
constexpr std::uint32_t activation_tag(int mb, int chunk, int micro_batches) {
  return activation_tag(chunk * micro_batches + mb);
}
constexpr std::uint32_t gradient_tag(int mb, int chunk, int micro_batches) {
  return gradient_tag(chunk * micro_batches + mb);
}

/// One compute step of a stage's schedule.
struct PipelineStep {
  program::OpKind kind = program::OpKind::forward;  // forward or backward
  int microbatch = 0;
  int chunk = 0;  // interleaved-1f1b: the model chunk; 0 otherwise
  program::BackwardPart part = program::BackwardPart::full;  // zb-h1: input, then weight
  bool operator==(const PipelineStep&) const = default;
};

/// The steps of stage `stage` in order, for every schedule:
///   gpipe, 1f1b: as pipeline_order;
///   interleaved-1f1b (`virtual_stages` v >= 2, micro_batches % pp == 0): Megatron-LM's
///     interleaved schedule; forward k runs chunk (k mod pv) / p of micro-batch
///     (k / pv) p + k mod p, backward k the same micro-batch's chunk v-1-(that); warm-up
///     2 (pp - stage - 1) + (v - 1) pp forwards (all of them when micro_batches == pp),
///     then one forward and one backward alternately, then the remaining backwards;
///   zb-h1: each backward split into its input-gradient pass (B) and its weight-gradient
///     pass (W); the order is the greedy list schedule of F, B and W at equal cost with no
///     communication time: a free stage runs a ready B, else a ready F while fewer than
///     pp - stage micro-batches wait for their B (1F1B's bound), else the oldest W; and a
///     W first once more than pp - 1 of them wait.
std::vector<PipelineStep> pipeline_steps(Schedule schedule, int virtual_stages, int pp, int stage, int micro_batches);

struct Plan {
  Scenario scenario;
  core::Topology topology;
  std::vector<WorkerPlacement> workers;  // by worker id
  std::vector<StageCost> stages;
  std::vector<program::WorkerProgram> programs;  // by worker id
  std::vector<double> effective_flops;           // by worker id: its GPU's peak x mfu
  std::uint64_t pipeline_message_bytes = 0;      // one send between stages (one TP rank's share), scaled

  /// Payload one directed DC pair carries in one iteration.
  struct LinkBytes {
    std::size_t src = 0;
    std::size_t dst = 0;
    std::uint64_t bytes = 0;
    bool operator==(const LinkBytes&) const = default;
  };
  /// Every DC pair with traffic, sorted by (src, dst): pipeline messages between stages in
  /// different DCs, and all-reduce steps between replicas in different DCs.
  std::vector<LinkBytes> wan_bytes_per_iteration;

  std::uint64_t wan_bytes_total() const;
};

/// Wire bytes per payload byte on a WAN or LAN link: 1448-byte TCP segments (timestamps on)
/// in 1514-byte frames. The arbiter and the link counters count wire bytes.
inline constexpr double kWireOverhead = 1514.0 / 1448.0;

/// When worker `worker` reaches op `index` of its program if nothing made it wait: the
/// modeled compute of the ops before it, in ns from the iteration's start. Orders WAN
/// transfers by when their receiver needs them (arbiter::TransferSpec::needed_at), in the
/// lab and in the simulator alike.
std::int64_t compute_before(const Plan& plan, int worker, std::size_t index);
/// compute_before() for every index of the worker's program at once, in one pass (element
/// i for op i, one more for its end).
std::vector<std::int64_t> compute_before_each(const Plan& plan, int worker);

/// The bytes a scenario puts on the wire for `bytes` of payload: x scale, rounded, at least 1.
std::uint64_t scaled_bytes(const Scenario& scenario, std::uint64_t bytes);
/// bytes x scale, rounded, at least 1.
std::uint64_t scaled_bytes(std::uint64_t bytes, double scale);

/// Places the workers and builds their programs. Throws core::ConfigError when the
/// scenario does not fit the lab (see place_workers).
Plan build_plan(const Scenario& scenario, const core::Topology& topo);

/// The all-reduce ops worker `w` runs after its backwards, for `gradient_bytes` (unscaled)
/// of gradients: with AllReduce::ring one ring over the stage's replicas in replica order;
/// with AllReduce::hierarchical (scenario.hpp) a ring over the replicas in w's DC (if
/// more than one) on the whole buffer, then a ring across DCs among the replicas at w's
/// position in their DCs (DCs in order of their first replica) on bytes/m, m the replicas
/// per DC. Rings inside one DC scale by lan_scale, others by scale. Needs `plan.workers`.
/// Throws core::ConfigError ("/allreduce") when the hierarchical all-reduce's DCs hold
/// different numbers of the stage's replicas.
std::vector<program::Op> allreduce_ops(const Plan& plan, const WorkerPlacement& w, std::uint64_t gradient_bytes);

}  // namespace wanlab::workload
