#include "wanlab/shaping/packet_socket.hpp"

#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <iterator>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <stdexcept>

namespace wanlab::shaping {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& ifname, int err) {
  throw std::runtime_error(fmt::format("{} on {}: {}", what, ifname, std::strerror(err)));
}

// Where a TX frame's data starts (without PACKET_TX_HAS_OFF the kernel reads it there).
constexpr std::uint32_t kTxDataOffset = TPACKET2_HDRLEN - sizeof(sockaddr_ll);
// Where the kernel puts a received frame's network header, at most (tpacket_rcv: the
// header and sockaddr_ll, 16 bytes for the link-layer header, then the virtio-net header).
constexpr std::uint32_t kRxNetOffset = TPACKET_ALIGN(TPACKET2_HDRLEN + 16) + sizeof(VnetHdr);

tpacket2_hdr* hdr(std::uint8_t* frame) { return reinterpret_cast<tpacket2_hdr*>(frame); }

std::uint32_t load_status(const tpacket2_hdr* h) {
  return __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE);
}
void store_status(tpacket2_hdr* h, std::uint32_t v) { __atomic_store_n(&h->tp_status, v, __ATOMIC_RELEASE); }

}  // namespace

std::uint32_t ring_max_frame(const Ring& ring) {
  return std::min<std::uint32_t>(ring.frame_size - kRxNetOffset, ring.frame_size - kTxDataOffset - sizeof(VnetHdr));
}

