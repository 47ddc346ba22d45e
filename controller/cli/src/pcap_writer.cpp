#include "pcap_writer.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

namespace wanlab::cli {
namespace {

void put_u16(std::string& s, std::uint16_t v) { s.append(reinterpret_cast<const char*>(&v), sizeof v); }
void put_u32(std::string& s, std::uint32_t v) { s.append(reinterpret_cast<const char*>(&v), sizeof v); }

std::uint16_t be16(const std::uint8_t* p) { return static_cast<std::uint16_t>((p[0] << 8) | p[1]); }

}  // namespace

bool ipv4_from(std::span<const std::uint8_t> frame, const core::Ipv4Prefix& src) {
  std::size_t off = 12;
  if (frame.size() < off + 2) return false;
  std::uint16_t type = be16(&frame[off]);
  if (type == 0x8100) {  // one VLAN tag
    off += 4;
    if (frame.size() < off + 2) return false;
    type = be16(&frame[off]);
  }
  if (type != 0x0800) return false;
  const std::size_t ip = off + 2;
  if (frame.size() < ip + 20 || (frame[ip] >> 4) != 4) return false;
  const std::uint32_t saddr = (std::uint32_t{frame[ip + 12]} << 24) | (std::uint32_t{frame[ip + 13]} << 16) |
                              (std::uint32_t{frame[ip + 14]} << 8) | std::uint32_t{frame[ip + 15]};
  return src.contains(core::Ipv4{saddr});
}

// Host byte order throughout, as libpcap writes: readers tell the order from the magic.
std::string pcap_file_header(std::uint32_t snaplen) {
  std::string s;
  put_u32(s, 0xa1b2c3d4);
  put_u16(s, 2);
  put_u16(s, 4);
  put_u32(s, 0);  // thiszone
  put_u32(s, 0);  // sigfigs
  put_u32(s, snaplen);
  put_u32(s, 1);  // LINKTYPE_ETHERNET
  return s;
}

std::string pcap_record_header(std::chrono::nanoseconds since_epoch, std::uint32_t kept, std::uint32_t wire_length) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(since_epoch).count();
  std::string s;
  put_u32(s, static_cast<std::uint32_t>(us / 1'000'000));
  put_u32(s, static_cast<std::uint32_t>(us % 1'000'000));
  put_u32(s, kept);
  put_u32(s, wire_length);
  return s;
}

PcapWriter::PcapWriter(const std::string& path, std::uint32_t snaplen) : path_(path), snaplen_(snaplen) {
  f_ = std::fopen(path.c_str(), "wbe");
  if (!f_) throw std::runtime_error(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
  const auto h = pcap_file_header(snaplen);
  put(h.data(), h.size());
}

PcapWriter::~PcapWriter() {
  if (f_) std::fclose(f_);
}

void PcapWriter::put(const void* data, std::size_t n) {
  if (std::fwrite(data, 1, n, f_) != n) throw std::runtime_error(fmt::format("write {}: {}", path_, std::strerror(errno)));
}

void PcapWriter::write(std::chrono::nanoseconds since_epoch, std::span<const std::uint8_t> frame,
                       std::uint32_t wire_length) {
  const auto kept = static_cast<std::uint32_t>(std::min<std::size_t>(frame.size(), snaplen_));
  const auto h = pcap_record_header(since_epoch, kept, wire_length);
  put(h.data(), h.size());
  put(frame.data(), kept);
}

void PcapWriter::flush() {
  if (std::fflush(f_) != 0) throw std::runtime_error(fmt::format("write {}: {}", path_, std::strerror(errno)));
}

}  // namespace wanlab::cli
