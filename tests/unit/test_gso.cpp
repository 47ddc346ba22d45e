// GSO super-frames in the userspace engine (shaping/gso.hpp): what a super-frame stands
// for on the wire, and cutting it into chunks that are valid frames themselves.
#include <catch2/catch.hpp>

#include <vector>

#include "wanlab/shaping/gso.hpp"
#include "wanlab/shaping/link_model.hpp"

using namespace wanlab;
using namespace wanlab::shaping;
using namespace std::chrono_literals;

namespace {

constexpr std::uint32_t kTcpHeader = 32;  // with timestamps
constexpr std::uint32_t kMss = 1448;

std::uint32_t get16(const std::uint8_t* p) { return static_cast<std::uint32_t>(p[0] << 8 | p[1]); }
std::uint32_t get32(const std::uint8_t* p) { return get16(p) << 16 | get16(p + 2); }
void put16(std::uint8_t* p, std::uint32_t v) {
  p[0] = static_cast<std::uint8_t>(v >> 8);
  p[1] = static_cast<std::uint8_t>(v);
}

std::uint32_t pseudo_sum(const std::uint8_t* ip, std::uint32_t l4_len) {
  return csum_add(ip[9] + l4_len, ip + 12, 8);
}

// A TCP/IPv4 super-frame as a sender's TSO hands it to a veth: IP length of the whole,
// checksum left to complete (the field holds the pseudo-header sum over the whole length).
struct Frame {
  std::vector<std::uint8_t> bytes;
  VnetHdr vnet;
};
Frame tcp_superframe(std::uint32_t payload, std::uint8_t flags, bool partial = true) {
  Frame f;
  const std::uint32_t h = 14 + 20 + kTcpHeader;
  f.bytes.assign(h + payload, 0);
  auto* b = f.bytes.data();
  b[12] = 0x08;
  b[14] = 0x45;
  put16(b + 16, 20 + kTcpHeader + payload);
  put16(b + 18, 0x1234);  // IP ID
  b[22] = 64;
  b[23] = 6;
  const std::uint8_t addrs[] = {198, 18, 0, 2, 198, 18, 4, 2};
  std::copy(std::begin(addrs), std::end(addrs), b + 26);
  put16(b + 24, static_cast<std::uint16_t>(~csum_fold(csum_add(0, b + 14, 20))));
  std::uint8_t* tcp = b + 34;
  put16(tcp, 40000);
  put16(tcp + 2, 5201);
  put16(tcp + 4, 0xfffe);  // sequence 0xfffe0000: wraps within the frame
  tcp[12] = (kTcpHeader / 4) << 4;
  tcp[13] = flags;
  for (std::uint32_t i = 0; i < payload; ++i) b[h + i] = static_cast<std::uint8_t>(i * 7 + i / 251);
  f.vnet.gso_type = kGsoTcpV4;
  f.vnet.gso_size = kMss;
  f.vnet.hdr_len = static_cast<std::uint16_t>(h);
  if (partial) {
    f.vnet.flags = kVnetNeedsCsum;
    f.vnet.csum_start = 34;
    f.vnet.csum_offset = 16;
    put16(tcp + 16, csum_fold(pseudo_sum(b + 14, kTcpHeader + payload)));
  } else {
    put16(tcp + 16, static_cast<std::uint16_t>(~csum_fold(csum_add(pseudo_sum(b + 14, kTcpHeader + payload), tcp,
                                                                   kTcpHeader + payload))));
  }
  return f;
}

struct Chunk {
  std::vector<std::uint8_t> bytes;
  std::uint32_t segments;
  VnetHdr vnet;
};
std::vector<Chunk> cut(const Frame& f, std::uint32_t per) {
  const auto info = gso_info(f.vnet, f.bytes.data(), static_cast<std::uint32_t>(f.bytes.size()));
  std::vector<Chunk> out;
  split(
      f.vnet, f.bytes.data(), static_cast<std::uint32_t>(f.bytes.size()), info, per,
      [&](std::uint32_t len, std::uint32_t count) {
        out.push_back({std::vector<std::uint8_t>(len), count, {}});
        return out.back().bytes.data();
      },
      [&](std::uint32_t len, std::uint32_t count, const VnetHdr& v) {
        CHECK(len == out.back().bytes.size());
        CHECK(count == out.back().segments);
        out.back().vnet = v;
      });
  return out;
}

// The L4 checksum of a chunk as the receiver checks it, completing it first where it
// was left to the kernel (as the kernel does: the sum from csum_start, stored at
// csum_offset).
bool l4_checksum_ok(Chunk c) {
  auto* b = c.bytes.data();
  const std::uint32_t l4_len = static_cast<std::uint32_t>(c.bytes.size()) - 34;
  if (c.vnet.flags & kVnetNeedsCsum) {
    auto* field = b + c.vnet.csum_start + c.vnet.csum_offset;
    put16(field, static_cast<std::uint16_t>(~csum_fold(csum_add(0, b + c.vnet.csum_start, l4_len))));
  }
  return csum_fold(csum_add(pseudo_sum(b + 14, l4_len), b + 34, l4_len)) == 0xffff;
}

}  // namespace

