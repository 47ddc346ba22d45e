#pragma once
// Device-side fill of GEMM operands (fill.cu, compiled by nvcc).
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace wanlab::gpu::detail {

/// Enqueues on `stream` a fill of `count` bf16 values at `out` with pseudo-random values in
/// [-1, 1), a function of (seed, index) alone. Returns the launch's error.
cudaError_t fill_uniform_bf16(void* out, std::size_t count, std::uint64_t seed, cudaStream_t stream);

}  // namespace wanlab::gpu::detail
