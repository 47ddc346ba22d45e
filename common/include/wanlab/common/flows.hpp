#pragma once
// How the data plane's WAN connections are told apart on the wire, so the shaping backends
// can gate them per flow: every agent binds the source port of each WAN data connection to
//   kFlowPortBase + slot * kFlowPortStride + stripe
// where `slot` is the sending worker's GPU index on its node and `stripe` the connection's
// index within its (sender, receiver) pair. A flow (one sender to one receiver) is then
// (sender node address, receiver node address, source port & kFlowPortMask == the slot's
// base). Connections inside a DC keep ephemeral ports.
#include <cstdint>
#include <stdexcept>
#include <string>

namespace wanlab::flows {

inline constexpr std::uint16_t kFlowPortBase = 16384;   // below Linux's ephemeral range (32768-60999)
inline constexpr std::uint16_t kFlowPortStride = 64;    // >= the most connections per WAN peer (64)
inline constexpr std::uint16_t kFlowPortMask = 0xffc0;  // ~(kFlowPortStride - 1)
inline constexpr int kMaxSlots = 256;                   // GPUs per node the scheme can address

/// The source port of `stripe` of a WAN pair whose sender is GPU `slot` of its node.
inline std::uint16_t source_port(int slot, int stripe) {
  if (slot < 0 || slot >= kMaxSlots || stripe < 0 || stripe >= kFlowPortStride)
    throw std::out_of_range("flow source port: slot " + std::to_string(slot) + ", stripe " + std::to_string(stripe));
  return static_cast<std::uint16_t>(kFlowPortBase + slot * kFlowPortStride + stripe);
}
/// The value every source port of slot `slot` has under kFlowPortMask.
inline std::uint16_t slot_port(int slot) { return source_port(slot, 0); }

}  // namespace wanlab::flows
