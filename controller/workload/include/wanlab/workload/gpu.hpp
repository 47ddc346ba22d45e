#pragma once
// Peak throughput of the GPU kinds a lab can hold (core::known_gpu_kinds()), for modeled
// compute: a stage's op takes flops / (peak x MFU).
#include <string_view>
#include <vector>

#include "wanlab/workload/scenario.hpp"

namespace wanlab::workload {

struct GpuSpec {
  std::string_view kind;       // "A100", "H100", "H200"
  double peak_bf16_flops = 0;  // dense tensor-core FLOP/s, also for fp16
  double peak_fp32_flops = 0;  // dense FP32 (no tensor cores, no TF32) FLOP/s
};

/// One entry per core::known_gpu_kinds(), same order. Figures from the vendors' data sheets
/// (SXM parts; H200 has H100's compute and more memory).
const std::vector<GpuSpec>& gpu_specs();
/// Throws std::invalid_argument for a kind the table lacks.
const GpuSpec& gpu_spec(std::string_view kind);

/// Peak FLOP/s of `kind` in `dtype`.
double peak_flops(std::string_view kind, Dtype dtype);
/// What a stage achieves: peak x mfu.
double effective_flops(std::string_view kind, Dtype dtype, double mfu);

}  // namespace wanlab::workload
