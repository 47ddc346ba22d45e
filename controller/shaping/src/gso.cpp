#include "wanlab/shaping/gso.hpp"

#include <algorithm>

namespace wanlab::shaping {
namespace {

constexpr std::uint32_t kEth = 14;

std::uint16_t get16(const std::uint8_t* p) { return static_cast<std::uint16_t>(p[0] << 8 | p[1]); }
std::uint32_t get32(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) << 24 | static_cast<std::uint32_t>(p[1]) << 16 |
         static_cast<std::uint32_t>(p[2]) << 8 | p[3];
}
void put16(std::uint8_t* p, std::uint32_t v) {
  p[0] = static_cast<std::uint8_t>(v >> 8);
  p[1] = static_cast<std::uint8_t>(v);
}
void put32(std::uint8_t* p, std::uint32_t v) {
  p[0] = static_cast<std::uint8_t>(v >> 24);
  p[1] = static_cast<std::uint8_t>(v >> 16);
  p[2] = static_cast<std::uint8_t>(v >> 8);
  p[3] = static_cast<std::uint8_t>(v);
}

bool is_tcp(const VnetHdr& v) { return (v.gso_type & ~kGsoEcn) == kGsoTcpV4; }

}  // namespace

std::uint32_t csum_add(std::uint32_t sum, const std::uint8_t* data, std::size_t len) {
  std::uint64_t s = sum;
  std::size_t i = 0;
  for (; i + 1 < len; i += 2) s += static_cast<std::uint32_t>(data[i] << 8 | data[i + 1]);
  if (i < len) s += static_cast<std::uint32_t>(data[i]) << 8;
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  return static_cast<std::uint32_t>(s);
}

std::uint16_t csum_fold(std::uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<std::uint16_t>(sum);
}

void set_ip_checksum(std::uint8_t* ip, std::size_t ihl) {
  ip[10] = ip[11] = 0;
  put16(ip + 10, static_cast<std::uint16_t>(~csum_fold(csum_add(0, ip, ihl))));
}

GsoInfo gso_info(const VnetHdr& vnet, const std::uint8_t* f, std::uint32_t len) {
  GsoInfo info;
  info.wire_bytes = len;
  const std::uint8_t type = vnet.gso_type & ~kGsoEcn;
  if (type == kGsoNone || vnet.gso_size == 0) return info;
  // A GSO frame the engine cannot parse still stands for its segments: estimate them from
  // the header length the kernel gave.
  std::uint32_t header = std::clamp<std::uint32_t>(vnet.hdr_len, kEth + 20, len);
  bool parsed = false;
  if (len >= kEth + 20 && f[12] == 0x08 && f[13] == 0x00 && (f[14] >> 4) == 4) {
    const std::uint32_t ihl = static_cast<std::uint32_t>(f[14] & 0x0f) * 4;
    const std::uint8_t proto = f[kEth + 9];
    const std::uint32_t l4 = kEth + ihl;
    if (ihl >= 20 && type == kGsoTcpV4 && proto == 6 && len >= l4 + 20) {
      const std::uint32_t doff = static_cast<std::uint32_t>(f[l4 + 12] >> 4) * 4;
      if (doff >= 20 && len >= l4 + doff) header = l4 + doff, parsed = true;
    } else if (ihl >= 20 && type == kGsoUdpL4 && proto == 17 && len >= l4 + 8) {
      header = l4 + 8, parsed = true;
    }
  }
  if (len <= header) return info;
  const std::uint32_t payload = len - header;
  info.header = header;
  info.segment = vnet.gso_size;
  info.segments = (payload + vnet.gso_size - 1) / vnet.gso_size;
  info.wire_bytes = len + (info.segments - 1) * header;
  info.splittable = parsed && info.segments > 1;
  return info;
}

std::uint32_t segments_per_chunk(const GsoInfo& info, std::uint64_t rate_bps) {
  if (rate_bps == 0 || info.segments <= 1) return info.segments;
  const double segment_bits = 8.0 * (info.header + info.segment);
  const double n = static_cast<double>(kMaxBurstNs) * static_cast<double>(rate_bps) / 1e9 / segment_bits;
  if (n >= info.segments) return info.segments;
  return std::max<std::uint32_t>(1, static_cast<std::uint32_t>(n));
}

std::uint32_t chunk_length(const GsoInfo& info, std::uint32_t len, std::uint32_t first, std::uint32_t count) {
  const std::uint32_t payload = len - info.header;
  const std::uint32_t start = std::min(payload, first * info.segment);
  const std::uint32_t end = std::min(payload, (first + count) * info.segment);
  return info.header + end - start;
}

void write_chunk(const VnetHdr& vnet, const std::uint8_t* frame, std::uint32_t len, const GsoInfo& info,
                 std::uint32_t first, std::uint32_t count, std::uint8_t* out, VnetHdr& out_vnet) {
  const std::uint32_t h = info.header;
  const std::uint32_t ihl = static_cast<std::uint32_t>(frame[kEth] & 0x0f) * 4;
  const std::uint32_t l4 = kEth + ihl;
  const std::uint32_t start = first * info.segment;
  const std::uint32_t plen = chunk_length(info, len, first, count) - h;
  const bool last = first + count >= info.segments;
  const bool tcp = is_tcp(vnet);
  std::memcpy(out, frame, h);
  std::memcpy(out + h, frame + h + start, plen);

  std::uint8_t* ip = out + kEth;
  const std::uint32_t l4_len = h - l4 + plen;
  put16(ip + 2, ihl + l4_len);
  put16(ip + 4, static_cast<std::uint16_t>(get16(ip + 4) + first));  // as the kernel's GSO numbers segments
  set_ip_checksum(ip, ihl);

  std::uint8_t* l4h = out + l4;
  std::uint32_t check_at;
  if (tcp) {
    put32(l4h + 4, get32(l4h + 4) + start);
    if (first > 0) l4h[13] &= static_cast<std::uint8_t>(~0x80);       // CWR on the first segment only
    if (!last) l4h[13] &= static_cast<std::uint8_t>(~(0x01 | 0x08));  // FIN and PSH on the last only
    check_at = 16;
  } else {
    put16(l4h + 4, l4_len);
    check_at = 6;
  }
  // Pseudo-header: addresses, protocol, L4 length.
  const std::uint32_t pseudo = csum_add(0, ip + 12, 8) + ip[9] + l4_len;
  out_vnet = VnetHdr{};
  if (vnet.flags & kVnetNeedsCsum) {
    // Left for the kernel to complete, as it was: the field holds the pseudo-header sum.
    put16(l4h + check_at, csum_fold(pseudo));
    out_vnet.flags = kVnetNeedsCsum;
    out_vnet.csum_start = static_cast<std::uint16_t>(l4);
    out_vnet.csum_offset = static_cast<std::uint16_t>(check_at);
  } else {
    l4h[check_at] = l4h[check_at + 1] = 0;
    std::uint16_t c = static_cast<std::uint16_t>(~csum_fold(csum_add(pseudo, l4h, l4_len)));
    if (!tcp && c == 0) c = 0xffff;
    put16(l4h + check_at, c);
  }
  if (count > 1) {
    out_vnet.gso_type = vnet.gso_type;
    out_vnet.gso_size = static_cast<std::uint16_t>(info.segment);
    out_vnet.hdr_len = static_cast<std::uint16_t>(h);
  }
}

}  // namespace wanlab::shaping
