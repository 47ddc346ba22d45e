// A NETLINK_ROUTE socket bound to one namespace: links, addresses, routes, traffic
// control. Each request waits for the kernel's answer; errors carry the kernel's errno
// and its extended-ack text.
#include <arpa/inet.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <linux/ip.h>
#include <netlink/route/link/inet.h>
#include <netlink/route/link/veth.h>
#include <sys/socket.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <new>

#include "wanlab/netlink/internal.hpp"
#include "wanlab/netlink/netlink.hpp"

namespace wanlab::netlink {

namespace {

using ReplyHandler = std::function<void(nl_msg*)>;

// The outcome of one request, filled in by libnl callbacks.
struct Exchange {
  const ReplyHandler* on_reply = nullptr;
  bool done = false;
  int error = 0;       // positive errno from the kernel's ack
  std::string detail;  // the kernel's extended-ack message, if any
  std::exception_ptr handler_error;
};

// The text of NLMSGERR_ATTR_MSG in an error ack (sockets set NETLINK_EXT_ACK).
std::string ack_message(const nlmsgerr* err) {
  const auto* hdr = reinterpret_cast<const nlmsghdr*>(reinterpret_cast<const char*>(err) - NLMSG_HDRLEN);
  if ((hdr->nlmsg_flags & NLM_F_ACK_TLVS) == 0) return {};
  std::size_t offset = sizeof(nlmsgerr);
  if ((hdr->nlmsg_flags & NLM_F_CAPPED) == 0) offset += err->msg.nlmsg_len - NLMSG_HDRLEN;  // request echoed
  offset = NLMSG_ALIGN(offset);
  const std::size_t payload = hdr->nlmsg_len - NLMSG_HDRLEN;
  if (offset >= payload) return {};
  const auto* attrs = reinterpret_cast<const nlattr*>(reinterpret_cast<const char*>(err) + offset);
  const nlattr* text = nla_find(attrs, static_cast<int>(payload - offset), NLMSGERR_ATTR_MSG);
  if (text == nullptr || nla_len(text) <= 0) return {};
  const auto* chars = static_cast<const char*>(nla_data(text));
  return std::string(chars, strnlen(chars, static_cast<std::size_t>(nla_len(text))));
}

int on_valid(nl_msg* msg, void* arg) {
  auto* ex = static_cast<Exchange*>(arg);
  if (ex->on_reply != nullptr && !ex->handler_error) {
    try {
      (*ex->on_reply)(msg);
    } catch (...) {
      ex->handler_error = std::current_exception();  // never through libnl's C frames
    }
  }
  return NL_OK;
}

int on_done(nl_msg* /*msg*/, void* arg) {
  static_cast<Exchange*>(arg)->done = true;
  return NL_STOP;
}

int on_error(sockaddr_nl* /*who*/, nlmsgerr* err, void* arg) {
  auto* ex = static_cast<Exchange*>(arg);
  ex->error = -err->error;
  ex->detail = ack_message(err);
  ex->done = true;
  return NL_STOP;
}

// Sends `msg` and reads until the kernel's ack (or the end of a dump), passing every
// reply to `on_reply`. Returns 0 or a positive errno; `detail` gets the reason's text.
int exchange(nl_sock* sock, nl_msg* msg, const ReplyHandler* on_reply, std::string& detail) {
  const int sent = nl_send_auto(sock, msg);
  if (sent < 0) {
    detail = libnl::describe(sent);
    return libnl::to_errno(sent);
  }
  const libnl::CbPtr defaults(nl_socket_get_cb(sock));  // a new reference
  libnl::CbPtr cb(nl_cb_clone(defaults.get()));
  if (!cb) return ENOMEM;
  Exchange ex;
  ex.on_reply = on_reply;
  nl_cb_set(cb.get(), NL_CB_VALID, NL_CB_CUSTOM, on_valid, &ex);
  nl_cb_set(cb.get(), NL_CB_ACK, NL_CB_CUSTOM, on_done, &ex);
  nl_cb_set(cb.get(), NL_CB_FINISH, NL_CB_CUSTOM, on_done, &ex);
  nl_cb_err(cb.get(), NL_CB_CUSTOM, on_error, &ex);
  while (!ex.done) {
    const int rc = nl_recvmsgs(sock, cb.get());
    if (rc < 0 && !ex.done) {
      detail = libnl::describe(rc);
      return libnl::to_errno(rc);
    }
  }
  if (ex.handler_error) std::rethrow_exception(ex.handler_error);
  detail = ex.detail;
  return ex.error;
}

std::string in_ns(const std::string& object, const std::string& ns) {
  return ns.empty() ? object : object + " in " + ns;
}

std::string ipv4_text(std::uint32_t host_order) {
  return fmt::format("{}.{}.{}.{}", host_order >> 24, (host_order >> 16) & 0xff, (host_order >> 8) & 0xff,
                     host_order & 0xff);
}

libnl::AddrPtr ipv4_addr(std::uint32_t host_order, int prefix_len) {
  const std::uint32_t be = htonl(host_order);
  libnl::AddrPtr addr(nl_addr_build(AF_INET, &be, sizeof(be)));
  if (!addr) throw std::bad_alloc();
  nl_addr_set_prefixlen(addr.get(), prefix_len);
  return addr;
}

// libnl silently truncates longer names; the kernel would refuse them anyway.
void check_ifname(const std::string& name, const std::string& operation, const std::string& object) {
  if (name.empty() || name.size() >= IFNAMSIZ) {
    throw Error(operation, object, EINVAL,
                fmt::format("interface name '{}' is not 1 to {} characters", name, IFNAMSIZ - 1));
  }
}

template <class T>
T* check_alloc(T* object, const std::string& operation, const std::string& object_name) {
  if (object == nullptr) throw Error(operation, object_name, ENOMEM);
  return object;
}

void check(int rc, const std::string& operation, const std::string& object) {
  if (rc < 0) throw Error(operation, object, libnl::to_errno(rc), libnl::describe(rc));
}

// A link change request addressed by name (ifi_index 0, IFLA_IFNAME): one round trip,
// no index lookup.
libnl::LinkPtr link_change(const std::string& ifname, const std::string& operation, const std::string& object) {
  check_ifname(ifname, operation, object);
  libnl::LinkPtr changes(check_alloc(rtnl_link_alloc(), operation, object));
  rtnl_link_set_name(changes.get(), ifname.c_str());
  return changes;
}

Message change_message(rtnl_link* changes, const std::string& operation, const std::string& object) {
  const libnl::LinkPtr orig(check_alloc(rtnl_link_alloc(), operation, object));
  nl_msg* raw = nullptr;
  check(rtnl_link_build_change_request(orig.get(), changes, 0, &raw), operation, object);
  return Message(raw);
}

std::optional<libnl::ObjectPtr> parse_object(nl_msg* msg) {
  std::optional<libnl::ObjectPtr> result;
  nl_msg_parse(
      msg,
      [](nl_object* obj, void* arg) {
        nl_object_get(obj);
        static_cast<std::optional<libnl::ObjectPtr>*>(arg)->emplace(obj);
      },
      &result);
  return result;
}

TcStats stats_of(nl_object* obj) {
  rtnl_tc* tc = libnl::as_tc(obj);
  TcStats s;
  s.packets = rtnl_tc_get_stat(tc, RTNL_TC_PACKETS);
  s.bytes = rtnl_tc_get_stat(tc, RTNL_TC_BYTES);
  s.drops = rtnl_tc_get_stat(tc, RTNL_TC_DROPS);
  s.overlimits = rtnl_tc_get_stat(tc, RTNL_TC_OVERLIMITS);
  s.qlen = rtnl_tc_get_stat(tc, RTNL_TC_QLEN);
  s.backlog = rtnl_tc_get_stat(tc, RTNL_TC_BACKLOG);
  return s;
}

// Receive buffer for one datagram: the kernel builds dump datagrams of at most 32 KiB.
constexpr std::size_t kReceiveBuffer = 64 * 1024;

}  // namespace

Socket::Socket(nl_sock* s, std::string ns_name) : sock_(s), ns_name_(std::move(ns_name)) {}

Socket::Socket(Socket&& o) noexcept : sock_(std::exchange(o.sock_, nullptr)), ns_name_(std::move(o.ns_name_)) {}

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    if (sock_ != nullptr) nl_socket_free(sock_);
    sock_ = std::exchange(o.sock_, nullptr);
    ns_name_ = std::move(o.ns_name_);
  }
  return *this;
}

