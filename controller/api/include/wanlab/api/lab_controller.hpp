#pragma once
// A running lab, owned by the controller daemon: builds it (state on disk first, then the
// plan), serves status and in-place link changes, and tears it down.
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "wanlab/api/handler.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/lab/state.hpp"
#include "wanlab/lab/teardown.hpp"
#include "wanlab/shaping/link_shaper.hpp"

namespace wanlab::lab {
class NetlinkKernel;
}

namespace wanlab::api {

struct UpOptions {
  std::string backend = "auto";  // auto | kernel | userspace
  bool netem = false;            // decided by the caller (netlink::netem_available())
  std::uint64_t seed = 1;        // the userspace engine's jitter and loss
};

/// auto picks kernel where netem exists, userspace elsewhere.
std::string resolve_backend(const std::string& requested, bool netem);

class LabController final : public Controller {
 public:
  /// Builds the lab. On failure removes everything it made, then throws.
  /// `on_shutdown` runs after a shutdown request has torn the lab down (the daemon stops
  /// serving there).
  LabController(core::Topology topo, const UpOptions& options, std::function<void()> on_shutdown = {});
  ~LabController() override;

  nlohmann::json status() override;
  nlohmann::json set_link(const std::string& src, const std::string& dst, const LinkChange& change) override;
  nlohmann::json shutdown() override;

  /// Removes the lab's kernel objects (idempotent). The state folder is the caller's.
  lab::TeardownReport teardown();
  const core::Topology& topology() const { return topo_; }
  std::chrono::nanoseconds bring_up_time() const { return bring_up_time_; }
  std::size_t operation_count() const { return op_count_; }

 private:
  core::Topology topo_;
  lab::LabState state_;
  std::unique_ptr<lab::NetlinkKernel> kernel_;
  std::unique_ptr<shaping::LinkShaper> shaper_;
  std::function<void()> on_shutdown_;
  std::chrono::nanoseconds bring_up_time_{};
  std::size_t op_count_ = 0;
  bool torn_down_ = false;
};

/// The status document of a lab (what `wanlab status --json` prints). `shaper` may be
/// null (counters then omitted); `controller_running` tells whether a daemon owns it.
nlohmann::json lab_status(const core::Topology& topo, const lab::LabState& state, shaping::LinkShaper* shaper,
                          bool controller_running);

/// JSON of one link's configured parameters, with the queue limit actually in effect.
nlohmann::json link_json(const core::Topology& topo, const core::WanLink& link);

}  // namespace wanlab::api
