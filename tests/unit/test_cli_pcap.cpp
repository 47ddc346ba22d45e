// `wanlab capture`'s pure part: the link's frames chosen by source subnet, and the pcap format.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "pcap_writer.hpp"
#include "temp_dir.hpp"

using namespace wanlab;
using namespace wanlab::cli;

namespace {

std::vector<std::uint8_t> ipv4_frame(std::uint32_t src, bool vlan = false) {
  std::vector<std::uint8_t> f(12, 0xaa);
  if (vlan) f.insert(f.end(), {0x81, 0x00, 0x00, 0x05});
  f.insert(f.end(), {0x08, 0x00});
  std::vector<std::uint8_t> ip(20, 0);
  ip[0] = 0x45;
  ip[12] = static_cast<std::uint8_t>(src >> 24);
  ip[13] = static_cast<std::uint8_t>(src >> 16);
  ip[14] = static_cast<std::uint8_t>(src >> 8);
  ip[15] = static_cast<std::uint8_t>(src);
  f.insert(f.end(), ip.begin(), ip.end());
  return f;
}

template <typename T>
T at(const std::string& s, std::size_t off) {
  T v;
  std::memcpy(&v, s.data() + off, sizeof v);
  return v;
}

}  // namespace

TEST_CASE("capture keeps the IPv4 frames from the source DC's subnet", "[unit][cli][capture]") {
  const auto use = core::dc_subnet(0);  // 198.18.0.0/22
  CHECK(ipv4_from(ipv4_frame(0xC6120002), use));          // 198.18.0.2
  CHECK(ipv4_from(ipv4_frame(0xC6120002, true), use));    // behind a VLAN tag
  CHECK_FALSE(ipv4_from(ipv4_frame(0xC6120402), use));    // 198.18.4.2: DC 1
  auto arp = ipv4_frame(0xC6120002);
  arp[12] = 0x08;
  arp[13] = 0x06;
  CHECK_FALSE(ipv4_from(arp, use));
  auto short_frame = ipv4_frame(0xC6120002);
  short_frame.resize(20);
  CHECK_FALSE(ipv4_from(short_frame, use));
  CHECK_FALSE(ipv4_from({}, use));
}

TEST_CASE("pcap file and record headers", "[unit][cli][capture]") {
  const auto h = pcap_file_header(65535);
  REQUIRE(h.size() == 24);
  CHECK(at<std::uint32_t>(h, 0) == 0xa1b2c3d4);
  CHECK(at<std::uint16_t>(h, 4) == 2);
  CHECK(at<std::uint16_t>(h, 6) == 4);
  CHECK(at<std::uint32_t>(h, 16) == 65535);
  CHECK(at<std::uint32_t>(h, 20) == 1);  // Ethernet

  const auto r = pcap_record_header(std::chrono::nanoseconds(1'700'000'000'123'456'789), 60, 1514);
  REQUIRE(r.size() == 16);
  CHECK(at<std::uint32_t>(r, 0) == 1'700'000'000u);
  CHECK(at<std::uint32_t>(r, 4) == 123'456u);
  CHECK(at<std::uint32_t>(r, 8) == 60u);
  CHECK(at<std::uint32_t>(r, 12) == 1514u);

  wanlab::test::TempDir dir("pcap");
  const auto file = (dir.path() / "x.pcap").string();
  {
    PcapWriter w(file, 40);
    const auto f = ipv4_frame(0xC6120002);
    w.write(std::chrono::seconds(5), f, 100);
  }
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() == 24 + 16 + 34);  // the frame is 34 bytes, under the snap length
  CHECK(at<std::uint32_t>(bytes, 24) == 5u);
  CHECK(at<std::uint32_t>(bytes, 24 + 8) == 34u);
  CHECK(at<std::uint32_t>(bytes, 24 + 12) == 100u);
  CHECK_THROWS_WITH(PcapWriter("/nonexistent-dir/x.pcap", 40), Catch::Contains("/nonexistent-dir/x.pcap"));
}