Socket::~Socket() {
  if (sock_ != nullptr) nl_socket_free(sock_);  // closes the fd
}

Socket Socket::open() {
  const std::string object = "NETLINK_ROUTE socket";
  libnl::SockPtr sock(check_alloc(nl_socket_alloc(), "open", object));
  check(nl_connect(sock.get(), NETLINK_ROUTE), "open", object);
  // One recvmsg per datagram instead of a MSG_PEEK probe first.
  nl_socket_disable_msg_peek(sock.get());
  check(nl_socket_set_msg_buf_size(sock.get(), kReceiveBuffer), "open", object);
  // The kernel's reason text in error acks, without echoing our request back. Optional:
  // older kernels simply give the errno alone.
  const int on = 1;
  const int fd = nl_socket_get_fd(sock.get());
  ::setsockopt(fd, SOL_NETLINK, NETLINK_EXT_ACK, &on, sizeof(on));
  ::setsockopt(fd, SOL_NETLINK, NETLINK_CAP_ACK, &on, sizeof(on));
  return Socket(sock.release(), "");
}

Socket Socket::open_in(const Netns& ns) {
  // A netlink socket belongs to the namespace it was created in, whatever thread uses it.
  const ScopedNetns inside(ns);
  Socket s = open();
  s.ns_name_ = ns.name();
  return s;
}

