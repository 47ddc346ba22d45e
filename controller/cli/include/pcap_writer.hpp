#pragma once
// `wanlab capture`'s pure part: which frames belong to a WAN link, and the pcap file format
// (the classic libpcap format, microsecond timestamps, Ethernet link type), written without
// libpcap.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>

#include "wanlab/core/address_plan.hpp"

namespace wanlab::cli {

/// Whether an Ethernet frame carries IPv4 (directly or behind one 802.1Q tag) with its source
/// address in `src`.
bool ipv4_from(std::span<const std::uint8_t> frame, const core::Ipv4Prefix& src);

/// The pcap global header: magic a1b2c3d4 (microseconds), version 2.4, `snaplen`, link type 1.
std::string pcap_file_header(std::uint32_t snaplen);
/// One record header: time since the epoch, bytes kept (at most `snaplen`), length on the wire.
std::string pcap_record_header(std::chrono::nanoseconds since_epoch, std::uint32_t kept, std::uint32_t wire_length);

/// Writes a pcap file; throws std::runtime_error naming the file on a failed write.
class PcapWriter {
 public:
  PcapWriter(const std::string& path, std::uint32_t snaplen);
  ~PcapWriter();
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;
  void write(std::chrono::nanoseconds since_epoch, std::span<const std::uint8_t> frame, std::uint32_t wire_length);
  void flush();

 private:
  void put(const void* data, std::size_t n);
  std::string path_;
  std::uint32_t snaplen_;
  std::FILE* f_ = nullptr;
};

}  // namespace wanlab::cli
