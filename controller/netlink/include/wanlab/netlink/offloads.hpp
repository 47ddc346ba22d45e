#pragma once
// Segmentation and checksum offloads of an interface (ethtool ioctls).
//
// The lab turns them off on each gateway's router-facing veth: frames then cross the WAN
// as the real packets they would be (MTU-sized, checksums complete), so queue limits in
// packets, per-packet loss and per-packet serialization mean what they say, in both
// backends. With offloads on, a 64 KB TCP super-packet would count as one packet, be
// lost as one, and carry an unfinished checksum into the userspace engine.
#include <string>

#include "wanlab/netlink/netlink.hpp"

namespace wanlab::netlink {

/// Turns off TX checksum offload, TSO and GSO of `ifname` in `ns` (GRO stays as the
/// device has it). Throws Error naming the interface and the failed setting.
void disable_offloads(const Netns& ns, const std::string& ifname);

}  // namespace wanlab::netlink
