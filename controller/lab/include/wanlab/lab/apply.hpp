#pragma once
// Apply: runs a plan's operations against a Kernel. The netlink implementation talks to
// the real kernel; tests use in-memory fakes.
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "wanlab/lab/plan.hpp"
#include "wanlab/netlink/netlink.hpp"

namespace wanlab::lab {

class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual void execute(const Op& op) = 0;
};

/// Executes operations through libnl, keeping one netns handle and one netlink socket
/// per namespace it has touched (opened lazily; released on destruction).
class NetlinkKernel final : public Kernel {
 public:
  NetlinkKernel();
  ~NetlinkKernel() override;
  void execute(const Op& op) override;
  netlink::Socket& socket(const std::string& ns);
  const netlink::Netns& netns(const std::string& ns);
  /// Closes every handle (a lab's namespaces can only be freed once nobody holds them).
  void release();

 private:
  struct Entry;
  std::map<std::string, std::unique_ptr<Entry>> entries_;
  bool rps_warned_ = false;  // SetRps failures are logged once per lab
};

/// Runs every operation in order. On failure throws std::runtime_error naming the lab
/// operation that failed and the kernel's reason; the caller tears the partial lab down.
void apply(const Plan& plan, Kernel& kernel, const std::function<void(std::size_t done)>& progress = {});

}  // namespace wanlab::lab