TEST_CASE("a super-frame stands for its segments on the wire", "[unit][engine][gso]") {
  const auto f = tcp_superframe(10'000, 0x18);
  const auto info = gso_info(f.vnet, f.bytes.data(), static_cast<std::uint32_t>(f.bytes.size()));
  CHECK(info.segments == 7);  // ceil(10000 / 1448)
  CHECK(info.header == 66);
  CHECK(info.segment == kMss);
  CHECK(info.wire_bytes == f.bytes.size() + 6 * 66);
  CHECK(info.splittable);

  SECTION("a frame without GSO is one packet of its length") {
    const auto one = gso_info(VnetHdr{}, f.bytes.data(), 1514);
    CHECK(one.segments == 1);
    CHECK(one.wire_bytes == 1514);
    CHECK_FALSE(one.splittable);
  }
  SECTION("chunks take at most 125 us at the link's rate") {
    CHECK(segments_per_chunk(info, 1'000'000'000) == 7);       // 10 would fit; the frame has 7
    auto big = gso_info(f.vnet, tcp_superframe(60'000, 0x10).bytes.data(), 66 + 60'000);
    CHECK(big.segments == 42);
    CHECK(segments_per_chunk(big, 1'000'000'000) == 10);       // 125 us x 1 Gbit/s / (1514 x 8 bits) = 10.3
    CHECK(segments_per_chunk(big, 100'000'000) == 1);
    CHECK(segments_per_chunk(big, 10'000'000'000) == 42);
    CHECK(segments_per_chunk(big, 0) == 42);                   // an outage: no timing to keep
  }
}

TEST_CASE("cutting a TCP super-frame rewrites each chunk as the kernel's GSO would", "[unit][engine][gso]") {
  const std::uint8_t flags = 0x80 | 0x10 | 0x08 | 0x01;  // CWR ACK PSH FIN
  for (bool partial : {true, false}) {
    DYNAMIC_SECTION((partial ? "checksum left to the kernel" : "checksum complete")) {
      const auto f = tcp_superframe(10'000, flags, partial);
      for (std::uint32_t per : {1u, 3u}) {
        const auto chunks = cut(f, per);
        REQUIRE(chunks.size() == (per == 1 ? 7u : 3u));
        std::vector<std::uint8_t> payload;
        std::uint32_t seg = 0;
        for (std::size_t i = 0; i < chunks.size(); ++i) {
          INFO("per " << per << " chunk " << i);
          const auto& c = chunks[i];
          const auto* b = c.bytes.data();
          const std::uint32_t plen = static_cast<std::uint32_t>(c.bytes.size()) - 66;
          CHECK(get16(b + 16) == 52 + plen);                       // IP total length
          CHECK(get16(b + 18) == 0x1234 + seg);                    // IP ID per segment
          CHECK(csum_fold(csum_add(0, b + 14, 20)) == 0xffff);     // IP header checksum
          CHECK(get32(b + 38) == 0xfffe0000u + seg * kMss);        // TCP sequence
          const std::uint8_t fl = b[47];
          CHECK(((fl & 0x80) != 0) == (i == 0));                   // CWR on the first only
          CHECK(((fl & 0x09) == 0x09) == (i + 1 == chunks.size()));  // FIN, PSH on the last only
          CHECK((fl & 0x10) != 0);                                 // ACK on all
          CHECK(l4_checksum_ok(c));
          CHECK(((c.vnet.flags & kVnetNeedsCsum) != 0) == partial);
          if (c.segments > 1) {
            CHECK(c.vnet.gso_type == kGsoTcpV4);
            CHECK(c.vnet.gso_size == kMss);
            CHECK(c.vnet.hdr_len == 66);
            CHECK(plen == c.segments * kMss);
          } else {
            CHECK(c.vnet.gso_type == kGsoNone);
          }
          payload.insert(payload.end(), b + 66, b + c.bytes.size());
          seg += c.segments;
        }
        CHECK(seg == 7);
        CHECK(payload == std::vector<std::uint8_t>(f.bytes.begin() + 66, f.bytes.end()));
      }
    }
  }
}

TEST_CASE("cutting a UDP super-frame gives each datagram its length and checksum", "[unit][engine][gso]") {
  auto f = tcp_superframe(3000, 0);
  auto* b = f.bytes.data();
  // Rewrite as UDP: 8-byte header, payload after it.
  f.bytes.erase(f.bytes.begin() + 42, f.bytes.begin() + 66);
  b = f.bytes.data();
  b[23] = 17;
  put16(b + 16, 28 + 3000);
  b[24] = b[25] = 0;
  put16(b + 24, static_cast<std::uint16_t>(~csum_fold(csum_add(0, b + 14, 20))));
  put16(b + 38, 8 + 3000);
  put16(b + 40, csum_fold(pseudo_sum(b + 14, 8 + 3000)));
  f.vnet.gso_type = kGsoUdpL4;
  f.vnet.gso_size = 1000;
  f.vnet.csum_offset = 6;
  const auto info = gso_info(f.vnet, b, static_cast<std::uint32_t>(f.bytes.size()));
  CHECK(info.segments == 3);
  CHECK(info.header == 42);
  const auto chunks = cut(f, 1);
  REQUIRE(chunks.size() == 3);
  for (const auto& c : chunks) {
    CHECK(c.bytes.size() == 42 + 1000);
    CHECK(get16(c.bytes.data() + 38) == 1008);  // UDP length
    CHECK(l4_checksum_ok(c));
  }
}

TEST_CASE("a unit of several packets counts as them in the link model", "[unit][engine][gso]") {
  LinkModel m({Rate{1'000'000'000}, 10ms, {}, {}, {QueueLimit::Unit::packets, 10}}, 100, 1);
  // Three super-frames of 4 segments (1514 bytes each on the wire): the third exceeds 10.
  CHECK(m.arrive(0, 4 * 1514, 0, 4) == LinkModel::Verdict::queued);
  CHECK(m.arrive(1, 4 * 1514, 0, 4) == LinkModel::Verdict::queued);
  CHECK(m.arrive(2, 4 * 1514, 0, 4) == LinkModel::Verdict::dropped_queue);
  CHECK(m.counters().packets_in == 12);
  CHECK(m.counters().queued_packets == 8);
  CHECK(m.counters().dropped_queue == 4);
  // Serialized at the rate for all their bytes: 48.448 us each, then 10 ms.
  m.advance(48'448);
  CHECK(m.counters().in_flight_packets == 4);
  m.advance(96'896);
  CHECK_FALSE(m.release(10'048'447).has_value());
  CHECK(m.release(10'048'448).has_value());
  CHECK_FALSE(m.release(10'096'895).has_value());
  CHECK(m.release(10'096'896).has_value());
  CHECK(m.counters().packets_out == 8);
  CHECK(m.counters().bytes_out == 8 * 1514);
  CHECK(m.counters().in_flight_packets == 0);
}
