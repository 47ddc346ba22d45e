// GpuCompute on CUDA: cuBLAS GEMMs (bf16 in and out, fp32 accumulate) on a worker's own
// stream, timed with CUDA events. The only file that calls the CUDA runtime and cuBLAS.
#include "wanlab/gpu/gpu_compute.hpp"

#include "wanlab/common/logger.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string_view>
#include <utility>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "fill.hpp"

namespace wanlab::gpu {
namespace {

spdlog::logger& log() {
  static spdlog::logger& logger = named_logger("gpu");
  return logger;
}

std::string error_text(cudaError_t err) {
  return fmt::format("{} ({})", cudaGetErrorName(err), cudaGetErrorString(err));
}

// Errors name the call and the GPU; the text is built only on failure, since the timed path
// checks every call.
[[noreturn]] void fail(cudaError_t err, std::string_view operation) {
  (void)cudaGetLastError();  // clear a non-sticky error so the next call does not report it again
  throw std::runtime_error(fmt::format("{}: {}", operation, error_text(err)));
}

[[noreturn]] void fail(cublasStatus_t status, std::string_view operation) {
  throw std::runtime_error(
      fmt::format("{}: {} ({})", operation, cublasGetStatusName(status), cublasGetStatusString(status)));
}

void check(cudaError_t err, const char* operation, int gpu) {
  if (err != cudaSuccess) fail(err, fmt::format("{} on GPU {}", operation, gpu));
}

void check(cublasStatus_t status, const char* operation, int gpu) {
  if (status != CUBLAS_STATUS_SUCCESS) fail(status, fmt::format("{} on GPU {}", operation, gpu));
}

struct Inventory {
  std::vector<GpuInfo> gpus;
  std::string unavailable_reason;
};

Inventory probe_devices() {
  int count = 0;
  if (const cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess) {
    (void)cudaGetLastError();
    return {{}, "no CUDA device: cudaGetDeviceCount: " + error_text(err)};
  }
  if (count == 0) return {{}, "no CUDA device: cudaGetDeviceCount found none"};
  Inventory inventory;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp props{};
    int clock_khz = 0;
    cudaError_t err = cudaGetDeviceProperties(&props, i);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, i);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return {{}, fmt::format("no usable CUDA device: properties of GPU {}: {}", i, error_text(err))};
    }
    inventory.gpus.push_back(GpuInfo{.index = i,
                                     .name = props.name,
                                     .sm_clock_ghz = clock_khz / 1e6,
                                     .memory_bytes = props.totalGlobalMem,
                                     .cc_major = props.major,
                                     .cc_minor = props.minor});
  }
  return inventory;
}

const Inventory& inventory() {
  static const Inventory probed = probe_devices();  // devices do not change within a process
  return probed;
}

constexpr std::size_t kBlasWorkspaceBytes = std::size_t{32} << 20;  // cuBLAS's advice for Hopper
constexpr std::size_t kElementBytes = 2;                            // bf16
constexpr std::size_t kAlignElements = 128;                         // 256 bytes
constexpr std::size_t kMaxCachedShapes = 8;
constexpr std::size_t kWindow = 16;

std::size_t align_up(std::size_t elements) {
  return (elements + kAlignElements - 1) / kAlignElements * kAlignElements;
}

double gib(std::size_t elements) {
  return static_cast<double>(elements * kElementBytes) / (1024.0 * 1024 * 1024);
}

// Elements each operand of the largest GEMMs needs, over a list of GEMMs.
struct OperandSizes {
  std::size_t a = 0, b = 0, c = 0;
  bool covers(const OperandSizes& other) const { return a >= other.a && b >= other.b && c >= other.c; }
  OperandSizes max(const OperandSizes& other) const {
    return {std::max(a, other.a), std::max(b, other.b), std::max(c, other.c)};
  }
  std::size_t total() const { return a + b + c; }
};

// A shape's GEMMs, checked against cuBLAS's int dimensions once rather than per call.
struct ShapePlan {
  program::StageShape shape;
  std::vector<program::Gemm> forward, backward;
  double forward_flops = 0, backward_flops = 0;
  OperandSizes sizes;
};

