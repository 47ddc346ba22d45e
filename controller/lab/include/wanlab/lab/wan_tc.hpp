#pragma once
// How one directed WAN link a->b maps onto traffic control on the router's egress toward
// b: an HTB class (rate = ceil, explicit burst and quantum) classified by a's source
// subnet, with a netem leaf (delay, jitter, loss, limit) — or, where the kernel has no
// netem, a pfifo leaf with the same limit. The plan (creation) and the kernel shaper
// (in-place changes) both derive their parameters here.
#include <cstdint>

#include "wanlab/core/topology.hpp"
#include "wanlab/netlink/netlink.hpp"

namespace wanlab::lab {

inline constexpr netlink::Handle kWanRootQdisc{1, 0};

struct WanLinkTc {
  netlink::Handle classid;  // 1:<src+1>
  netlink::Handle leaf;     // <0x10+src>:0
  netlink::HtbClassParams htb;
  netlink::NetemParams netem;
  std::uint32_t limit_packets = 0;
};

/// A rate of 0 is an outage (trace replay). HTB cannot have a zero rate, so the leaf drops
/// every packet that arrives (netem loss 100 %, or a pfifo limit of 0) and the class runs
/// fast, at kOutageHtbRate: the packets queued before the outage (at most the queue limit)
/// leave at once, as if the cut happened behind them. A slow class would instead trickle
/// them out for the whole outage, each one inflating the sender's RTT estimate and so its
/// retransmission timeout, and delaying recovery by seconds.
inline constexpr Rate kOutageHtbRate{10'000'000'000};

WanLinkTc wan_link_tc(const core::Topology& topo, const core::WanLink& link);

/// The link's queue limit in packets (its `queue`, or 1.5 x BDP), outage or not.
std::uint32_t queue_limit_packets(const core::Topology& topo, const core::WanLink& link);

/// Per-flow gates on a link (kernel backend, KernelShaper::set_flows): the link's class
/// 1:<src+1> becomes an inner class (same rate and ceil) whose children are one class per
/// gated flow and one default class for the link's other traffic, each with a netem leaf
/// with the link's netem parameters. The children share the link's rate as their own
/// (guaranteed) rate and may borrow up to the link rate; a closed gate is the same class
/// with a ceil of 1/kClosedGateShare of the link rate (and a one-frame bucket), so a closed
/// flow gets at most about 1 % of the link; opening it restores the ceil in place.
inline constexpr std::uint64_t kClosedGateShare = 100;

struct WanGateTc {
  netlink::HtbClassParams open;    // a flow whose gate is open; the default class
  netlink::HtbClassParams closed;  // a flow whose gate is closed
};

/// The children's parameters for a link with `children` child classes (flows + default).
WanGateTc wan_gate_tc(const core::Topology& topo, const core::WanLink& link, std::size_t children);

/// HTB bucket size for a rate: 1 ms worth of bytes, at least 4 full frames, so the
/// average rate holds under timer slack without letting long bursts through.
Bytes htb_burst(Rate rate, int mtu);
/// HTB quantum: a thousandth of the rate in bytes/s, within [one frame, 200000] as HTB expects.
std::uint32_t htb_quantum(Rate rate, int mtu);

}  // namespace wanlab::lab