void Socket::send(Message msg, const std::string& what, const std::string& object) {
  std::string detail;
  const int err = exchange(sock_, msg.get(), nullptr, detail);
  if (err != 0) throw Error(what, object, err, detail);
}

// ---- links -------------------------------------------------------------------------

std::optional<int> Socket::ifindex(const std::string& ifname) {
  const std::string op = "look up interface";
  const std::string object = in_ns(ifname, ns_name_);
  check_ifname(ifname, op, object);
  nl_msg* raw = nullptr;
  check(rtnl_link_build_get_request(0, ifname.c_str(), &raw), op, object);
  const Message msg(raw);
  std::optional<int> index;
  const ReplyHandler on_reply = [&](nl_msg* reply) {
    const nlmsghdr* hdr = nlmsg_hdr(reply);
    if (hdr->nlmsg_type == RTM_NEWLINK && nlmsg_datalen(hdr) >= static_cast<int>(sizeof(ifinfomsg))) {
      index = static_cast<const ifinfomsg*>(nlmsg_data(hdr))->ifi_index;
    }
  };
  std::string detail;
  const int err = exchange(sock_, msg.get(), &on_reply, detail);
  if (err == ENODEV) return std::nullopt;
  if (err != 0) throw Error(op, object, err, detail);
  return index;
}

namespace {
int require_ifindex(Socket& s, const std::string& ifname, const std::string& operation, const std::string& object) {
  const std::optional<int> index = s.ifindex(ifname);
  if (!index) throw Error(operation, object, ENODEV, fmt::format("no interface '{}'", ifname));
  return *index;
}
}  // namespace

void Socket::add_veth(const std::string& name, const std::string& peer, const Netns& peer_ns, int mtu) {
  const std::string op = "add veth";
  const std::string object = fmt::format("{} (peer {})", in_ns(name, ns_name_), in_ns(peer, peer_ns.name()));
  check_ifname(name, op, object);
  check_ifname(peer, op, object);
  libnl::LinkPtr link(check_alloc(rtnl_link_veth_alloc(), op, object));
  rtnl_link_set_name(link.get(), name.c_str());
  rtnl_link_set_mtu(link.get(), static_cast<unsigned>(mtu));
  const libnl::LinkPtr peer_link(check_alloc(rtnl_link_veth_get_peer(link.get()), op, object));
  rtnl_link_set_name(peer_link.get(), peer.c_str());
  rtnl_link_set_mtu(peer_link.get(), static_cast<unsigned>(mtu));
  // Created directly in its namespace: it never appears here, so no name clash or move.
  rtnl_link_set_ns_fd(peer_link.get(), peer_ns.fd());
  nl_msg* raw = nullptr;
  check(rtnl_link_build_add_request(link.get(), NLM_F_CREATE | NLM_F_EXCL, &raw), op, object);
  send(Message(raw), op, object);
}

