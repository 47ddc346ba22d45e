// The words of a scenario's choices (dtype, schedule, all-reduce, compute and send mode),
// the policies the arbiter knows, and the model presets.
#include <string>
#include <string_view>
#include <vector>

#include "wanlab/arbiter/arbiter.hpp"
#include "wanlab/workload/scenario.hpp"

namespace wanlab::workload {
namespace {

ModelSpec preset(std::string name, int layers, int hidden, int heads, int kv_heads, int ffn, bool gated, int seq,
                 int vocab) {
  return ModelSpec{std::move(name), layers, hidden, heads, kv_heads, ffn, gated, seq, vocab, Dtype::bf16};
}

}  // namespace

std::string to_string(Dtype dtype) {
  switch (dtype) {
    case Dtype::bf16:
      return "bf16";
    case Dtype::fp16:
      return "fp16";
    case Dtype::fp32:
      return "fp32";
  }
  return "?";
}

int dtype_bytes(Dtype dtype) {
  return dtype == Dtype::fp32 ? 4 : 2;
}

std::string to_string(Schedule schedule) {
  switch (schedule) {
    case Schedule::gpipe:
      return "gpipe";
    case Schedule::one_f_one_b:
      return "1f1b";
    case Schedule::interleaved_1f1b:
      return "interleaved-1f1b";
    case Schedule::zb_h1:
      return "zb-h1";
  }
  return "1f1b";
}

std::string to_string(AllReduce a) { return a == AllReduce::hierarchical ? "hierarchical" : "ring"; }

std::string to_string(ComputeMode mode) {
  return mode == ComputeMode::cuda ? "cuda" : "modeled";
}

std::string to_string(SendMode mode) { return mode == SendMode::rendezvous ? "rendezvous" : "eager"; }

const std::vector<std::string>& known_policies() {
  static const std::vector<std::string> policies = arbiter::policy_names();
  return policies;
}

const std::vector<ModelSpec>& model_presets() {
  // Sources: bench/scenarios/README.md.
  static const std::vector<ModelSpec> presets{
      preset("1.3b", 24, 2048, 16, 16, 8192, false, 2048, 50257),
      preset("7b", 32, 4096, 32, 32, 11008, true, 4096, 32000),
      preset("8b", 32, 4096, 32, 8, 14336, true, 8192, 128256),
      preset("13b", 40, 5120, 40, 40, 13824, true, 4096, 32000),
      preset("70b", 80, 8192, 64, 8, 28672, true, 8192, 128256),
  };
  return presets;
}

const ModelSpec* find_preset(std::string_view name) {
  for (const auto& p : model_presets())
    if (p.preset == name) return &p;
  return nullptr;
}

int default_ffn_hidden(int hidden, bool gated_mlp) {
  if (!gated_mlp) return 4 * hidden;
  // ceil(8 h / 3) rounded up to a multiple of 256.
  const std::int64_t ffn = (8 * static_cast<std::int64_t>(hidden) + 2) / 3;
  return static_cast<int>((ffn + 255) / 256 * 256);
}

}  // namespace wanlab::workload