void check_dims(const program::Gemm& g) {
  const auto fits = [](std::int64_t v) { return v >= 0 && v <= INT_MAX; };
  if (!fits(g.m) || !fits(g.n) || !fits(g.k) || !fits(g.count)) {
    throw std::invalid_argument(
        fmt::format("GEMM {}x{}x{} (x{}) is outside cuBLAS's int range", g.m, g.n, g.k, g.count));
  }
}

bool empty(const program::Gemm& g) {
  return g.m == 0 || g.n == 0 || g.k == 0 || g.count == 0;
}

// cuBLAS runs its fastest tensor-core kernels only when every bf16 dimension is a multiple of
// 8 (16 bytes); frameworks pad what is not (Megatron pads the vocabulary to a multiple of 128
// per TP rank). An unaligned LM head (GPT-3 XL's 50,257 tokens over TP 4: 12,565 per rank)
// ran at 333 TFLOP/s on an H200 where the padded one ran at 544 (bench/results/2026-11-27-gpu-check.md).
// So each dimension is rounded up to a multiple of 8 here; the FLOPs that count (MFU's) stay
// the model's, from the unpadded GEMMs.
constexpr std::int64_t kDimAlign = 8;

std::vector<program::Gemm> padded(std::vector<program::Gemm> gemms) {
  const auto up = [](std::int64_t v) { return (v + kDimAlign - 1) / kDimAlign * kDimAlign; };
  for (program::Gemm& g : gemms) {
    g.m = up(g.m);
    g.n = up(g.n);
    g.k = up(g.k);
  }
  return gemms;
}

ShapePlan make_plan(const program::StageShape& shape) {
  ShapePlan plan;
  plan.shape = shape;
  const auto forward = program::stage_gemms(shape, program::OpKind::forward);
  const auto backward = program::stage_gemms(shape, program::OpKind::backward);
  for (const auto* list : {&forward, &backward})
    for (const program::Gemm& g : *list) check_dims(g);
  plan.forward_flops = program::gemm_flops(forward);
  plan.backward_flops = program::gemm_flops(backward);
  plan.forward = padded(forward);
  plan.backward = padded(backward);
  for (const auto* list : {&plan.forward, &plan.backward}) {
    for (const program::Gemm& g : *list) {
      check_dims(g);
      if (empty(g)) continue;
      const auto m = static_cast<std::size_t>(g.m), n = static_cast<std::size_t>(g.n),
                 k = static_cast<std::size_t>(g.k), count = static_cast<std::size_t>(g.count);
      plan.sizes = plan.sizes.max({m * k * count, k * n * count, m * n * count});
    }
  }
  return plan;
}

std::string describe(const program::StageShape& s) {
  return fmt::format("layers={} tokens={} hidden={} ffn={} heads={} kv_heads={} seq={} vocab={} gated={} tp={}",
                     s.layers, s.tokens, s.hidden, s.ffn_hidden, s.heads, s.kv_heads, s.seq_len, s.vocab,
                     s.gated_mlp ? 1 : 0, s.tp);
}

}  // namespace

bool built_with_cuda() {
  return true;
}

std::vector<GpuInfo> list_gpus() {
  return inventory().gpus;
}

std::string gpu_unavailable_reason() {
  return inventory().unavailable_reason;
}

struct GpuCompute::Impl {
  GpuInfo info;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  cublasHandle_t blas = nullptr;
  void* blas_workspace = nullptr;

  // One allocation, laid out [A | B | C], each part sized for the largest operand of its
  // kind over every shape seen; grows only. A and B are filled once with random values and
  // never written; C takes every output and is never read, so operand values stay the same
  // however many runs go by.
  std::byte* operands = nullptr;
  OperandSizes capacity;

  std::vector<ShapePlan> plans;  // most recently added last

