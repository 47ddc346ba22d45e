#pragma once
// Peak throughput of the GPU kinds a lab can hold (core::known_gpu_kinds()), for modeled
// compute: a stage's op takes flops / (peak x MFU).
#include <optional>
#include <string_view>
#include <vector>

#include "wanlab/workload/scenario.hpp"

namespace wanlab::workload {

struct GpuSpec {
  std::string_view kind;       // "A100", "H100", "H200"
  double peak_bf16_flops = 0;  // dense tensor-core FLOP/s, also for fp16
  double peak_fp32_flops = 0;  // dense FP32 (no tensor cores, no TF32) FLOP/s
  /// MFU of a stage's bf16 GEMMs (cuBLAS, the cuda compute mode's kernels) where measured
  /// (wanlab-gpu-probe, bench/gpu_check.sh); nullopt: not measured, kUnmeasuredMfu.
  std::optional<double> measured_bf16_mfu;
  std::string_view measured_on;  // the device and date of that figure
};

/// The default MFU where none was measured (the kind's fp32 work, or a kind nobody has
/// probed): a typical whole-step MFU of large-model training.
inline constexpr double kUnmeasuredMfu = 0.4;

/// One entry per core::known_gpu_kinds(), same order. Figures from the vendors' data sheets
/// (SXM parts; H200 has H100's compute and more memory).
const std::vector<GpuSpec>& gpu_specs();
/// Throws std::invalid_argument for a kind the table lacks.
const GpuSpec& gpu_spec(std::string_view kind);

/// Peak FLOP/s of `kind` in `dtype`.
double peak_flops(std::string_view kind, Dtype dtype);
/// The MFU a scenario without gpu.mfu gets on `kind`: the measured bf16 GEMM MFU for bf16
/// (and fp16) where there is one, else kUnmeasuredMfu.
double default_mfu(std::string_view kind, Dtype dtype);
/// What a stage achieves: peak x mfu (nullopt: default_mfu).
double effective_flops(std::string_view kind, Dtype dtype, std::optional<double> mfu);

}  // namespace wanlab::workload