void Socket::add_bridge(const std::string& name, int mtu) {
  const std::string op = "add bridge";
  const std::string object = in_ns(name, ns_name_);
  check_ifname(name, op, object);
  libnl::LinkPtr link(check_alloc(rtnl_link_alloc(), op, object));
  check(rtnl_link_set_type(link.get(), "bridge"), op, object);
  rtnl_link_set_name(link.get(), name.c_str());
  rtnl_link_set_mtu(link.get(), static_cast<unsigned>(mtu));
  nl_msg* raw = nullptr;
  check(rtnl_link_build_add_request(link.get(), NLM_F_CREATE | NLM_F_EXCL, &raw), op, object);
  send(Message(raw), op, object);
}

bool Socket::delete_link(const std::string& ifname) {
  const std::string op = "delete link";
  const std::string object = in_ns(ifname, ns_name_);
  const libnl::LinkPtr link = link_change(ifname, op, object);
  nl_msg* raw = nullptr;
  check(rtnl_link_build_delete_request(link.get(), &raw), op, object);
  const Message msg(raw);
  std::string detail;
  const int err = exchange(sock_, msg.get(), nullptr, detail);
  if (err == ENODEV) return false;
  if (err != 0) throw Error(op, object, err, detail);
  return true;
}

void Socket::set_master(const std::string& ifname, const std::string& master) {
  const std::string op = "set master";
  const std::string object = in_ns(fmt::format("{} to {}", ifname, master), ns_name_);
  const int master_index = require_ifindex(*this, master, op, object);
  const libnl::LinkPtr changes = link_change(ifname, op, object);
  rtnl_link_set_master(changes.get(), master_index);
  send(change_message(changes.get(), op, object), op, object);
}

void Socket::set_up(const std::string& ifname) {
  const std::string op = "set up";
  const std::string object = in_ns(ifname, ns_name_);
  const libnl::LinkPtr changes = link_change(ifname, op, object);
  rtnl_link_set_flags(changes.get(), IFF_UP);
  send(change_message(changes.get(), op, object), op, object);
}

void Socket::set_alias(const std::string& ifname, const std::string& alias) {
  const std::string op = "set alias";
  const std::string object = in_ns(ifname, ns_name_);
  const libnl::LinkPtr changes = link_change(ifname, op, object);
  rtnl_link_set_ifalias(changes.get(), alias.c_str());
  send(change_message(changes.get(), op, object), op, object);
}

void Socket::set_mac(const std::string& ifname, const std::array<std::uint8_t, 6>& mac) {
  const std::string op = "set hardware address";
  const std::string object = in_ns(fmt::format("{} to {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", ifname, mac[0],
                                               mac[1], mac[2], mac[3], mac[4], mac[5]),
                                   ns_name_);
  const libnl::LinkPtr changes = link_change(ifname, op, object);
  const libnl::AddrPtr lladdr(check_alloc(nl_addr_build(AF_LLC, mac.data(), mac.size()), op, object));
  rtnl_link_set_addr(changes.get(), lladdr.get());  // takes its own reference
  send(change_message(changes.get(), op, object), op, object);
}

bool Socket::add_address(const std::string& ifname, std::uint32_t addr, int prefix_len) {
  const std::string op = "add address";
  const std::string object = in_ns(fmt::format("{}/{} on {}", ipv4_text(addr), prefix_len, ifname), ns_name_);
  if (prefix_len < 0 || prefix_len > 32) throw Error(op, object, EINVAL, "IPv4 prefix length outside 0..32");
  const int index = require_ifindex(*this, ifname, op, object);
  const Message msg = build_add_address(index, addr, prefix_len);
  std::string detail;
  const int err = exchange(sock_, msg.get(), nullptr, detail);
  if (err == EEXIST) return false;
  if (err != 0) throw Error(op, object, err, detail);
  return true;
}

bool Socket::delete_address(const std::string& ifname, std::uint32_t addr, int prefix_len) {
  const std::string op = "delete address";
  const std::string object = in_ns(fmt::format("{}/{} on {}", ipv4_text(addr), prefix_len, ifname), ns_name_);
  if (prefix_len < 0 || prefix_len > 32) throw Error(op, object, EINVAL, "IPv4 prefix length outside 0..32");
  const int index = require_ifindex(*this, ifname, op, object);
  const Message msg = build_delete_address(index, addr, prefix_len);
  std::string detail;
  const int err = exchange(sock_, msg.get(), nullptr, detail);
  if (err == EADDRNOTAVAIL) return false;  // the kernel's answer for an address the interface lacks
  if (err != 0) throw Error(op, object, err, detail);
  return true;
}

