#pragma once
// GSO super-frames in the userspace engine.
//
// The lab's interfaces keep TSO/GSO on in the userspace backend, so a TCP sender's
// super-frame (up to 64 KB: many MTU-sized segments sharing one header) crosses the veths
// and the engine as one unit: the kernel's per-packet work (forwarding, bridging, the
// receiver's TCP) is done once per super-frame instead of once per segment. The engine
// receives it with its virtio-net header (PACKET_VNET_HDR: the segment size, the checksum
// still to complete) and accounts for it as the packets it stands for on the wire:
// `segments` packets of `header + segment` bytes each, so queue limits count packets,
// serialization takes every segment's bytes, and counters show wire packets and bytes.
//
// Where a super-frame would make the link coarser than a real one, the engine cuts it
// into chunks (split()): into single segments on a lossy link (each segment is lost or not
// on its own, as on a real link), and otherwise into chunks that take at most
// kMaxBurstNs on the link's serializer (so at low rates segments still arrive spread out).
// Chunks are valid frames themselves: per chunk the IP length, ID and header checksum,
// the TCP sequence number and flags (FIN and PSH only on the last, CWR only on the first)
// or the UDP length, and the checksum left for the kernel to complete are rewritten, as
// the kernel's own GSO does.
#include <cstdint>
#include <cstring>

namespace wanlab::shaping {

/// struct virtio_net_hdr as AF_PACKET reads and writes it (host byte order).
struct VnetHdr {
  std::uint8_t flags = 0;
  std::uint8_t gso_type = 0;
  std::uint16_t hdr_len = 0;
  std::uint16_t gso_size = 0;
  std::uint16_t csum_start = 0;
  std::uint16_t csum_offset = 0;
};
static_assert(sizeof(VnetHdr) == 10);

inline constexpr std::uint8_t kVnetNeedsCsum = 1;  // VIRTIO_NET_HDR_F_NEEDS_CSUM
inline constexpr std::uint8_t kGsoNone = 0;
inline constexpr std::uint8_t kGsoTcpV4 = 1;
inline constexpr std::uint8_t kGsoUdpL4 = 5;
inline constexpr std::uint8_t kGsoEcn = 0x80;

/// A chunk of a super-frame takes at most this long on the link's serializer.
inline constexpr std::int64_t kMaxBurstNs = 125'000;

struct GsoInfo {
  std::uint32_t segments = 1;     // packets it stands for on the wire
  std::uint32_t header = 0;       // Ethernet + IPv4 + TCP/UDP header, repeated per segment
  std::uint32_t segment = 0;      // payload bytes per segment (the last may be shorter)
  std::uint32_t wire_bytes = 0;   // frame bytes of those packets together
  bool splittable = false;        // TCP/IPv4 or UDP/IPv4 GSO that split() can cut
};

/// What a received frame stands for on the wire. A frame without GSO (or one that cannot
/// be parsed) is one packet of its own length.
GsoInfo gso_info(const VnetHdr& vnet, const std::uint8_t* frame, std::uint32_t len);

/// Segments per chunk so that a chunk takes at most kMaxBurstNs at `rate_bps` (at least 1;
/// all of them at rate 0, where timing does not matter).
std::uint32_t segments_per_chunk(const GsoInfo& info, std::uint64_t rate_bps);

/// Bytes of the chunk of `count` segments starting at segment `first`.
std::uint32_t chunk_length(const GsoInfo& info, std::uint32_t len, std::uint32_t first, std::uint32_t count);

/// Writes that chunk (chunk_length bytes) to `out` with its header rewritten, and its
/// virtio-net header to `out_vnet`. `info` must be splittable.
void write_chunk(const VnetHdr& vnet, const std::uint8_t* frame, std::uint32_t len, const GsoInfo& info,
                 std::uint32_t first, std::uint32_t count, std::uint8_t* out, VnetHdr& out_vnet);

/// Cuts a splittable super-frame into chunks of at most `per_chunk` segments, in order:
/// for each, `dest(chunk_len, segments)` returns where to write it (nullptr: skip it) and
/// `done(chunk_len, segments, vnet)` is called once it is written.
template <class Dest, class Done>
void split(const VnetHdr& vnet, const std::uint8_t* frame, std::uint32_t len, const GsoInfo& info,
           std::uint32_t per_chunk, Dest&& dest, Done&& done) {
  if (per_chunk == 0) per_chunk = 1;
  for (std::uint32_t first = 0; first < info.segments; first += per_chunk) {
    const std::uint32_t count = first + per_chunk <= info.segments ? per_chunk : info.segments - first;
    const std::uint32_t clen = chunk_length(info, len, first, count);
    std::uint8_t* out = dest(clen, count);
    if (!out) continue;
    VnetHdr v;
    write_chunk(vnet, frame, len, info, first, count, out, v);
    done(clen, count, v);
  }
}

/// The Internet checksum's folded one's-complement sum of `len` bytes added to `sum`.
std::uint32_t csum_add(std::uint32_t sum, const std::uint8_t* data, std::size_t len);
std::uint16_t csum_fold(std::uint32_t sum);
/// Sets the checksum field of the IPv4 header at `ip` (`ihl` bytes) to its checksum.
void set_ip_checksum(std::uint8_t* ip, std::size_t ihl);

}  // namespace wanlab::shaping
