#include "wanlab/workload/cost.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace wanlab::workload {
namespace {

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return (a + b - 1) / b;
}

// Per layer: attention QKV h x (h + 2 kv d) and output h x h, MLP 2 or 3 matrices h x f,
// two norms of h. `tp` shards the matrices (an FFN that does not divide is padded, as in
// program::stage_gemms) and replicates the norms.
std::uint64_t layer_params(const ModelSpec& m, std::uint64_t tp) {
  const std::uint64_t h = static_cast<std::uint64_t>(m.hidden);
  const std::uint64_t d = h / static_cast<std::uint64_t>(m.heads);
  const std::uint64_t kv = static_cast<std::uint64_t>(m.kv_heads);
  const std::uint64_t attention = (h * (h + 2 * kv * d) + h * h) / tp;
  const std::uint64_t mlp = (m.gated_mlp ? 3 : 2) * h * ceil_div(static_cast<std::uint64_t>(m.ffn_hidden), tp);
  return attention + mlp + 2 * h;
}

// Token embedding or LM head: vocab x h, split over the vocabulary (padded to tp).
std::uint64_t vocab_params(const ModelSpec& m, std::uint64_t tp) {
  return ceil_div(static_cast<std::uint64_t>(m.vocab), tp) * static_cast<std::uint64_t>(m.hidden);
}

}  // namespace

std::vector<int> split_layers(int layers, int pp) {
  if (pp < 1 || layers < pp)
    throw std::invalid_argument(fmt::format("cannot split {} layers into {} stages", layers, pp));
  std::vector<int> out(static_cast<std::size_t>(pp), layers / pp);
  for (int s = 0; s < layers % pp; ++s) ++out[static_cast<std::size_t>(s)];
  return out;
}

std::uint64_t layer_parameters(const ModelSpec& model) {
  return layer_params(model, 1);
}

std::uint64_t model_parameters(const ModelSpec& model) {
  return static_cast<std::uint64_t>(model.layers) * layer_parameters(model) + 2 * vocab_params(model, 1) +
         static_cast<std::uint64_t>(model.hidden);
}

std::uint64_t activation_bytes(const ModelSpec& model, int micro_batch_size) {
  return static_cast<std::uint64_t>(micro_batch_size) * static_cast<std::uint64_t>(model.seq_len) *
         static_cast<std::uint64_t>(model.hidden) * static_cast<std::uint64_t>(dtype_bytes(model.dtype));
}

std::vector<int> stage_layers(const Scenario& scenario) {
  return scenario.layers_per_stage.empty() ? split_layers(scenario.model.layers, scenario.parallelism.pp)
                                           : scenario.layers_per_stage;
}

std::vector<StageCost> stage_costs(const ModelSpec& m, const Parallelism& par, int micro_batch_size,
                                   const std::vector<int>& given) {
  const auto layers = given.empty() ? split_layers(m.layers, par.pp) : given;
  int sum = 0;
  for (int n : layers) sum += n;
  if (static_cast<int>(layers.size()) != par.pp || sum != m.layers ||
      std::any_of(layers.begin(), layers.end(), [](int n) { return n < 1; }))
    throw std::invalid_argument(
        fmt::format("stage_costs: {} layers per stage summing to {} for pp {} and {} layers", layers.size(), sum,
                    par.pp, m.layers));
  const auto tp = static_cast<std::uint64_t>(par.tp);
  const auto bytes = static_cast<std::uint64_t>(dtype_bytes(m.dtype));
  std::vector<StageCost> out;
  int first = 0;
  for (int s = 0; s < par.pp; ++s) {
    StageCost c;
    c.stage = s;
    c.first_layer = first;
    c.layers = layers[static_cast<std::size_t>(s)];
    first += c.layers;
    c.embedding = s == 0;
    c.lm_head = s == par.pp - 1;

    const auto n = static_cast<std::uint64_t>(c.layers);
    c.parameters = n * layer_params(m, 1);
    c.parameters_per_gpu = n * layer_params(m, tp);
    if (c.embedding) {
      c.parameters += vocab_params(m, 1);
      c.parameters_per_gpu += vocab_params(m, tp);
    }
    if (c.lm_head) {
      const auto norm = static_cast<std::uint64_t>(m.hidden);
      c.parameters += vocab_params(m, 1) + norm;
      c.parameters_per_gpu += vocab_params(m, tp) + norm;
    }

    c.shape = program::StageShape{.layers = c.layers,
                                  .tokens = static_cast<std::int64_t>(micro_batch_size) * m.seq_len,
                                  .hidden = m.hidden,
                                  .ffn_hidden = m.ffn_hidden,
                                  .heads = m.heads,
                                  .kv_heads = m.kv_heads,
                                  .seq_len = m.seq_len,
                                  .vocab = c.lm_head ? m.vocab : 0,
                                  .gated_mlp = m.gated_mlp,
                                  .tp = par.tp};
    c.forward_flops = program::gemm_flops(program::stage_gemms(c.shape, program::OpKind::forward));
    c.backward_flops = program::gemm_flops(program::stage_gemms(c.shape, program::OpKind::backward));
    c.optimizer_flops = kOptimizerFlopsPerParameter * static_cast<double>(c.parameters_per_gpu);
    c.activation_bytes = c.lm_head ? 0 : activation_bytes(m, micro_batch_size);
    c.gradient_bytes_per_gpu = c.parameters_per_gpu * bytes;
    out.push_back(c);
  }
  return out;
}

}  // namespace wanlab::workload
