// Whether this kernel has the netem qdisc, tried once in a throwaway namespace (or, without
// CAP_SYS_ADMIN, as in a container, on a throwaway veth pair in this one).
#include <sched.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <system_error>
#include <thread>

#include "wanlab/netlink/internal.hpp"
#include "wanlab/netlink/netlink.hpp"

namespace wanlab::netlink {

namespace {

bool probe_netem() {
  bool available = false;
  // A helper thread owns the probe namespace: no bind mount, nothing in /run/netns, and
  // when the thread ends the namespace goes with its veth and qdisc. The caller's thread
  // never changes namespace.
  std::thread prober([&available] {
    try {
      NetemParams params;
      params.delay = std::chrono::milliseconds(1);
      if (::unshare(CLONE_NEWNET) == 0) {
        Socket sock = Socket::open();
        sock.add_veth("probe0", "probe1", Netns::current(), 1500);
        sock.add_netem("probe0", Handle::root(), Handle{1, 0}, params);
        available = true;
        return;
      }
      // Without CAP_SYS_ADMIN (a container with NET_ADMIN only): a veth pair of our own
      // in this namespace, removed again.
      const int err = errno;
      Socket sock = Socket::open();
      const std::string name = fmt::format("wlprobe{}", ::getpid() % 100000);
      try {
        sock.add_veth(name, name + "p", Netns::current(), 1500);
      } catch (const std::exception& e) {
        log().warn("netem probe: unshare(CLONE_NEWNET): {}; and here: {}", std::generic_category().message(err),
                   e.what());
        return;
      }
      try {
        sock.add_netem(name, Handle::root(), Handle{1, 0}, params);
        available = true;
      } catch (const std::exception& e) {
        log().debug("netem probe: {}", e.what());
      }
      sock.delete_link(name);
    } catch (const std::exception& e) {
      log().debug("netem probe: {}", e.what());
    }
  });
  prober.join();
  log().debug("netem qdisc {}", available ? "available" : "not available");
  return available;
}

}  // namespace

bool netem_available() {
  static const bool available = probe_netem();
  return available;
}

}  // namespace wanlab::netlink
