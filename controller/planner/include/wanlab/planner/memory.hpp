#pragma once
// Whether a plan fits in its GPUs' memory. One function, so the workload layer's memory
// model replaces it in one place when it lands; until then the estimate is:
//
//   per GPU of stage s:  16 bytes x the stage's parameters per GPU (1/tp of the stage:
//                        bf16 weights 2 + bf16 gradients 2 + Adam in mixed precision,
//                        fp32 master weights 4 + two fp32 moments 8)
//                      + activations: 34 x seq_len x micro_batch_size x hidden / tp bytes per
//                        layer of the stage per micro-batch in flight (tensor and sequence
//                        parallel with selective recomputation, Korthikanti et al. 2022);
//                        in flight: GPipe all the micro-batches, 1F1B min(micro-batches,
//                        pp - s)
//   fits when the largest stage's total is at most 80 GB (the 80 GB parts: A100, H100).
#include <cstdint>

#include "wanlab/workload/scenario.hpp"

namespace wanlab::planner {

inline constexpr double kGpuMemoryBytes = 80e9;
inline constexpr double kStateBytesPerParameter = 16;
inline constexpr double kActivationBytesPerLayerToken = 34;  // x hidden / tp, per sequence token

struct MemoryUse {
  double peak_bytes = 0;  // the stage that needs most, per GPU
  int stage = 0;          // which stage that is
  double state_bytes = 0;       // its weights, gradients and optimizer state
  double activation_bytes = 0;  // its activations in flight
  bool fits() const { return peak_bytes <= kGpuMemoryBytes; }
};

/// Per GPU, as above. Requires a valid split (1 <= pp <= layers, tp divides heads).
MemoryUse memory_use(const workload::ModelSpec& model, const workload::Parallelism& par, workload::Schedule schedule,
                     int micro_batches, int micro_batch_size);

}  // namespace wanlab::planner