  struct Sample {
    double flops = 0;
    std::int64_t ns = 0;
  };
  std::array<Sample, kWindow> window{};
  std::size_t window_next = 0;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  ~Impl() {
    // Destructors never throw: errors here (e.g. the runtime already unloaded at exit) are ignored.
    (void)cudaSetDevice(info.index);
    if (stream != nullptr) (void)cudaStreamSynchronize(stream);
    if (blas != nullptr) (void)cublasDestroy(blas);
    if (blas_workspace != nullptr) (void)cudaFree(blas_workspace);
    if (operands != nullptr) (void)cudaFree(operands);
    if (start != nullptr) (void)cudaEventDestroy(start);
    if (stop != nullptr) (void)cudaEventDestroy(stop);
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
    (void)cudaGetLastError();
  }

  void make_current() const { check(cudaSetDevice(info.index), "cudaSetDevice", info.index); }

  void reserve(const OperandSizes& needed) {
    if (capacity.covers(needed)) return;
    const OperandSizes grown = capacity.max(needed);
    const OperandSizes aligned{align_up(grown.a), align_up(grown.b), align_up(grown.c)};
    if (operands != nullptr) {
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize", info.index);
      check(cudaFree(operands), "cudaFree", info.index);
      operands = nullptr;
      capacity = {};
    }
    void* memory = nullptr;
    if (const cudaError_t err = cudaMalloc(&memory, aligned.total() * kElementBytes); err != cudaSuccess) {
      fail(err, fmt::format("cudaMalloc {:.2f} GiB of GEMM operands on GPU {}", gib(aligned.total()), info.index));
    }
    operands = static_cast<std::byte*>(memory);
    capacity = aligned;
    check(detail::fill_uniform_bf16(operands, capacity.a + capacity.b, 0x77616e6c6162ULL, stream),
          "filling GEMM operands", info.index);
    log().debug("GPU {}: GEMM operands {:.2f} GiB (A {:.2f}, B {:.2f}, C {:.2f})", info.index, gib(capacity.total()),
                gib(capacity.a), gib(capacity.b), gib(capacity.c));
  }

  const ShapePlan& plan_for(const program::StageShape& shape) {
    const auto found = std::find_if(plans.begin(), plans.end(), [&](const ShapePlan& p) { return p.shape == shape; });
    if (found != plans.end()) return *found;
    ShapePlan plan = make_plan(shape);
    reserve(plan.sizes);
    if (plans.size() == kMaxCachedShapes) plans.erase(plans.begin());
    log().debug("GPU {}: new shape {}: {} forward / {} backward GEMMs", info.index, describe(shape),
                plan.forward.size(), plan.backward.size());
    plans.push_back(std::move(plan));
    return plans.back();
  }

  // Gemm{m, n, k} is, row-major, C (m x n) = A (m x k) B (k x n) with the weight kept as
  // W (n x k), B = W^T, as torch's linear keeps it. cuBLAS is column-major, so it is asked
  // for C^T (n x m) = W A^T: W stored k x n (op T), A^T stored k x m (op N), "TN" with m and
  // n swapped, the call frameworks make. Backward GEMMs use it too (frameworks issue them
  // as NN and NT, which cuBLAS runs at similar speed).
  void enqueue(const program::Gemm& g) {
    if (empty(g)) return;
    const auto m = static_cast<int>(g.m), n = static_cast<int>(g.n), k = static_cast<int>(g.k);
    const auto count = static_cast<int>(g.count);
    const float alpha = 1.0f, beta = 0.0f;
    const std::byte* act = operands;                                  // A: m x k per GEMM
    const std::byte* weight = operands + capacity.a * kElementBytes;  // W: n x k per GEMM
    std::byte* out = operands + (capacity.a + capacity.b) * kElementBytes;
    const cublasStatus_t status =
        count == 1 ? cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, weight, CUDA_R_16BF, k, act,
                                  CUDA_R_16BF, k, &beta, out, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)
                   : cublasGemmStridedBatchedEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, weight, CUDA_R_16BF, k,
                                                g.n * g.k, act, CUDA_R_16BF, k, g.m * g.k, &beta, out, CUDA_R_16BF, n,
                                                g.m * g.n, count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (status != CUBLAS_STATUS_SUCCESS) {
      fail(status, fmt::format("{} {}x{}x{} (x{}) on GPU {}",
                               count == 1 ? "cublasGemmEx" : "cublasGemmStridedBatchedEx", m, n, k, count, info.index));
    }
  }

  std::chrono::nanoseconds time(const std::vector<program::Gemm>& gemms) {
    check(cudaEventRecord(start, stream), "cudaEventRecord", info.index);
    for (const program::Gemm& g : gemms) enqueue(g);
    check(cudaEventRecord(stop, stream), "cudaEventRecord", info.index);
    check(cudaEventSynchronize(stop), "running GEMMs (cudaEventSynchronize)", info.index);
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime", info.index);
    return std::chrono::nanoseconds(std::llround(static_cast<double>(ms) * 1e6));
  }
};

