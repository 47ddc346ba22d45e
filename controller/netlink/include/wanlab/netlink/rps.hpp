#pragma once
// Receive packet steering (RPS) of an interface: which CPUs run the receive path of the
// packets it takes in.
//
// A veth hands each frame to its peer with netif_rx, and without RPS the peer's whole
// receive path (IP, forwarding, the receiver's TCP, its wake-ups) runs as a softirq on the
// CPU that sent the frame, at the end of the sender's own send(). For the userspace engine
// that is its release thread: measured on a three-DC lab, 55 % of the engine thread's time
// went to the receivers' TCP stacks, and 3 % of packets left more than 1 ms late. Steering
// every lab veth's receive path to the CPUs other than the engine's moves that work off
// the engine's CPU (bench/results/2026-11-27-engine-rps.md).
//
// The setting lives only in sysfs (queues/rx-N/rps_cpus), and sysfs shows the interfaces
// of the namespace it was mounted in, so the write happens in a short-lived child process
// that enters the namespace and mounts its own sysfs in a private mount namespace (as
// `ip netns exec` does); nothing outlives the child.
#include <string>
#include <vector>

#include "wanlab/netlink/netlink.hpp"

namespace wanlab::netlink {

/// The rps_cpus mask for a set of CPU numbers, in the kernel's format: hexadecimal words of
/// 32 CPUs, most significant first, separated by commas ({0} -> "1", {0, 33} -> "2,00000001").
/// Empty set: "0" (RPS off).
std::string rps_mask(const std::vector<int>& cpus);

/// The CPUs this process may run on, other than `excluded` (sorted).
std::vector<int> allowed_cpus_except(int excluded);

/// Writes `mask` to every receive queue's rps_cpus of `ifname` in `ns`. Throws Error naming
/// the interface, the namespace and the failed step.
void set_rps_cpus(const Netns& ns, const std::string& ifname, const std::string& mask);

/// Reads rx-0's rps_cpus of `ifname` in `ns` (the same way), e.g. "1" or "00000001".
std::string rps_cpus(const Netns& ns, const std::string& ifname);

}  // namespace wanlab::netlink
