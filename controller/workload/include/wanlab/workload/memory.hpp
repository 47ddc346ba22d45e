#pragma once
// How much GPU memory a plan needs, per stage and GPU, against what its GPU kind has.
//
// Per GPU of stage s (one TP shard, P = its parameters, cost.hpp's parameters_per_gpu):
//   weights     P x dtype bytes
//   gradients   P x dtype bytes
//   optimizer   P x optimizer_bytes_per_parameter (default: mixed-precision Adam, fp32
//               master weights, momentum and variance, 12 bytes; 8 with fp32 weights),
//               / dp with the distributed optimizer (ZeRO-1)
//   activations the stage's peak of stored activations over its schedule: per (micro-batch,
//               layer) held from its forward until its backward frees it (ZB-H1: until the
//               weight-gradient pass), with T = micro_batch_size x seq_len tokens, b = dtype
//               bytes, d = hidden / heads, f = ffn_hidden, t = tp, flash attention (no
//               s x s scores stored), r = t with sequence parallelism (the default), else 1:
//                 4 b T h / r                       norm inputs and outputs
//               + b T (2h + 2 kv_heads d) / t       Q, K, V and the attention output
//               + b T (3f gated or 2f) / t          MLP intermediates
//               + 4 T heads / t                     softmax statistics (fp32)
//               the last stage adds 2 b T h / r (final norm) + 4 T vocab / t (fp32 logits);
//               with full recomputation only each layer's input, b T h, is held, plus one
//               layer's full activations (and the logits on the last stage) as working set.
//   reserve     memory.reserve_bytes (CUDA context, allocator slack; default 0)
// against the GPU kind's memory: A100 80 GiB, H100 80 GiB, H200 141 GiB.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "wanlab/core/topology.hpp"
#include "wanlab/workload/scenario.hpp"

namespace wanlab::workload {

inline constexpr std::uint64_t kGiB = 1024ull * 1024 * 1024;

/// What a stage holds at its schedule's peak, taken after each forward: layer_units sums
/// 2 x chunk layers over the held (micro-batch, chunk) forwards (halved once a zero-bubble
/// input pass ran), head_units counts 2 per held micro-batch of the last chunk when the
/// stage has the LM head, in_flight the most forwards held.
struct SchedulePeak {
  std::uint64_t layer_units = 0;
  std::uint64_t head_units = 0;
  int in_flight = 0;
  bool operator==(const SchedulePeak&) const = default;
};

/// The peak of stage `stage` for `chunk_layers` (v entries), memoized per (schedule, v, pp,
/// stage, micro_batches): the schedule's steps are walked once per key, not per call.
SchedulePeak schedule_peak(Schedule schedule, int virtual_stages, int pp, int stage, int micro_batches,
                           const std::vector<int>& chunk_layers, bool has_head);
/// The same, by walking pipeline_steps() every call (the reference schedule_peak matches).
SchedulePeak schedule_peak_stepwise(Schedule schedule, int virtual_stages, int pp, int stage, int micro_batches,
                                    const std::vector<int>& chunk_layers, bool has_head);

/// The memory of one GPU of `kind` (core::known_gpu_kinds()); throws std::invalid_argument
/// for a kind the table lacks.
std::uint64_t gpu_memory_bytes(std::string_view kind);

/// The optimizer state bytes per parameter the scenario implies: its
/// memory.optimizer_bytes_per_parameter, else 12 (bf16/fp16, mixed-precision Adam) or 8 (fp32).
double optimizer_bytes_per_parameter(const Scenario& scenario);

/// Stored activation bytes of one micro-batch through one layer on one GPU (the formula
/// above); `sequence_parallel` splits the norms' part tp ways.
std::uint64_t layer_activation_bytes(const ModelSpec& model, int micro_batch_size, int tp,
                                     bool sequence_parallel = false);

/// What one GPU of a stage needs, in bytes.
struct StageMemory {
  int stage = 0;
  std::uint64_t weights = 0;
  std::uint64_t gradients = 0;
  std::uint64_t optimizer = 0;
  std::uint64_t activations = 0;
  std::uint64_t reserve = 0;
  /// The most (micro-batch, model chunk) forwards whose activations the stage holds at once
  /// (1F1B: pp - stage; GPipe: micro_batches; interleaved: chunks, each 1/v of the stage).
  int peak_in_flight = 0;
  std::uint64_t needed() const { return weights + gradients + optimizer + activations + reserve; }
};

/// One entry per stage; depends on the scenario only (not on the GPU kind).
std::vector<StageMemory> stage_memory(const Scenario& scenario);

/// A stage's need against the smallest GPU among those that run it.
struct StageFit {
  StageMemory memory;
  std::string gpu;            // the kind of that GPU
  std::string dc;             // its DC
  std::uint64_t available = 0;
  bool fits() const { return memory.needed() <= available; }
};

/// Every stage against the GPUs that run it: `stage_dcs[s]` lists the DC index of each of
/// stage s's GPUs (placement order), or for a single kind, use memory_fit(scenario, kind).
std::vector<StageFit> memory_fit(const Scenario& scenario, const core::Topology& topo,
                                 const std::vector<std::vector<std::size_t>>& stage_dcs);
/// Every stage on GPUs of one `kind` (for plan searches without a placement).
std::vector<StageFit> memory_fit(const Scenario& scenario, std::string_view kind);

bool fits(const std::vector<StageFit>& fit);

/// One line per stage: "stage 0 needs 95.2 GiB per GPU (weights 20.1 + gradients 20.1 +
/// optimizer 40.2 + activations 14.8 GiB, 4 micro-batches in flight) of the 80.0 GiB of an
/// H100 in DC a" (every known kind takes "an").
std::string describe(const StageFit& fit);

/// Throws core::ConfigError naming the scenario file and "/parallelism" with every stage
/// that does not fit (needed vs available per GPU) and what would make it fit.
void check_memory(const Scenario& scenario, const std::vector<StageFit>& fit);

}  // namespace wanlab::workload
