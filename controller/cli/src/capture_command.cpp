// capture: the frames of one WAN link, as the link delivers them, into a pcap file.
//
// Where: the destination DC's gateway namespace, on its interface toward the WAN router
// (<dst>-wan), frames coming in from the router whose IPv4 source lies in the source DC's
// subnet. Every frame there has crossed the emulated link src->dst (the router forwards into
// that interface only the link's traffic), after its queue, rate, delay, jitter and loss,
// so this holds for both backends: the kernel's HTB + netem on the router's egress and the
// userspace engine (which transmits past the router's qdiscs, where a tap on the router's
// egress would not see its frames). Timestamps are the kernel's receive times
// (SO_TIMESTAMPNS). Frames are kept whole up to 256 KiB (GSO super-frames from the
// userspace engine are one record each, as tcpdump on a host shows them).
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "lab_lookup.hpp"
#include "pcap_writer.hpp"
#include "wanlab/common/unique_fd.hpp"
#include "wanlab/common/units.hpp"
#include "wanlab/core/address_plan.hpp"
#include "wanlab/lab/naming.hpp"
#include "wanlab/netlink/netlink.hpp"

namespace wanlab::cli {
namespace {

constexpr std::uint32_t kSnapLen = 256 * 1024;
volatile std::sig_atomic_t g_stop = 0;


// The kernel's receive time from recvmsg's control data (SCM_TIMESTAMPNS), walked by hand:
// the CMSG_* macros cast C-style.
std::optional<std::chrono::nanoseconds> receive_time(const char* control, std::size_t length) {
  constexpr auto align = [](std::size_t n) { return (n + sizeof(std::size_t) - 1) & ~(sizeof(std::size_t) - 1); };
  std::size_t off = 0;
  while (off + sizeof(cmsghdr) <= length) {
    cmsghdr h{};
    std::memcpy(&h, control + off, sizeof h);
    if (h.cmsg_len < sizeof(cmsghdr)) break;
    const std::size_t data = off + align(sizeof(cmsghdr));
    if (h.cmsg_level == SOL_SOCKET && h.cmsg_type == SCM_TIMESTAMPNS && data + sizeof(timespec) <= length) {
      timespec ts{};
      std::memcpy(&ts, control + data, sizeof ts);
      return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
    }
    off += align(h.cmsg_len);
  }
  return std::nullopt;
}

[[noreturn]] void fail(const std::string& what, const std::string& object) {
  throw std::runtime_error(fmt::format("{} {}: {}", what, object, std::strerror(errno)));
}

}  // namespace

int cmd_capture(const CaptureArgs& a) {
  std::optional<Duration> duration;
  if (a.duration) {
    const auto d = parse_duration(*a.duration);
    if (!d || d.value.count() <= 0) {
      fmt::print(stderr, "wanlab: capture: --duration: {}\n", d ? "must be more than 0" : d.error);
      return 2;
    }
    duration = d.value;
  }
  if (a.count && *a.count == 0) {
    fmt::print(stderr, "wanlab: capture: --count must be at least 1\n");
    return 2;
  }
  if (!check_privileges("capture")) return 1;
  const auto found = find_lab(a.lab);
  const auto& topo = found.topology;
  const auto& lab_name = found.state.lab;
  if (!found.state.router_ports.empty()) {
    fmt::print(stderr, "wanlab: capture: lab {} is a router-only lab (containers); capture inside the {} containers "
                       "instead (e.g. tcpdump)\n", lab_name, a.dst);
    return 1;
  }
  const auto src = topo.dc_index(a.src);
  const auto dst = topo.dc_index(a.dst);
  for (const auto& [given, index] : {std::pair{a.src, src}, std::pair{a.dst, dst}})
    if (!index) {
      std::vector<std::string> names;
      for (const auto& dc : topo.dcs) names.push_back(dc.name);
      fmt::print(stderr, "wanlab: capture: lab {} has no DC '{}' (DCs: {})\n", lab_name, given, fmt::join(names, ", "));
      return 2;
    }
  if (!topo.find_link(*src, *dst)) {
    fmt::print(stderr, "wanlab: capture: lab {} has no WAN link {}->{}\n", lab_name, a.src, a.dst);
    return 2;
  }
  const auto subnet = core::dc_subnet(static_cast<int>(*src));
  const auto ns_name = lab::ns_gateway(lab_name, a.dst);
  const auto ifname = lab::if_gateway_wan(a.dst);

  PcapWriter out(a.file, kSnapLen);  // opened here: a relative path is the caller's
  auto ns = netlink::Netns::open(ns_name);
  if (!ns) {
    fmt::print(stderr, "wanlab: capture: namespace {} is missing; the lab is broken: `wanlab down {}`\n", ns_name,
               lab_name);
    return 1;
  }
  if (::setns(ns->fd(), CLONE_NEWNET) != 0) fail("setns", ns_name);
  UniqueFd sock(::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL)));
  if (sock.get() < 0) fail("socket AF_PACKET", ifname);
  const int one = 1;
  if (::setsockopt(sock.get(), SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one) != 0) fail("SO_TIMESTAMPNS", ifname);
  const int rcvbuf = 16 << 20;
  (void)::setsockopt(sock.get(), SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf);
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(ETH_P_ALL);
  sll.sll_ifindex = static_cast<int>(::if_nametoindex(ifname.c_str()));
  if (sll.sll_ifindex == 0) fail("if_nametoindex", ns_name + ":" + ifname);
  if (::bind(sock.get(), reinterpret_cast<const sockaddr*>(&sll), sizeof sll) != 0) fail("bind", ifname);

  std::signal(SIGINT, [](int) { g_stop = 1; });
  std::signal(SIGTERM, [](int) { g_stop = 1; });
  std::string until = "Ctrl-C stops";
  if (a.count && duration)
    until = fmt::format("until {} frames or {}", *a.count, *a.duration);
  else if (a.count)
    until = fmt::format("until {} frames", *a.count);
  else if (duration)
    until = fmt::format("for {}", *a.duration);
  fmt::print(stderr,
             "capturing link {}->{} of lab {}: frames from {} as they reach DC {} ({}:{}) into {}; {}\n", a.src,
             a.dst, lab_name, subnet.to_string(), a.dst, ns_name, ifname, a.file,
             until);

  std::vector<std::uint8_t> buf(kSnapLen);
  alignas(cmsghdr) char control[128];
  std::uint64_t frames = 0, bytes = 0, truncated = 0;
  const auto deadline = duration ? std::optional(std::chrono::steady_clock::now() + *duration) : std::nullopt;
  while (!g_stop && (!a.count || frames < *a.count)) {
    int wait_ms = 200;
    if (deadline) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      wait_ms = static_cast<int>(std::min<std::int64_t>(wait_ms, left.count()));
    }
    pollfd p{sock.get(), POLLIN, 0};
    const int ready = ::poll(&p, 1, wait_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) fail("poll", ifname);
    if (ready == 0) continue;
    sockaddr_ll from{};
    iovec iov{buf.data(), buf.size()};
    msghdr msg{};
    msg.msg_name = &from;
    msg.msg_namelen = sizeof from;
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const auto n = ::recvmsg(sock.get(), &msg, MSG_TRUNC | MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) fail("recvmsg", ifname);
    if (from.sll_pkttype == PACKET_OUTGOING) continue;  // this DC's own traffic toward the WAN
    const auto kept = std::min<std::size_t>(static_cast<std::size_t>(n), buf.size());
    if (!ipv4_from({buf.data(), kept}, subnet)) continue;
    const auto at = receive_time(control, msg.msg_controllen)
                        .value_or(std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::system_clock::now().time_since_epoch()));
    if (static_cast<std::size_t>(n) > kept) ++truncated;
    out.write(at, {buf.data(), kept}, static_cast<std::uint32_t>(n));
    ++frames;
    bytes += static_cast<std::uint64_t>(n);
  }
  out.flush();
  fmt::print(stderr, "{} frames ({} bytes) of link {}->{} written to {}{}\n", frames, bytes, a.src, a.dst, a.file,
             truncated ? fmt::format(" ({} cut to {} bytes)", truncated, kSnapLen) : "");
  return 0;
}

}  // namespace wanlab::cli
