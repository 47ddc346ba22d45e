#pragma once
// What a LabController's lab is made of: the kernel objects (namespaces, veths, routes,
// qdiscs, or a router-only lab's borrowed ports) and the shaper of its WAN links.
//
// netlink_backend() makes them on this kernel (root). The controller itself only plans,
// keeps the state file, changes links, replays traces and tears down through this seam, so
// a unit test can give it a backend that makes no kernel object and a shaper of its own
// (tests/unit/test_lab_controller.cpp), and test link changes, replays and runs without root.
#include <memory>

#include "wanlab/core/topology.hpp"
#include "wanlab/lab/plan.hpp"
#include "wanlab/lab/state.hpp"
#include "wanlab/lab/teardown.hpp"
#include "wanlab/shaping/link_shaper.hpp"

namespace wanlab::api {

struct UpOptions;

class LabBackend {
 public:
  virtual ~LabBackend() = default;
  /// The lab's kernel operations, before any is made. Fills `state.namespaces` (every
  /// namespace the lab will own) and, for a router-only lab, `state.router_ports`.
  virtual lab::Plan plan(const core::Topology& topo, lab::LabState& state) = 0;
  /// Makes what `plan` says, in order; throws at the first failure (the caller then
  /// releases and tears down).
  virtual void apply(const lab::Plan& plan) = 0;
  /// The shaper of the lab's WAN links, once the plan is applied.
  virtual std::unique_ptr<shaping::LinkShaper> make_shaper(const core::Topology& topo, const lab::LabState& state) = 0;
  /// Gives back what the lab borrowed (a router-only lab's ports: their traffic control
  /// and forwarding settings; open netlink sockets), the shaper already gone. Idempotent.
  virtual void release(const core::Topology& topo, const lab::LabState& state) = 0;
  /// Removes the lab's kernel objects (idempotent), after release().
  virtual lab::TeardownReport teardown(const core::Topology& topo, const lab::LabState& state) = 0;
};

/// The lab on this kernel, through netlink, as `options` asks (backend already resolved to
/// "kernel" or "userspace": resolve_backend()).
std::unique_ptr<LabBackend> netlink_backend(const UpOptions& options, const std::string& backend);

}  // namespace wanlab::api