bool Socket::add_route(std::uint32_t dst, int prefix_len, std::uint32_t gateway, const std::string& ifname) {
  const std::string op = "add route";
  const std::string route =
      gateway != 0 ? fmt::format("{}/{} via {} dev {}", ipv4_text(dst), prefix_len, ipv4_text(gateway), ifname)
                   : fmt::format("{}/{} dev {}", ipv4_text(dst), prefix_len, ifname);
  const std::string object = in_ns(route, ns_name_);
  if (prefix_len < 0 || prefix_len > 32) throw Error(op, object, EINVAL, "IPv4 prefix length outside 0..32");
  const int index = require_ifindex(*this, ifname, op, object);

  libnl::RoutePtr r(check_alloc(rtnl_route_alloc(), op, object));
  rtnl_route_set_family(r.get(), AF_INET);
  rtnl_route_set_table(r.get(), RT_TABLE_MAIN);
  rtnl_route_set_protocol(r.get(), RTPROT_BOOT);  // what `ip route add` uses
  rtnl_route_set_type(r.get(), RTN_UNICAST);
  // As `ip route add`: a route without a gateway is on-link.
  rtnl_route_set_scope(r.get(), gateway != 0 ? RT_SCOPE_UNIVERSE : RT_SCOPE_LINK);
  const libnl::AddrPtr destination = ipv4_addr(dst, prefix_len);
  check(rtnl_route_set_dst(r.get(), destination.get()), op, object);

  libnl::NexthopPtr nh(check_alloc(rtnl_route_nh_alloc(), op, object));
  rtnl_route_nh_set_ifindex(nh.get(), index);
  if (gateway != 0) {
    const libnl::AddrPtr via = ipv4_addr(gateway, 32);
    rtnl_route_nh_set_gateway(nh.get(), via.get());  // takes its own reference
  }
  rtnl_route_add_nexthop(r.get(), nh.release());  // the route owns it now

  nl_msg* raw = nullptr;
  check(rtnl_route_build_add_request(r.get(), NLM_F_CREATE | NLM_F_EXCL, &raw), op, object);
  const Message msg(raw);
  std::string detail;
  const int err = exchange(sock_, msg.get(), nullptr, detail);
  if (err == EEXIST) return false;
  if (err != 0) throw Error(op, object, err, detail);
  return true;
}

bool Socket::delete_route(std::uint32_t dst, int prefix_len) {
  const std::string op = "delete route";
  const std::string object = in_ns(fmt::format("{}/{}", ipv4_text(dst), prefix_len), ns_name_);
  if (prefix_len < 0 || prefix_len > 32) throw Error(op, object, EINVAL, "IPv4 prefix length outside 0..32");
  libnl::RoutePtr r(check_alloc(rtnl_route_alloc(), op, object));
  rtnl_route_set_family(r.get(), AF_INET);
  rtnl_route_set_table(r.get(), RT_TABLE_MAIN);
  rtnl_route_set_scope(r.get(), RT_SCOPE_NOWHERE);  // any scope
  const libnl::AddrPtr destination = ipv4_addr(dst, prefix_len);
  check(rtnl_route_set_dst(r.get(), destination.get()), op, object);
  nl_msg* raw = nullptr;
  check(rtnl_route_build_del_request(r.get(), 0, &raw), op, object);
  const Message msg(raw);
  std::string detail;
  const int err = exchange(sock_, msg.get(), nullptr, detail);
  if (err == ESRCH || err == ENOENT) return false;
  if (err != 0) throw Error(op, object, err, detail);
  return true;
}

