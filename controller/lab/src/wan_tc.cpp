#include "wanlab/lab/wan_tc.hpp"

#include <algorithm>

namespace wanlab::lab {

Bytes htb_burst(Rate rate, int mtu) {
  const std::uint64_t frame = static_cast<std::uint64_t>(mtu) + 14;
  return Bytes{std::max(rate.bytes_per_second() / 1000, 4 * frame)};
}

std::uint32_t htb_quantum(Rate rate, int mtu) {
  const std::uint64_t frame = static_cast<std::uint64_t>(mtu) + 14;
  return static_cast<std::uint32_t>(std::clamp<std::uint64_t>(rate.bytes_per_second() / 1000, frame, 200000));
}

std::uint32_t queue_limit_packets(const core::Topology& topo, const core::WanLink& link) {
  const auto& p = link.params;
  if (p.queue && p.queue->unit == QueueLimit::Unit::packets) return static_cast<std::uint32_t>(p.queue->value);
  if (p.queue) {
    const std::uint64_t frame = static_cast<std::uint64_t>(topo.lan.mtu) + 14;
    return static_cast<std::uint32_t>(std::max<std::uint64_t>(1, p.queue->value / frame));
  }
  return static_cast<std::uint32_t>(core::default_queue_packets(topo, link));
}

WanLinkTc wan_link_tc(const core::Topology& topo, const core::WanLink& link) {
  WanLinkTc tc;
  const auto src = static_cast<std::uint16_t>(link.src);
  tc.classid = {kWanRootQdisc.major, static_cast<std::uint16_t>(src + 1)};
  tc.leaf = {static_cast<std::uint16_t>(0x10 + src), 0};
  const auto& p = link.params;
  const int mtu = topo.lan.mtu;
  const bool outage = p.rate.bps == 0;
  const Rate rate = outage ? kOutageHtbRate : p.rate;
  tc.htb = {rate, rate, htb_burst(rate, mtu), htb_burst(rate, mtu), htb_quantum(rate, mtu)};
  tc.limit_packets = queue_limit_packets(topo, link);
  tc.netem.delay = p.delay;
  tc.netem.jitter = p.jitter;
  tc.netem.loss = p.loss;
  tc.netem.loss_burst = p.loss_burst;
  tc.netem.limit = tc.limit_packets;
  // With jitter, a netem rate far above the link rate keeps packets in order at a cost of
  // 1/100 of a packet time each.
  tc.netem.order_rate = p.jitter.count() > 0 && !outage ? Rate{p.rate.bps * 100} : Rate{};
  if (outage) {
    tc.netem.loss = Probability{Probability::kOne};
    tc.netem.loss_burst.reset();
    tc.limit_packets = 0;  // the pfifo leaf (no netem) drops everything; netem keeps its limit
  }
  return tc;
}

WanGateTc wan_gate_tc(const core::Topology& topo, const core::WanLink& link, std::size_t children) {
  const auto tc = wan_link_tc(topo, link);  // the link's class: its rate (kOutageHtbRate in an outage)
  const int mtu = topo.lan.mtu;
  const Rate link_rate = tc.htb.rate;
  const std::uint64_t min_bps = 8;  // HTB's smallest rate: 1 byte/s
  const Rate share{std::max(min_bps, link_rate.bps / std::max<std::size_t>(children, 1))};
  const std::uint32_t quantum = htb_quantum(link_rate, mtu);
  WanGateTc g;
  g.open = {share, link_rate, htb_burst(share, mtu), htb_burst(link_rate, mtu), quantum};
  // Closed: a one-frame bucket at a small ceil. In an outage the link rate is the outage's
  // fast class rate, so what a closed gate held when the link went down leaves with the
  // rest (see kOutageHtbRate); nothing new arrives (netem drops it all).
  const Rate closed{std::max(min_bps, link_rate.bps / kClosedGateShare)};
  const Bytes frame{static_cast<std::uint64_t>(mtu) + 14};
  g.closed = {std::min(share, closed), closed, frame, frame, quantum};
  return g;
}

}  // namespace wanlab::lab
