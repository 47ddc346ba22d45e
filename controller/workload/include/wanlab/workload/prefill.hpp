#pragma once
// BubbleTea's prefill load on a plan: what one prefill costs (FLOPs per layer, prompt and
// KV-cache bytes), the request arrivals (seeded Poisson or a trace), and which GPUs may run
// prefill (every training GPU, plus the GPUs of dedicated inference nodes).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wanlab/workload/plan.hpp"
#include "wanlab/workload/scenario.hpp"

namespace wanlab::workload {

/// One prefill of `tokens` prompt tokens through the inference model, on one GPU (no
/// tensor parallelism): every layer's GEMMs (program::stage_gemms of one layer with
/// seq_len = tokens) plus the LM head for the last token, which yields the first token.
struct PrefillCost {
  int tokens = 0;
  int layers = 0;
  double flops_per_layer = 0;
  double flops = 0;                 // layers x flops_per_layer + the LM head
  std::uint64_t prompt_bytes = 0;   // token ids, 4 bytes each (unscaled)
  std::uint64_t kv_bytes = 0;       // K and V of every layer: 2 x layers x kv_heads x head_dim x tokens x dtype (unscaled)
};
PrefillCost prefill_cost(const ModelSpec& model, int tokens);

/// Requests of the load, in time order, ids 0.. in that order: a Poisson process of
/// `rate_per_s` with prompt lengths drawn from `prompt` (seeded: same seed, same requests),
/// or the trace's rows (looped when `loop`), up to `horizon_s` seconds from the start.
std::vector<PrefillArrival> prefill_arrivals(const PrefillSpec& spec, std::uint64_t seed, double horizon_s);

/// A GPU that may run prefill.
struct PrefillGpu {
  std::string node;
  std::size_t dc = 0;
  int slot = 0;     // the GPU's index on its node
  int worker = -1;  // the training worker on it; -1: a dedicated inference GPU
  double effective_flops = 0;
  bool operator==(const PrefillGpu&) const = default;
};

struct PrefillPlan {
  PrefillSpec spec;
  std::string loadgen_node;
  std::vector<std::string> decode_nodes;      // as listed (or the load generator's node)
  std::vector<std::string> decode_node_of_dc;  // where a GPU of each DC sends its KV caches
  std::size_t loadgen_dc = 0;
  double bytes_scale = 1;        // multiplies prompt and KV bytes on the wire
  std::vector<PrefillGpu> gpus;  // training GPUs by worker id, then dedicated ones
};

/// Resolves the scenario's prefill section on its plan. Throws core::ConfigError naming
/// the field (an unknown node, an inference node that also hosts training workers).
/// Requires plan.scenario.prefill.
PrefillPlan plan_prefill(const Plan& plan);

/// The load's own fields of summary.json's `prefill` part (the lab's and the simulator's):
/// offered_rate_per_s (0 for a replayed CSV), model, deadline_s, margin, bytes_scale,
/// loadgen, decode.
nlohmann::json prefill_load_summary(const PrefillPlan& plan);

}  // namespace wanlab::workload
