#include "wanlab/netlink/offloads.hpp"

#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "wanlab/common/unique_fd.hpp"

namespace wanlab::netlink {
namespace {

class IoctlSocket {
 public:
  explicit IoctlSocket(const Netns& ns) {
    ScopedNetns in(ns);
    fd_.reset(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd_) throw Error("open ethtool socket", "in " + ns.name(), errno);
  }

  // ETHTOOL_G* / ETHTOOL_S* with a struct ethtool_value.
  std::uint32_t call(const Netns& ns, const std::string& ifname, std::uint32_t cmd, std::uint32_t value,
                     const char* what) {
    ethtool_value ev{};
    ev.cmd = cmd;
    ev.data = value;
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
    ifr.ifr_data = reinterpret_cast<char*>(&ev);
    if (::ioctl(fd_.get(), SIOCETHTOOL, &ifr) != 0) throw Error(what, ifname + " in " + ns.name(), errno);
    return ev.data;
  }

 private:
  UniqueFd fd_;
};

}  // namespace

void disable_offloads(const Netns& ns, const std::string& ifname) {
  IoctlSocket s(ns);
  // TSO depends on checksum offload; turning both off explicitly keeps the intent clear.
  s.call(ns, ifname, ETHTOOL_STSO, 0, "ethtool tso off");
  s.call(ns, ifname, ETHTOOL_SGSO, 0, "ethtool gso off");
  s.call(ns, ifname, ETHTOOL_STXCSUM, 0, "ethtool tx-checksumming off");
}

}  // namespace wanlab::netlink
