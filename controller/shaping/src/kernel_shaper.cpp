#include "wanlab/shaping/kernel_shaper.hpp"

#include "wanlab/lab/naming.hpp"
#include "wanlab/lab/wan_tc.hpp"

namespace wanlab::shaping {

KernelShaper::KernelShaper(netlink::Socket router, bool netem) : router_(std::move(router)), netem_(netem) {}

void KernelShaper::apply(const core::Topology& topo, const core::WanLink& link) {
  const auto ifname = lab::if_router_to(topo.dcs[link.dst].name);
  const auto tc = lab::wan_link_tc(topo, link);
  router_.change_htb_class(ifname, lab::kWanRootQdisc, tc.classid, tc.htb);
  if (netem_)
    router_.change_netem(ifname, tc.classid, tc.leaf, tc.netem);
  else
    router_.change_pfifo(ifname, tc.classid, tc.leaf, tc.limit_packets);
}

LinkCounters KernelShaper::counters(const core::Topology& topo, const core::WanLink& link) {
  const auto ifname = lab::if_router_to(topo.dcs[link.dst].name);
  const auto tc = lab::wan_link_tc(topo, link);
  LinkCounters c;
  if (auto cls = router_.class_stats(ifname, tc.classid)) {
    c.packets = cls->packets;
    c.bytes = cls->bytes;
    c.overlimits = cls->overlimits;
  }
  if (auto leaf = router_.qdisc_stats(ifname, tc.leaf)) {
    c.drops = leaf->drops;
    c.queued_packets = leaf->qlen;
    c.queued_bytes = leaf->backlog;
  }
  return c;
}

}  // namespace wanlab::shaping
