// GpuCompute where the build has no CUDA: no GPUs, and open() says why.
#include "wanlab/gpu/gpu_compute.hpp"

#include <stdexcept>

namespace wanlab::gpu {
namespace {
constexpr const char* kReason = "built without CUDA";
}

bool built_with_cuda() {
  return false;
}

std::vector<GpuInfo> list_gpus() {
  return {};
}

std::string gpu_unavailable_reason() {
  return kReason;
}

struct GpuCompute::Impl {
  GpuInfo info;
};

GpuCompute::GpuCompute(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuCompute::~GpuCompute() = default;

std::unique_ptr<GpuCompute> GpuCompute::open(int device) {
  throw std::runtime_error("GpuCompute::open(" + std::to_string(device) + "): " + kReason);
}

// Unreachable: open() never returns an instance in this build.
const GpuInfo& GpuCompute::info() const {
  return impl_->info;
}
void GpuCompute::prepare(const program::StageShape&) {
  throw std::logic_error(kReason);
}
std::chrono::nanoseconds GpuCompute::run(const program::StageShape&, program::OpKind) {
  throw std::logic_error(kReason);
}
double GpuCompute::measured_flops_per_s() const {
  return 0;
}

}  // namespace wanlab::gpu
