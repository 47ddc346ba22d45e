// Stage accounting: parameters, FLOPs and bytes of each stage against hand-computed values,
// the presets against the published parameter counts, and the GPU table.
#include <catch2/catch.hpp>

#include <algorithm>

#include "wanlab/core/topology.hpp"
#include "wanlab/workload/cost.hpp"
#include "wanlab/workload/gpu.hpp"

using namespace wanlab;
using namespace wanlab::workload;

namespace {

// 3 layers, hidden 64, 4 heads (d 16), 2 KV heads, FFN 128 gated, seq 32, vocab 100, bf16.
ModelSpec tiny() {
  ModelSpec m;
  m.layers = 3;
  m.hidden = 64;
  m.heads = 4;
  m.kv_heads = 2;
  m.ffn_hidden = 128;
  m.gated_mlp = true;
  m.seq_len = 32;
  m.vocab = 100;
  return m;
}

}  // namespace

TEST_CASE("layers split evenly, earlier stages take the extra ones", "[unit][workload][cost]") {
  CHECK(split_layers(32, 3) == std::vector<int>{11, 11, 10});
  CHECK(split_layers(10, 4) == std::vector<int>{3, 3, 2, 2});
  CHECK(split_layers(8, 8) == std::vector<int>(8, 1));
  CHECK_THROWS(split_layers(2, 3));
}

TEST_CASE("stage costs of a small model, by hand", "[unit][workload][cost]") {
  // Per layer, whole: QKV 64 x (64 + 2*2*16) = 8192, output 64*64 = 4096,
  //   MLP 3*64*128 = 24576, norms 2*64 = 128                       -> 36992.
  // Per layer, one of tp 2: (8192 + 4096)/2 = 6144, 3*64*64 = 12288, 128 -> 18560.
  // Embedding and LM head: 100*64 = 6400 each, 50*64 = 3200 per GPU; final norm 64.
  // pp 2 splits the 3 layers 2 + 1.
  //   stage 0: 2*36992 + 6400 = 80384;       per GPU 2*18560 + 3200 = 40320
  //   stage 1: 36992 + 6400 + 64 = 43456;     per GPU 18560 + 3200 + 64 = 21824
  CHECK(layer_parameters(tiny()) == 36992);
  CHECK(model_parameters(tiny()) == 80384 + 43456);

  const auto stages = stage_costs(tiny(), Parallelism{2, 3, 2}, 2);
  REQUIRE(stages.size() == 2);
  const auto& s0 = stages[0];
  const auto& s1 = stages[1];
  CHECK(s0.first_layer == 0);
  CHECK(s0.layers == 2);
  CHECK(s1.first_layer == 2);
  CHECK(s1.layers == 1);
  CHECK(s0.embedding);
  CHECK_FALSE(s0.lm_head);
  CHECK(s1.lm_head);
  CHECK(s0.parameters == 80384);
  CHECK(s0.parameters_per_gpu == 40320);
  CHECK(s1.parameters == 43456);
  CHECK(s1.parameters_per_gpu == 21824);

  // FLOPs per GPU per micro-batch, T = 2*32 = 64 (see test_workload_program.cpp for the
  // per-GEMM arithmetic): a layer is 2621440, the LM head 2*64*64*50 = 409600.
  CHECK(s0.forward_flops == 2 * 2621440.0);
  CHECK(s0.backward_flops == 2 * 2 * 2621440.0);
  CHECK(s1.forward_flops == 2621440.0 + 409600.0);
  CHECK(s1.backward_flops == 2 * (2621440.0 + 409600.0));
  CHECK(s0.forward_flops == program::gemm_flops(program::stage_gemms(s0.shape, program::OpKind::forward)));
  CHECK(s1.backward_flops == program::gemm_flops(program::stage_gemms(s1.shape, program::OpKind::backward)));
  CHECK(s0.shape.vocab == 0);
  CHECK(s1.shape.vocab == 100);
  CHECK(s0.shape.tokens == 64);

  // Activations: 2 samples x 32 tokens x 64 x 2 bytes = 8192, whole; none after the last stage.
  CHECK(activation_bytes(tiny(), 2) == 8192);
  CHECK(s0.activation_bytes == 8192);
  CHECK(s1.activation_bytes == 0);
  // Gradients: parameters per GPU x 2 bytes; optimizer 12 FLOPs per parameter per GPU.
  CHECK(s0.gradient_bytes_per_gpu == 80640);
  CHECK(s1.gradient_bytes_per_gpu == 43648);
  CHECK(s0.optimizer_flops == 12.0 * 40320);

  ModelSpec fp32 = tiny();
  fp32.dtype = Dtype::fp32;
  CHECK(activation_bytes(fp32, 2) == 16384);
  CHECK(stage_costs(fp32, Parallelism{2, 1, 2}, 2)[1].gradient_bytes_per_gpu == 4 * 21824);
}

