#pragma once
// AF_PACKET socket bound to one interface with memory-mapped TPACKET_V2 RX and TX rings:
// frames are read from and written into shared memory, in batches, with one system call
// per batch to kick transmission and none per received packet.
//
// Why V2 and not V3: V3 hands a block of frames to userspace only when the block is full
// or its retire timer fires, and that timer counts jiffies (>= 1 ms, 4 ms at HZ=250). At
// low packet rates (a ping) that would add milliseconds of delay and jitter. V2 wakes per
// frame and still batches under load, since every frame ready is drained per wake-up.
#include <cstdint>
#include <ctime>
#include <string>

#include "wanlab/common/unique_fd.hpp"
#include "wanlab/netlink/netlink.hpp"
#include "wanlab/shaping/gso.hpp"

namespace wanlab::shaping {

struct Ring {
  std::uint32_t frame_size = 2048;  // header + sockaddr_ll + vnet header + frame; a power of two
  std::uint32_t rx_frames = 2048;
  std::uint32_t tx_frames = 1024;
};

struct RingGeometry {
  // MTU-sized frames (and ACKs). The engine drains the rings every loop turn
  // (microseconds), but a burst of 128 window-limited connections' segments and ACKs
  // overflowed 2048 of them; 8192 take 16 MiB per port (bench/results/2026-11-26-bubbletea.md,
  // "The engine's rings").
  Ring small{2048, 8192, 1024};
  // Super-frames (and any frame too large for a small slot): 64 KiB slots, each its own
  // 64 KiB block. A slot holds one super-frame however few segments it carries. Smaller
  // rings overflowed under TCP bursts, most where 32-128 connections open their windows at
  // once; 2048 (128 MiB per port) hold them (bench/results/2026-11-26-bubbletea.md, "The
  // engine's rings").
  Ring big{65536, 2048, 128};
};

/// Largest frame a ring's slots carry (received or sent, with the virtio-net header).
std::uint32_t ring_max_frame(const Ring& ring);

class PacketSocket {
 public:
  /// Opens the socket inside `ns`, bound to `ifname`: sees the frames received on it (not
  /// the ones this host sends) of `min_len`..`max_len` bytes, and sends bypassing the
  /// interface's qdisc.
  PacketSocket(const netlink::Netns& ns, const std::string& ifname, const Ring& ring, std::uint32_t min_len,
               std::uint32_t max_len);
  ~PacketSocket();
  PacketSocket(const PacketSocket&) = delete;
  PacketSocket& operator=(const PacketSocket&) = delete;

  int fd() const { return fd_.get(); }
  const std::string& ifname() const { return ifname_; }
  /// Largest frame the rings carry.
  std::uint32_t max_frame() const { return max_frame_; }

  struct Received {
    const VnetHdr* vnet;
    const std::uint8_t* frame;
    std::uint32_t len;   // 0: truncated (larger than a slot)
    std::int64_t time;   // kernel receive time, CLOCK_REALTIME nanoseconds
  };
  /// The next received frame, if one is ready; it stays until pop().
  bool peek(Received& r) const;
  void pop();

  /// Copies a frame (its virtio-net header at `vnet_and_frame`, the frame right after it)
  /// into the next free TX slot; false if the ring is full or it does not fit.
  bool send(const std::uint8_t* vnet_and_frame, std::uint32_t len_with_vnet);
  /// Asks the kernel to transmit what was queued with send().
  void flush();
  std::uint64_t tx_ring_full() const { return tx_full_; }
  /// Frames the kernel dropped because the RX ring was full, since the socket opened
  /// (PACKET_STATISTICS; reading resets the kernel's count, so this keeps the sum).
  std::uint64_t rx_ring_dropped();

 private:
  struct Frame;
  std::uint8_t* rx_frame(std::uint32_t i) const { return ring_ + static_cast<std::size_t>(i) * geo_.frame_size; }
  std::uint8_t* tx_frame(std::uint32_t i) const {
    return ring_ + (static_cast<std::size_t>(geo_.rx_frames) + i) * geo_.frame_size;
  }

  std::string ifname_;
  Ring geo_;
  UniqueFd fd_;
  std::uint8_t* ring_ = nullptr;
  std::size_t ring_bytes_ = 0;
  std::uint32_t rx_next_ = 0;
  std::uint32_t tx_next_ = 0;
  std::uint32_t max_frame_ = 0;
  std::uint32_t tx_pending_ = 0;
  std::uint64_t tx_full_ = 0;
  std::uint64_t rx_dropped_ = 0;
};

}  // namespace wanlab::shaping
