#pragma once
#include "wanlab/netlink/netlink.hpp"
#include "wanlab/shaping/link_shaper.hpp"

namespace wanlab::shaping {

/// WAN links as the lab plan built them: on the router's egress toward the destination
/// DC, an HTB class per source DC with a netem leaf (pfifo where the kernel has no netem).
/// Changes are netlink changes of the class and the leaf, never delete and re-add.
class KernelShaper final : public LinkShaper {
 public:
  /// `router` is a socket opened in the lab's router namespace.
  KernelShaper(netlink::Socket router, bool netem);
  std::string backend() const override { return "kernel"; }
  bool applies_delay() const override { return netem_; }
  void apply(const core::Topology& topo, const core::WanLink& link) override;
  LinkCounters counters(const core::Topology& topo, const core::WanLink& link) override;

 private:
  netlink::Socket router_;
  bool netem_;
};

}  // namespace wanlab::shaping
