#pragma once
// Real compute for a stage worker: the stage's GEMMs (program::stage_gemms) run on a CUDA
// GPU through cuBLAS. This header includes no CUDA header, so code built without CUDA uses
// it too: there list_gpus() is empty and GpuCompute::open throws "built without CUDA".
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "wanlab/common/program.hpp"

namespace wanlab::gpu {

struct GpuInfo {
  int index = 0;            // CUDA device ordinal (after CUDA_VISIBLE_DEVICES)
  std::string name;         // e.g. "NVIDIA H100 80GB HBM3"
  double sm_clock_ghz = 0;  // peak SM clock
  std::size_t memory_bytes = 0;
  int cc_major = 0, cc_minor = 0;  // compute capability, e.g. 9.0
  bool operator==(const GpuInfo&) const = default;
};

/// Whether this build has the CUDA path (WANLAB_HAVE_CUDA at configure time).
bool built_with_cuda();

/// The GPUs this process can use, probed once per process. Empty without CUDA or without a
/// device; never throws for that: gpu_unavailable_reason() says why.
std::vector<GpuInfo> list_gpus();
/// Why list_gpus() is empty ("built without CUDA", "no CUDA device: cudaGetDeviceCount:
/// ..."); "" when there are GPUs.
std::string gpu_unavailable_reason();

/// One worker's handle on one GPU: its own CUDA stream, cuBLAS handle, events and buffers.
/// Not thread-safe: one GpuCompute per worker thread; several may share a device (each has
/// its own buffers, so their memory adds up).
class GpuCompute {
 public:
  /// Throws std::runtime_error with the reason: no CUDA, no such device, or the failed
  /// CUDA/cuBLAS call.
  static std::unique_ptr<GpuCompute> open(int device);
  ~GpuCompute();
  GpuCompute(const GpuCompute&) = delete;
  GpuCompute& operator=(const GpuCompute&) = delete;

  const GpuInfo& info() const;

  /// Allocates the buffers `shape` needs and runs its forward and backward GEMMs once,
  /// untimed (loads cuBLAS kernels, picks algorithms), so that later run() calls on this
  /// shape neither allocate nor load. Optional: run() does the allocation itself.
  void prepare(const program::StageShape& shape);

  /// Runs the GEMMs of one micro-batch of `pass` (forward or backward, else
  /// std::invalid_argument) on this worker's stream and blocks until they are done.
  /// Returns the GPU time between CUDA events recorded around them. Buffers are allocated
  /// on the first call for a shape and reused; a CUDA or cuBLAS failure throws
  /// std::runtime_error naming the call.
  std::chrono::nanoseconds run(const program::StageShape& shape, program::OpKind pass);

  /// FLOPs per second over the last runs (up to 16, any shape or pass): their FLOPs over
  /// their summed GPU time. 0 before the first run.
  double measured_flops_per_s() const;

 private:
  struct Impl;
  explicit GpuCompute(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace wanlab::gpu