std::vector<std::string> Socket::link_names() {
  const std::string op = "list links";
  const std::string object = ns_name_.empty() ? "" : "in " + ns_name_;
  libnl::MsgPtr msg(check_alloc(nlmsg_alloc_simple(RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP), op, object));
  ifinfomsg ifi{};
  ifi.ifi_family = AF_UNSPEC;
  check(nlmsg_append(msg.get(), &ifi, sizeof(ifi), NLMSG_ALIGNTO), op, object);
  std::vector<std::string> names;
  const ReplyHandler on_reply = [&](nl_msg* reply) {
    nlmsghdr* hdr = nlmsg_hdr(reply);
    if (hdr->nlmsg_type != RTM_NEWLINK) return;
    nlattr* tb[IFLA_MAX + 1] = {};
    if (nlmsg_parse(hdr, sizeof(ifinfomsg), tb, IFLA_MAX, nullptr) < 0 || tb[IFLA_IFNAME] == nullptr) return;
    names.emplace_back(nla_get_string(tb[IFLA_IFNAME]));
  };
  std::string detail;
  const int err = exchange(sock_, msg.get(), &on_reply, detail);
  if (err != 0) throw Error(op, object, err, detail);
  return names;
}

std::vector<InterfaceAddress> Socket::ipv4_addresses() {
  const std::string op = "list addresses";
  const std::string object = ns_name_.empty() ? "" : "in " + ns_name_;
  // Names by index first (an address dump carries only the index).
  std::map<int, std::string> names;
  {
    libnl::MsgPtr msg(check_alloc(nlmsg_alloc_simple(RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP), op, object));
    ifinfomsg ifi{};
    ifi.ifi_family = AF_UNSPEC;
    check(nlmsg_append(msg.get(), &ifi, sizeof(ifi), NLMSG_ALIGNTO), op, object);
    const ReplyHandler on_reply = [&](nl_msg* reply) {
      nlmsghdr* hdr = nlmsg_hdr(reply);
      if (hdr->nlmsg_type != RTM_NEWLINK) return;
      nlattr* tb[IFLA_MAX + 1] = {};
      if (nlmsg_parse(hdr, sizeof(ifinfomsg), tb, IFLA_MAX, nullptr) < 0 || tb[IFLA_IFNAME] == nullptr) return;
      names[static_cast<const ifinfomsg*>(nlmsg_data(hdr))->ifi_index] = nla_get_string(tb[IFLA_IFNAME]);
    };
    std::string detail;
    if (const int err = exchange(sock_, msg.get(), &on_reply, detail); err != 0) throw Error(op, object, err, detail);
  }
  libnl::MsgPtr msg(check_alloc(nlmsg_alloc_simple(RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP), op, object));
  ifaddrmsg ifa{};
  ifa.ifa_family = AF_INET;
  check(nlmsg_append(msg.get(), &ifa, sizeof(ifa), NLMSG_ALIGNTO), op, object);
  std::vector<InterfaceAddress> out;
  const ReplyHandler on_reply = [&](nl_msg* reply) {
    nlmsghdr* hdr = nlmsg_hdr(reply);
    if (hdr->nlmsg_type != RTM_NEWADDR) return;
    const auto* am = static_cast<const ifaddrmsg*>(nlmsg_data(hdr));
    if (am->ifa_family != AF_INET) return;
    nlattr* tb[IFA_MAX + 1] = {};
    if (nlmsg_parse(hdr, sizeof(ifaddrmsg), tb, IFA_MAX, nullptr) < 0) return;
    const nlattr* a = tb[IFA_LOCAL] != nullptr ? tb[IFA_LOCAL] : tb[IFA_ADDRESS];
    if (a == nullptr || nla_len(a) != 4) return;
    std::uint32_t be = 0;
    std::memcpy(&be, nla_data(a), 4);
    const auto it = names.find(static_cast<int>(am->ifa_index));
    out.push_back({it != names.end() ? it->second : fmt::format("ifindex {}", am->ifa_index), ntohl(be),
                   am->ifa_prefixlen});
  };
  std::string detail;
  if (const int err = exchange(sock_, msg.get(), &on_reply, detail); err != 0) throw Error(op, object, err, detail);
  return out;
}

void Socket::set_ipv4_forwarding(const std::string& ifname, bool on) {
  const std::string op = on ? "turn on ipv4 forwarding" : "turn off ipv4 forwarding";
  const std::string object = in_ns(ifname, ns_name_);
  check_ifname(ifname, op, object);
  send(build_ipv4_forwarding(ifname, on), op, object);
}

bool Socket::ipv4_forwarding(const std::string& ifname) {
  const std::string op = "read ipv4 forwarding";
  const std::string object = in_ns(ifname, ns_name_);
  check_ifname(ifname, op, object);
  rtnl_link* raw = nullptr;
  check(rtnl_link_get_kernel(sock_, 0, ifname.c_str(), &raw), op, object);
  const libnl::LinkPtr link(raw);
  std::uint32_t value = 0;
  check(rtnl_link_inet_get_conf(link.get(), IPV4_DEVCONF_FORWARDING, &value), op, object);
  return value != 0;
}

