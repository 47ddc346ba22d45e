// The userspace engine's packet socket against this kernel: what its RX ring cannot hold
// is counted (PACKET_STATISTICS), so a lab's backend_counters say when the engine read too
// late.
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "wanlab/netlink/netlink.hpp"
#include "wanlab/shaping/packet_socket.hpp"

using namespace wanlab;
using namespace std::chrono_literals;

namespace {

struct TwoNamespaces {
  std::string a_name = "wlps" + std::to_string(::getpid()) + "a";
  std::string b_name = "wlps" + std::to_string(::getpid()) + "b";
  std::optional<netlink::Netns> a, b;
  TwoNamespaces() {
    a = netlink::Netns::create(a_name);
    b = netlink::Netns::create(b_name);
    REQUIRE(a);
    REQUIRE(b);
    auto sa = netlink::Socket::open_in(*a);
    auto sb = netlink::Socket::open_in(*b);
    sa.add_veth("pa", "pb", *b, 1500);
    sa.set_up("pa");
    sb.set_up("pb");
  }
  ~TwoNamespaces() {
    for (const auto& n : {a_name, b_name}) {
      try {
        netlink::Netns::remove(n);
      } catch (...) {
      }
    }
  }
};

// Sends `n` Ethernet frames of `len` bytes (a local experimental EtherType) out of `ifname`.
void send_frames(const netlink::Netns& ns, const std::string& ifname, int n, std::size_t len) {
  netlink::ScopedNetns in(ns);
  const int fd = ::socket(AF_PACKET, SOCK_RAW, 0);
  REQUIRE(fd >= 0);
  sockaddr_ll to{};
  to.sll_family = AF_PACKET;
  to.sll_ifindex = static_cast<int>(::if_nametoindex(ifname.c_str()));
  to.sll_halen = ETH_ALEN;
  REQUIRE(to.sll_ifindex > 0);
  std::vector<std::uint8_t> frame(len, 0);
  std::memset(frame.data(), 0xff, ETH_ALEN);  // broadcast
  frame[6] = 0x02;                             // a locally administered source
  frame[12] = 0x88;                            // EtherType 0x88b5: local experimental
  frame[13] = 0xb5;
  int sent = 0;
  for (int i = 0; i < n; ++i)
    if (::sendto(fd, frame.data(), frame.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof to) ==
        static_cast<ssize_t>(frame.size()))
      ++sent;
  ::close(fd);
  REQUIRE(sent == n);
}

}  // namespace

TEST_CASE("a packet socket counts the frames its full RX ring dropped", "[netns][engine]") {
  TwoNamespaces ns;
  // 32 slots (one 64 KiB block of 2 KiB frames); frames of 200..1514 bytes only, so the
  // link's own chatter (IPv6 neighbour discovery, under 100 bytes) stays out.
  const shaping::Ring ring{2048, 32, 32};
  shaping::PacketSocket sock(*ns.b, "pb", ring, 200, 1514);
  CHECK(sock.rx_ring_dropped() == 0);

  // Nobody reads: 32 frames fill the ring, the other 68 are dropped.
  send_frames(*ns.a, "pa", 100, 300);
  std::this_thread::sleep_for(100ms);
  CHECK(sock.rx_ring_dropped() == 68);
  // The kernel's count resets when read; the socket keeps the sum.
  CHECK(sock.rx_ring_dropped() == 68);

  // Read them all: the ring has room again, and nothing more is dropped.
  int read = 0;
  shaping::PacketSocket::Received r{};
  while (sock.peek(r)) {
    CHECK(r.len == 300);
    sock.pop();
    ++read;
  }
  CHECK(read == 32);
  send_frames(*ns.a, "pa", 10, 300);
  std::this_thread::sleep_for(100ms);
  CHECK(sock.rx_ring_dropped() == 68);
  read = 0;
  while (sock.peek(r)) {
    sock.pop();
    ++read;
  }
  CHECK(read == 10);
}
