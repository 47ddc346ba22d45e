#pragma once
// What each pipeline stage costs: parameters, FLOPs per micro-batch, and the bytes that
// cross its boundaries. The FLOPs are those of the GEMMs a stage runs
// (program::stage_gemms), so the modeled and the real (cuda) compute agree exactly.
#include <cstdint>
#include <vector>

#include "wanlab/common/program.hpp"
#include "wanlab/workload/scenario.hpp"

namespace wanlab::workload {

/// Adam in mixed precision, per parameter: moment updates, bias corrections, the square
/// root and division, weight decay and the master-weight copy, about 12 FLOPs.
inline constexpr double kOptimizerFlopsPerParameter = 12;

struct StageCost {
  int stage = 0;
  int first_layer = 0;
  int layers = 0;
  bool embedding = false;                    // stage 0 holds the token embedding
  bool lm_head = false;                      // the last stage holds the final norm and the LM head
  std::uint64_t parameters = 0;              // the whole stage, all TP shards
  std::uint64_t parameters_per_gpu = 0;      // one TP shard (norms are replicated, not split)
  program::StageShape shape;                 // what one GPU of the stage computes
  double forward_flops = 0;                  // per GPU per micro-batch
  double backward_flops = 0;                 // per GPU per micro-batch
  double optimizer_flops = 0;                // per GPU per iteration
  std::uint64_t activation_bytes = 0;        // per micro-batch to the next stage, before the TP split; 0 on the last
  std::uint64_t gradient_bytes_per_gpu = 0;  // the buffer the DP all-reduce sums
};

/// Layers per stage, as even as possible; earlier stages take the extra layers.
std::vector<int> split_layers(int layers, int pp);

/// Parameters of one transformer layer (QKV, output, MLP, two norms; no biases).
std::uint64_t layer_parameters(const ModelSpec& model);
/// The whole model: layers, embedding, final norm and an untied LM head.
std::uint64_t model_parameters(const ModelSpec& model);

/// The hidden states of one micro-batch, the tensor a stage boundary carries either way:
/// micro_batch_size x seq_len x hidden x dtype bytes.
std::uint64_t activation_bytes(const ModelSpec& model, int micro_batch_size);

/// One entry per stage. Requires a valid split (as parse_scenario checks). `layers`: the
/// layers of each stage (pp entries summing to model.layers); empty: split_layers.
std::vector<StageCost> stage_costs(const ModelSpec& model, const Parallelism& par, int micro_batch_size,
                                   const std::vector<int>& layers = {});

/// The scenario's layers per stage: its layers_per_stage, else split_layers.
std::vector<int> stage_layers(const Scenario& scenario);

}  // namespace wanlab::workload