TEST_CASE("presets match the published parameter counts", "[unit][workload][cost]") {
  // Untied LM head, no biases: exactly the Hugging Face counts of the Llama models.
  CHECK(model_parameters(*find_preset("7b")) == 6'738'415'616ULL);
  CHECK(model_parameters(*find_preset("13b")) == 13'015'864'320ULL);
  CHECK(model_parameters(*find_preset("8b")) == 8'030'261'248ULL);
  CHECK(model_parameters(*find_preset("70b")) == 70'553'706'496ULL);
  // GPT-3 XL: 1.3B with tied embeddings; the untied head adds vocab x hidden = 0.1B.
  CHECK(model_parameters(*find_preset("1.3b")) == 1'413'912'576ULL);
  CHECK(find_preset("7B") == nullptr);
  CHECK(default_ffn_hidden(4096, true) == 11008);  // Llama-2-7B
  CHECK(default_ffn_hidden(5120, true) == 13824);  // Llama-2-13B
  CHECK(default_ffn_hidden(2048, false) == 8192);
}

TEST_CASE("GPU table covers the lab's GPU kinds", "[unit][workload][cost]") {
  for (const auto& kind : core::known_gpu_kinds()) {
    INFO(kind);
    CHECK(gpu_spec(kind).peak_bf16_flops > 0);
  }
  CHECK(gpu_specs().size() == core::known_gpu_kinds().size());
  CHECK(peak_flops("H100", Dtype::bf16) == 989e12);
  CHECK(peak_flops("A100", Dtype::fp16) == 312e12);
  CHECK(peak_flops("H200", Dtype::bf16) == 989e12);
  CHECK(effective_flops("H100", Dtype::bf16, 0.5) == 494.5e12);
  CHECK(peak_flops("H100", Dtype::fp32) < peak_flops("H100", Dtype::bf16));
  CHECK_THROWS_AS(gpu_spec("V100"), std::invalid_argument);
}

TEST_CASE("a scenario without gpu.mfu gets the GPU table's measured MFU where there is one",
          "[unit][workload][cost]") {
  // H100 and H200: the bf16 GEMM MFU fitted on an H200 (bench/results/2026-11-27-gpu-check.md).
  for (const char* kind : {"H100", "H200"}) {
    INFO(kind);
    REQUIRE(gpu_spec(kind).measured_bf16_mfu.has_value());
    CHECK(default_mfu(kind, Dtype::bf16) == 0.59);
    CHECK(default_mfu(kind, Dtype::fp16) == 0.59);  // the same tensor cores
    CHECK(default_mfu(kind, Dtype::fp32) == kUnmeasuredMfu);
    CHECK_FALSE(gpu_spec(kind).measured_on.empty());
    CHECK(effective_flops(kind, Dtype::bf16, std::nullopt) == Approx(989e12 * 0.59));
  }
  CHECK_FALSE(gpu_spec("A100").measured_bf16_mfu.has_value());
  CHECK(default_mfu("A100", Dtype::bf16) == kUnmeasuredMfu);
  CHECK(effective_flops("A100", Dtype::bf16, std::nullopt) == Approx(312e12 * 0.4));
  // A scenario's own figure wins.
  CHECK(effective_flops("H200", Dtype::bf16, 0.4) == Approx(989e12 * 0.4));
}