GpuCompute::GpuCompute(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuCompute::~GpuCompute() = default;

std::unique_ptr<GpuCompute> GpuCompute::open(int device) {
  const Inventory& found = inventory();
  if (found.gpus.empty()) {
    throw std::runtime_error(fmt::format("GpuCompute::open({}): {}", device, found.unavailable_reason));
  }
  if (device < 0 || static_cast<std::size_t>(device) >= found.gpus.size()) {
    throw std::runtime_error(fmt::format("GpuCompute::open({}): no such GPU ({} found, 0 to {})", device,
                                         found.gpus.size(), found.gpus.size() - 1));
  }
  auto impl = std::make_unique<Impl>();  // frees whatever was made if a step below throws
  impl->info = found.gpus[static_cast<std::size_t>(device)];
  const int gpu = impl->info.index;
  impl->make_current();
  // Non-blocking: never serialised with the legacy default stream other code may use.
  check(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking), "cudaStreamCreate", gpu);
  check(cudaEventCreate(&impl->start), "cudaEventCreate", gpu);
  // Blocking sync: a waiting worker sleeps instead of spinning a core the agent's network
  // threads need; the events' GPU timestamps are unaffected.
  check(cudaEventCreateWithFlags(&impl->stop, cudaEventBlockingSync), "cudaEventCreate", gpu);
  check(cublasCreate(&impl->blas), "cublasCreate", gpu);
  check(cublasSetStream(impl->blas, impl->stream), "cublasSetStream", gpu);
  // A workspace of our own, set after the stream (cublasSetStream resets it): cuBLAS then
  // never allocates while GEMMs run.
  check(cudaMalloc(&impl->blas_workspace, kBlasWorkspaceBytes), "cudaMalloc cuBLAS workspace", gpu);
  check(cublasSetWorkspace(impl->blas, impl->blas_workspace, kBlasWorkspaceBytes), "cublasSetWorkspace", gpu);
  log().debug("GPU {}: opened ({}, sm_{}{})", gpu, impl->info.name, impl->info.cc_major, impl->info.cc_minor);
  return std::unique_ptr<GpuCompute>(new GpuCompute(std::move(impl)));
}

const GpuInfo& GpuCompute::info() const {
  return impl_->info;
}

void GpuCompute::prepare(const program::StageShape& shape) {
  impl_->make_current();
  const ShapePlan& plan = impl_->plan_for(shape);
  impl_->time(plan.forward);
  impl_->time(plan.backward);
}

std::chrono::nanoseconds GpuCompute::run(const program::StageShape& shape, program::OpKind pass) {
  if (pass != program::OpKind::forward && pass != program::OpKind::backward) {
    throw std::invalid_argument("GpuCompute::run: pass must be forward or backward, not " + program::to_string(pass));
  }
  impl_->make_current();
  const ShapePlan& plan = impl_->plan_for(shape);
  const bool forward = pass == program::OpKind::forward;
  const std::chrono::nanoseconds elapsed = impl_->time(forward ? plan.forward : plan.backward);
  impl_->window[impl_->window_next % kWindow] = {forward ? plan.forward_flops : plan.backward_flops, elapsed.count()};
  ++impl_->window_next;
  return elapsed;
}

double GpuCompute::measured_flops_per_s() const {
  double flops = 0;
  std::int64_t ns = 0;
  for (const Impl::Sample& s : impl_->window) {
    flops += s.flops;
    ns += s.ns;
  }
  return ns > 0 ? flops / (static_cast<double>(ns) * 1e-9) : 0.0;
}

}  // namespace wanlab::gpu