PacketSocket::PacketSocket(const netlink::Netns& ns, const std::string& ifname, const Ring& ring,
                           std::uint32_t min_len, std::uint32_t max_len)
    : ifname_(ifname), geo_(ring) {
  {
    netlink::ScopedNetns in(ns);
    // Protocol 0: the socket receives nothing until bind() names ETH_P_ALL below. A socket
    // that is already receiving makes every ring setup and the bind wait for an RCU grace
    // period (synchronize_net; bench/results/2026-11-21-engine.md).
    fd_.reset(::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd_) fail("socket(AF_PACKET)", ifname, errno);
  }
  try {
    const unsigned ifindex = [&] {
      netlink::ScopedNetns in(ns);
      return ::if_nametoindex(ifname.c_str());
    }();
    if (ifindex == 0) fail("if_nametoindex", ifname, errno);

    int v = TPACKET_V2;
    if (::setsockopt(fd_.get(), SOL_PACKET, PACKET_VERSION, &v, sizeof v) != 0) fail("PACKET_VERSION", ifname, errno);
    int one = 1;
    // Frames come and go with their virtio-net header: GSO and checksum state (gso.hpp).
    if (::setsockopt(fd_.get(), SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) != 0) fail("PACKET_VNET_HDR", ifname, errno);
    // Only frames of min_len..max_len bytes (this socket's share of the interface).
    sock_filter code[] = {
        {BPF_LD | BPF_W | BPF_LEN, 0, 0, 0},
        {BPF_JMP | BPF_JGT | BPF_K, 2, 0, max_len},
        {BPF_JMP | BPF_JGE | BPF_K, 0, 1, min_len},
        {BPF_RET | BPF_K, 0, 0, 0x40000},
        {BPF_RET | BPF_K, 0, 0, 0},
    };
    sock_fprog prog{static_cast<unsigned short>(std::size(code)), code};
    if (::setsockopt(fd_.get(), SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) != 0) fail("SO_ATTACH_FILTER", ifname, errno);
    // Frames this host transmits (ours included) are not received back.
    if (::setsockopt(fd_.get(), SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) != 0)
      fail("PACKET_IGNORE_OUTGOING", ifname, errno);
    // The engine is the link: its frames skip the interface's qdisc.
    if (::setsockopt(fd_.get(), SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one) != 0)
      fail("PACKET_QDISC_BYPASS", ifname, errno);
    // A full TX ring frame is dropped rather than blocking the engine.
    if (::setsockopt(fd_.get(), SOL_PACKET, PACKET_LOSS, &one, sizeof one) != 0) fail("PACKET_LOSS", ifname, errno);

    // 64 KiB blocks: order-4 allocations the kernel finds at once (1 MiB blocks made each
    // ring slow to set up: bench/results/2026-11-21-engine.md).
    const std::uint32_t block = 64u << 10;
    auto ring_req = [&](std::uint32_t frames) {
      tpacket_req r{};
      r.tp_block_size = block;
      r.tp_frame_size = geo_.frame_size;
      r.tp_frame_nr = frames;
      r.tp_block_nr = frames / (block / geo_.frame_size);
      return r;
    };
    if (block % geo_.frame_size != 0 || geo_.rx_frames % (block / geo_.frame_size) != 0 ||
        geo_.tx_frames % (block / geo_.frame_size) != 0)
      throw std::invalid_argument("ring geometry: frames must fill whole 64 KiB blocks");
    auto rx = ring_req(geo_.rx_frames);
    auto tx = ring_req(geo_.tx_frames);
    if (::setsockopt(fd_.get(), SOL_PACKET, PACKET_RX_RING, &rx, sizeof rx) != 0) fail("PACKET_RX_RING", ifname, errno);
    if (::setsockopt(fd_.get(), SOL_PACKET, PACKET_TX_RING, &tx, sizeof tx) != 0) fail("PACKET_TX_RING", ifname, errno);
    ring_bytes_ = static_cast<std::size_t>(geo_.rx_frames + geo_.tx_frames) * geo_.frame_size;
    void* m = ::mmap(nullptr, ring_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_LOCKED, fd_.get(), 0);
    if (m == MAP_FAILED) m = ::mmap(nullptr, ring_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_.get(), 0);
    if (m == MAP_FAILED) fail("mmap packet rings", ifname, errno);
    ring_ = static_cast<std::uint8_t*>(m);
    max_frame_ = ring_max_frame(geo_);

    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = static_cast<int>(ifindex);
    if (::bind(fd_.get(), reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) fail("bind", ifname, errno);
  } catch (...) {
    if (ring_) ::munmap(ring_, ring_bytes_);
    throw;  // fd_ closes itself
  }
}

PacketSocket::~PacketSocket() {
  if (ring_) ::munmap(ring_, ring_bytes_);  // then fd_ closes
}

bool PacketSocket::peek(Received& r) const {
  std::uint8_t* f = rx_frame(rx_next_);
  auto* h = hdr(f);
  if (!(load_status(h) & TP_STATUS_USER)) return false;
  r.frame = f + h->tp_mac;
  r.vnet = reinterpret_cast<const VnetHdr*>(r.frame - sizeof(VnetHdr));
  // A frame larger than the ring's slot arrives truncated: len 0 tells the caller to drop it.
  r.len = h->tp_snaplen == h->tp_len ? h->tp_snaplen : 0;
  r.time = static_cast<std::int64_t>(h->tp_sec) * 1'000'000'000 + h->tp_nsec;
  return true;
}

void PacketSocket::pop() {
  store_status(hdr(rx_frame(rx_next_)), TP_STATUS_KERNEL);
  rx_next_ = (rx_next_ + 1) % geo_.rx_frames;
}

bool PacketSocket::send(const std::uint8_t* frame, std::uint32_t len) {
  if (len > max_frame_ + sizeof(VnetHdr)) return false;
  auto* h = hdr(tx_frame(tx_next_));
  if (load_status(h) != TP_STATUS_AVAILABLE) {
    // Give the kernel what is queued, then look once more.
    flush();
    if (load_status(h) != TP_STATUS_AVAILABLE) {
      ++tx_full_;
      return false;
    }
  }
  std::memcpy(tx_frame(tx_next_) + kTxDataOffset, frame, len);
  h->tp_len = len;
  store_status(h, TP_STATUS_SEND_REQUEST);
  tx_next_ = (tx_next_ + 1) % geo_.tx_frames;
  ++tx_pending_;
  return true;
}

std::uint64_t PacketSocket::rx_ring_dropped() {
  tpacket_stats st{};
  socklen_t len = sizeof st;
  if (::getsockopt(fd_.get(), SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0) rx_dropped_ += st.tp_drops;
  return rx_dropped_;
}

void PacketSocket::flush() {
  if (tx_pending_ == 0) return;
  ::send(fd_.get(), nullptr, 0, MSG_DONTWAIT);
  tx_pending_ = 0;
}

}  // namespace wanlab::shaping
