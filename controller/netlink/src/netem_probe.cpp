// Whether this kernel has the netem qdisc, tried once in a throwaway namespace.
#include <sched.h>

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
      if (::unshare(CLONE_NEWNET) != 0) {
        log().warn("netem probe: unshare(CLONE_NEWNET): {}", std::generic_category().message(errno));
        return;
      }
      Socket sock = Socket::open();
      sock.add_veth("probe0", "probe1", Netns::current(), 1500);
      NetemParams params;
      params.delay = std::chrono::milliseconds(1);
      sock.add_netem("probe0", Handle::root(), Handle{1, 0}, params);
      available = true;
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
