#pragma once
// Internal to the netlink layer and its tests: owners for libnl objects, the
// translation of libnl error codes, the module's logger. It includes libnl headers, so
// nothing outside controller/netlink and tests/*/test_netlink* may include it.
#include <netlink/cache.h>
#include <netlink/errno.h>
#include <netlink/handlers.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <netlink/object.h>
#include <netlink/route/addr.h>
#include <netlink/route/class.h>
#include <netlink/route/classifier.h>
#include <netlink/route/link.h>
#include <netlink/route/qdisc.h>
#include <netlink/route/route.h>
#include <netlink/route/tc.h>
#include <netlink/socket.h>

#include <spdlog/logger.h>

#include <memory>
#include <vector>
#include <string>

namespace wanlab::netlink::libnl {

/// Calls a libnl release function (nl_socket_free, rtnl_link_put, ...).
template <auto Release>
struct Releaser {
  template <class T>
  void operator()(T* p) const noexcept {
    Release(p);
  }
};

using SockPtr = std::unique_ptr<nl_sock, Releaser<nl_socket_free>>;
using MsgPtr = std::unique_ptr<nl_msg, Releaser<nlmsg_free>>;
using CbPtr = std::unique_ptr<nl_cb, Releaser<nl_cb_put>>;
using CachePtr = std::unique_ptr<nl_cache, Releaser<nl_cache_free>>;
using ObjectPtr = std::unique_ptr<nl_object, Releaser<nl_object_put>>;
using AddrPtr = std::unique_ptr<nl_addr, Releaser<nl_addr_put>>;
using LinkPtr = std::unique_ptr<rtnl_link, Releaser<rtnl_link_put>>;
using IfAddrPtr = std::unique_ptr<rtnl_addr, Releaser<rtnl_addr_put>>;
using RoutePtr = std::unique_ptr<rtnl_route, Releaser<rtnl_route_put>>;
using NexthopPtr = std::unique_ptr<rtnl_nexthop, Releaser<rtnl_route_nh_free>>;
using QdiscPtr = std::unique_ptr<rtnl_qdisc, Releaser<rtnl_qdisc_put>>;
using ClassPtr = std::unique_ptr<rtnl_class, Releaser<rtnl_class_put>>;
using ClsPtr = std::unique_ptr<rtnl_cls, Releaser<rtnl_cls_put>>;

/// rtnl_qdisc, rtnl_class and rtnl_cls all start with an rtnl_tc (what TC_CAST does,
/// without its C-style cast).
template <class T>
rtnl_tc* as_tc(T* object) {
  return reinterpret_cast<rtnl_tc*>(object);
}

/// A libnl error code (negative NLE_*) as the closest positive errno.
int to_errno(int nl_error);
/// libnl's text for an error code.
std::string describe(int nl_error);

}  // namespace wanlab::netlink::libnl

namespace wanlab::netlink {
/// The "netlink" spdlog logger (created on first use if the application did not).
spdlog::logger& log();

/// The names in a folder, sorted, without "." and ".."; none when the folder does not exist.
/// Other failures throw an Error naming `operation` and the folder.
std::vector<std::string> sorted_dir_entries(const char* dir_path, const char* operation);
}  // namespace wanlab::netlink
