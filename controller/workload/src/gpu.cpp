#include "wanlab/workload/gpu.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace wanlab::workload {

const std::vector<GpuSpec>& gpu_specs() {
  // A100 SXM: 312 TFLOP/s bf16, 19.5 fp32. H100 SXM: 989 bf16, 67 fp32 (dense, no sparsity).
  static const std::vector<GpuSpec> specs{
      {"A100", 312e12, 19.5e12},
      {"H100", 989e12, 67e12},
      {"H200", 989e12, 67e12},
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

double effective_flops(std::string_view kind, Dtype dtype, double mfu) {
  return peak_flops(kind, dtype) * mfu;
}

}  // namespace wanlab::workload
