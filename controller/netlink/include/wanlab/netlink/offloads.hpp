#pragma once
// Segmentation and checksum offloads of an interface (ethtool ioctls).
//
// A kernel-backend lab turns them off on each gateway's router-facing veth: frames then
// cross the WAN qdiscs as the real packets they would be (MTU-sized, checksums complete),
// so queue limits in packets and netem's per-packet loss mean what they say; with offloads
// on, a 64 KB TCP super-packet would count as one packet and be lost as one. The userspace
// engine keeps them on and accounts for super-frames itself (shaping/gso.hpp). Router-only
// labs' nodes turn them off (wanlab node-setup) for either backend.
#include <string>

#include "wanlab/netlink/netlink.hpp"

namespace wanlab::netlink {

/// Turns off TX checksum offload, TSO and GSO of `ifname` in `ns` (GRO stays as the
/// device has it). Throws Error naming the interface and the failed setting.
void disable_offloads(const Netns& ns, const std::string& ifname);

}  // namespace wanlab::netlink
