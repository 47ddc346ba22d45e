// Operands get random values rather than zeros or leftovers: a GEMM over zeros toggles
// fewer bits, draws less power and so keeps a higher clock than training does.
#include <cuda_bf16.h>

#include "fill.hpp"

namespace wanlab::gpu::detail {
namespace {

__device__ std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

__global__ void fill_uniform_bf16_kernel(__nv_bfloat16* out, std::size_t count, std::uint64_t seed) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    const auto bits = static_cast<std::uint32_t>(splitmix64(seed ^ i) >> 40);  // 24 random bits
    const float unit = static_cast<float>(bits) * (1.0f / 16777216.0f);        // [0, 1)
    out[i] = __float2bfloat16(2.0f * unit - 1.0f);
  }
}

}  // namespace

cudaError_t fill_uniform_bf16(void* out, std::size_t count, std::uint64_t seed, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  constexpr unsigned threads = 256;
  constexpr std::size_t max_blocks = 4096;  // grid-stride loop covers the rest
  const std::size_t wanted = (count + threads - 1) / threads;
  const auto blocks = static_cast<unsigned>(wanted < max_blocks ? wanted : max_blocks);
  fill_uniform_bf16_kernel<<<blocks, threads, 0, stream>>>(static_cast<__nv_bfloat16*>(out), count, seed);
  return cudaGetLastError();
}

}  // namespace wanlab::gpu::detail