// ---- traffic control ---------------------------------------------------------------

namespace {
std::string tc_object(Handle handle, const std::string& ifname, const std::string& ns) {
  return in_ns(fmt::format("{} on {}", handle.to_string(), ifname), ns);
}
}  // namespace

void Socket::add_htb_qdisc(const std::string& ifname, Handle handle, std::uint32_t default_minor) {
  const std::string op = "add htb qdisc";
  const std::string object = tc_object(handle, ifname, ns_name_);
  send(build_htb_qdisc(require_ifindex(*this, ifname, op, object), handle, default_minor), op, object);
}

void Socket::add_htb_class(const std::string& ifname, Handle parent, Handle classid, const HtbClassParams& p) {
  const std::string op = "add htb class";
  const std::string object = tc_object(classid, ifname, ns_name_);
  send(build_htb_class(require_ifindex(*this, ifname, op, object), parent, classid, p, false), op, object);
}

void Socket::change_htb_class(const std::string& ifname, Handle parent, Handle classid, const HtbClassParams& p) {
  const std::string op = "change htb class";
  const std::string object = tc_object(classid, ifname, ns_name_);
  send(build_htb_class(require_ifindex(*this, ifname, op, object), parent, classid, p, true), op, object);
}

void Socket::add_netem(const std::string& ifname, Handle parent, Handle handle, const NetemParams& p) {
  const std::string op = "add netem qdisc";
  const std::string object = tc_object(handle, ifname, ns_name_);
  send(build_netem_qdisc(require_ifindex(*this, ifname, op, object), parent, handle, p, false), op, object);
}

void Socket::change_netem(const std::string& ifname, Handle parent, Handle handle, const NetemParams& p) {
  const std::string op = "change netem qdisc";
  const std::string object = tc_object(handle, ifname, ns_name_);
  send(build_netem_qdisc(require_ifindex(*this, ifname, op, object), parent, handle, p, true), op, object);
}

void Socket::add_pfifo(const std::string& ifname, Handle parent, Handle handle, std::uint32_t limit) {
  const std::string op = "add pfifo qdisc";
  const std::string object = tc_object(handle, ifname, ns_name_);
  send(build_pfifo_qdisc(require_ifindex(*this, ifname, op, object), parent, handle, limit, false), op, object);
}

void Socket::change_pfifo(const std::string& ifname, Handle parent, Handle handle, std::uint32_t limit) {
  const std::string op = "change pfifo qdisc";
  const std::string object = tc_object(handle, ifname, ns_name_);
  send(build_pfifo_qdisc(require_ifindex(*this, ifname, op, object), parent, handle, limit, true), op, object);
}

void Socket::add_u32_src_filter(const std::string& ifname, Handle parent, std::uint16_t prio, std::uint32_t src_addr,
                                int prefix_len, Handle flowid) {
  const std::string op = "add u32 filter";
  const std::string object =
      in_ns(fmt::format("{}/{} to {} on {}", ipv4_text(src_addr), prefix_len, flowid.to_string(), ifname), ns_name_);
  send(build_u32_src_filter(require_ifindex(*this, ifname, op, object), parent, prio, src_addr, prefix_len, flowid), op,
       object);
}

void Socket::add_u32_filter(const std::string& ifname, Handle parent, const U32Filter& f) {
  const std::string op = "add u32 filter";
  const std::string object = in_ns(fmt::format("prio {} handle {:x} under {} to {} on {}", f.prio, f.handle,
                                               parent.to_string(), f.flowid.to_string(), ifname),
                                   ns_name_);
  send(build_u32_filter(require_ifindex(*this, ifname, op, object), parent, f), op, object);
}

bool Socket::delete_filter(const std::string& ifname, Handle parent, std::uint16_t prio, std::uint16_t protocol,
                           std::uint32_t handle) {
  const std::string op = "delete filter";
  const std::string object =
      in_ns(fmt::format("prio {} handle {:x} under {} on {}", prio, handle, parent.to_string(), ifname), ns_name_);
  const Message msg = build_delete_filter(require_ifindex(*this, ifname, op, object), parent, prio, protocol, handle);
  std::string detail;
  const int err = exchange(sock_, msg.get(), nullptr, detail);
  if (err == ENOENT) return false;
  if (err != 0) throw Error(op, object, err, detail);
  return true;
}

