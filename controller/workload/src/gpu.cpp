#include "wanlab/workload/gpu.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace wanlab::workload {

const std::vector<GpuSpec>& gpu_specs() {
  // A100 SXM: 312 TFLOP/s bf16, 19.5 fp32. H100 SXM: 989 bf16, 67 fp32 (dense, no sparsity).
  // bf16 GEMM MFU: bench/gpu_check.sh on an NVIDIA H200 (driver 580.159, CUDA 13.0), the
  // minimax fit over every stage shape of the shipped scenarios (measured 0.54 to 0.64;
  // bench/results/2026-11-27-gpu-check.md). The H100 SXM has the H200's SMs and clocks.
  static constexpr std::string_view kH200 = "NVIDIA H200, 2026-11-27";
  static const std::vector<GpuSpec> specs{
      {"A100", 312e12, 19.5e12, std::nullopt, ""},
      {"H100", 989e12, 67e12, 0.59, kH200},
      {"H200", 989e12, 67e12, 0.59, kH200},
  };
  return specs;
}

const GpuSpec& gpu_spec(std::string_view kind) {
  for (const auto& s : gpu_specs())
    if (s.kind == kind) return s;
  throw std::invalid_argument(fmt::format("no FLOP/s figures for GPU kind \"{}\"", kind));
}

double peak_flops(std::string_view kind, Dtype dtype) {
  const auto& s = gpu_spec(kind);
  return dtype == Dtype::fp32 ? s.peak_fp32_flops : s.peak_bf16_flops;
}

double default_mfu(std::string_view kind, Dtype dtype) {
  const auto& s = gpu_spec(kind);
  return dtype != Dtype::fp32 && s.measured_bf16_mfu ? *s.measured_bf16_mfu : kUnmeasuredMfu;
}

double effective_flops(std::string_view kind, Dtype dtype, std::optional<double> mfu) {
  return peak_flops(kind, dtype) * mfu.value_or(default_mfu(kind, dtype));
}

}  // namespace wanlab::workload
