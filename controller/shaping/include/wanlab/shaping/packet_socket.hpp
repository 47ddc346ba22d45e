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

#include "wanlab/netlink/netlink.hpp"

namespace wanlab::shaping {

struct RingGeometry {
  std::uint32_t frame_size = 2048;  // header + sockaddr_ll + frame; a power of two
  // The engine drains the rings every loop turn (microseconds); 2048 frames hold several
  // milliseconds of traffic even at 4 Gbit/s.
  std::uint32_t rx_frames = 2048;
  std::uint32_t tx_frames = 1024;
};

class PacketSocket {
 public:
  /// Opens the socket inside `ns`, bound to `ifname`: sees frames received on it (not the
  /// ones this host sends), and sends bypassing the interface's qdisc.
  PacketSocket(const netlink::Netns& ns, const std::string& ifname, const RingGeometry& geometry);
  ~PacketSocket();
  PacketSocket(const PacketSocket&) = delete;
  PacketSocket& operator=(const PacketSocket&) = delete;

  int fd() const { return fd_; }
  const std::string& ifname() const { return ifname_; }
  /// Largest frame the rings carry.
  std::uint32_t max_frame() const { return max_frame_; }

  /// Calls f(const std::uint8_t* frame, std::uint32_t len, timespec rx_time_realtime) for
  /// each received frame ready, at most `budget`; returns how many.
  template <class F>
  std::uint32_t receive(F&& f, std::uint32_t budget);

  /// Copies a frame into the next free TX slot; false if the ring is full.
  bool send(const std::uint8_t* frame, std::uint32_t len);
  /// Asks the kernel to transmit what was queued with send().
  void flush();
  std::uint64_t tx_ring_full() const { return tx_full_; }

 private:
  struct Frame;
  std::uint8_t* rx_frame(std::uint32_t i) const { return ring_ + static_cast<std::size_t>(i) * geo_.frame_size; }
  std::uint8_t* tx_frame(std::uint32_t i) const {
    return ring_ + (static_cast<std::size_t>(geo_.rx_frames) + i) * geo_.frame_size;
  }
  bool rx_ready(std::uint32_t i, const std::uint8_t** data, std::uint32_t* len, timespec* ts) const;
  void rx_release(std::uint32_t i) const;

  std::string ifname_;
  RingGeometry geo_;
  int fd_ = -1;
  std::uint8_t* ring_ = nullptr;
  std::size_t ring_bytes_ = 0;
  std::uint32_t rx_next_ = 0;
  std::uint32_t tx_next_ = 0;
  std::uint32_t max_frame_ = 0;
  std::uint32_t tx_pending_ = 0;
  std::uint64_t tx_full_ = 0;
};

template <class F>
std::uint32_t PacketSocket::receive(F&& f, std::uint32_t budget) {
  std::uint32_t n = 0;
  const std::uint8_t* data;
  std::uint32_t len;
  timespec ts;
  while (n < budget && rx_ready(rx_next_, &data, &len, &ts)) {
    f(data, len, ts);
    rx_release(rx_next_);
    rx_next_ = (rx_next_ + 1) % geo_.rx_frames;
    ++n;
  }
  return n;
}

}  // namespace wanlab::shaping