bool Socket::delete_class(const std::string& ifname, Handle classid) {
  const std::string op = "delete class";
  const std::string object = tc_object(classid, ifname, ns_name_);
  const Message msg = build_delete_class(require_ifindex(*this, ifname, op, object), classid);
  std::string detail;
  const int err = exchange(sock_, msg.get(), nullptr, detail);
  if (err == ENOENT) return false;
  if (err != 0) throw Error(op, object, err, detail);
  return true;
}

bool Socket::delete_root_qdisc(const std::string& ifname) {
  const std::string op = "delete root qdisc";
  const std::string object = in_ns(ifname, ns_name_);
  const Message msg = build_delete_root_qdisc(require_ifindex(*this, ifname, op, object));
  std::string detail;
  const int err = exchange(sock_, msg.get(), nullptr, detail);
  if (err == ENOENT || err == EINVAL) return false;  // only the default qdisc: nothing of ours
  if (err != 0) throw Error(op, object, err, detail);
  return true;
}

namespace {
// One qdisc or class by handle: a single get request (parent 0, the handle alone finds
// it), not a dump of every object in the namespace. The kernel answers a tc get as a
// notification; NLM_F_ECHO makes sure it comes back to the requester too.
std::optional<TcStats> tc_stats(nl_sock* sock, int type, int ifindex, Handle handle, const std::string& operation,
                                const std::string& object) {
  libnl::MsgPtr msg(check_alloc(nlmsg_alloc_simple(type, NLM_F_REQUEST | NLM_F_ECHO), operation, object));
  tcmsg tcm{};
  tcm.tcm_family = AF_UNSPEC;
  tcm.tcm_ifindex = ifindex;
  tcm.tcm_handle = handle.raw();
  check(nlmsg_append(msg.get(), &tcm, sizeof(tcm), NLMSG_ALIGNTO), operation, object);
  std::optional<TcStats> stats;
  const ReplyHandler on_reply = [&](nl_msg* reply) {
    if (auto obj = parse_object(reply)) stats = stats_of(obj->get());
  };
  std::string detail;
  const int err = exchange(sock, msg.get(), &on_reply, detail);
  if (err == ENOENT) return std::nullopt;
  if (err != 0) throw Error(operation, object, err, detail);
  return stats;
}
}  // namespace

std::optional<TcStats> Socket::qdisc_stats(const std::string& ifname, Handle handle) {
  const std::string op = "read qdisc stats";
  const std::string object = tc_object(handle, ifname, ns_name_);
  return tc_stats(sock_, RTM_GETQDISC, require_ifindex(*this, ifname, op, object), handle, op, object);
}

std::optional<TcStats> Socket::class_stats(const std::string& ifname, Handle classid) {
  const std::string op = "read class stats";
  const std::string object = tc_object(classid, ifname, ns_name_);
  return tc_stats(sock_, RTM_GETTCLASS, require_ifindex(*this, ifname, op, object), classid, op, object);
}

std::vector<std::pair<Handle, TcStats>> Socket::all_class_stats(const std::string& ifname) {
  const std::string op = "read class stats";
  const std::string object = in_ns("every class on " + ifname, ns_name_);
  const Message msg = build_class_dump(require_ifindex(*this, ifname, op, object));
  std::vector<std::pair<Handle, TcStats>> out;
  const ReplyHandler on_reply = [&](nl_msg* reply) {
    if (nlmsg_hdr(reply)->nlmsg_type != RTM_NEWTCLASS) return;
    if (auto obj = parse_object(reply)) {
      const std::uint32_t h = rtnl_tc_get_handle(libnl::as_tc(obj->get()));
      out.emplace_back(Handle{static_cast<std::uint16_t>(h >> 16), static_cast<std::uint16_t>(h & 0xffff)},
                       stats_of(obj->get()));
    }
  };
  std::string detail;
  const int err = exchange(sock_, msg.get(), &on_reply, detail);
  if (err != 0) throw Error(op, object, err, detail);
  return out;
}

}  // namespace wanlab::netlink
