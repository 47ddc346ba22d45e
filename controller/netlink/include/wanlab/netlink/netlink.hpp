#pragma once
// The kernel, reached through libnl-route. This layer is the only code that includes
// libnl headers. Every handle is RAII; destructors never throw. Kernel failures throw
// netlink::Error naming the operation, the object and the errno; expected outcomes
// (already exists, not found on delete) are return values.
#include <sys/types.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "wanlab/common/unique_fd.hpp"
#include "wanlab/common/units.hpp"

struct nl_sock;
struct nl_msg;

namespace wanlab::netlink {

class Error : public std::runtime_error {
 public:
  // what(): "<operation> <object>: <strerror>", e.g. "add htb class 1:3 on to-euw in demo.router: Invalid argument",
  // followed by " (<detail>)" when there is one (the kernel's extended-ack text, or libnl's).
  Error(std::string operation, std::string object, int err /* positive errno */, std::string detail = {});
  int code() const { return code_; }

 private:
  int code_;
};

/// A move-only file descriptor (the lab opens its own close-on-exec).
using Fd = wanlab::UniqueFd;

/// A named network namespace, visible to `ip netns` (a bind mount at /run/netns/NAME,
/// made exactly as iproute2 does, /run/netns being a shared mount point).
class Netns {
 public:
  /// Creates it. Returns nullopt if a namespace of that name already exists.
  static std::optional<Netns> create(const std::string& name);
  /// Opens an existing one; nullopt if absent.
  static std::optional<Netns> open(const std::string& name);
  /// The namespace of the calling thread.
  static Netns current();
  /// Unmounts and unlinks /run/netns/NAME. Returns false if it did not exist. The kernel
  /// frees the namespace (and every interface, qdisc and route in it) once no process
  /// and no fd refers to it.
  static bool remove(const std::string& name);
  /// Names under /run/netns.
  static std::vector<std::string> list();

  const std::string& name() const { return name_; }
  int fd() const { return fd_.get(); }
  ino_t inode() const;  // identifies the namespace (as /proc/PID/ns/net does)

 private:
  Netns(std::string name, Fd fd) : name_(std::move(name)), fd_(std::move(fd)) {}
  std::string name_;
  Fd fd_;
};

/// Enters a namespace on the calling thread; returns to the previous one on destruction.
class ScopedNetns {
 public:
  explicit ScopedNetns(const Netns& target);
  ~ScopedNetns();
  ScopedNetns(const ScopedNetns&) = delete;
  ScopedNetns& operator=(const ScopedNetns&) = delete;

 private:
  Fd previous_;
};

/// Writes a sysctl (e.g. "net/ipv4/ip_forward") inside a namespace.
void write_sysctl(const Netns& ns, const std::string& key, const std::string& value);

struct HtbClassParams {
  Rate rate;
  Rate ceil;                  // 0: same as rate (no borrowing)
  Bytes burst;                // bytes, rate bucket (0: libnl's default, rate/HZ + MTU)
  Bytes cburst;               // bytes, ceil bucket (0: likewise at ceil)
  std::uint32_t quantum = 0;  // bytes (0: the kernel derives it from the rate and r2q)
};

struct NetemParams {
  Duration delay{};
  Duration jitter{};
  Probability loss{};
  // Gilbert-Elliott loss (netem "loss gemodel p r 1-h 1-k", with 1-k = `loss`); none: random.
  std::optional<LossBurst> loss_burst;
  std::uint32_t limit = 1000;  // packets
  // When jitter > 0 the message also carries a netem rate far above the link rate, which
  // makes netem keep packets in order (each leaves no earlier than the one before it).
  Rate order_rate{};  // 0: none
};

struct TcStats {
  std::uint64_t packets = 0;
  std::uint64_t bytes = 0;
  std::uint64_t drops = 0;
  std::uint64_t overlimits = 0;
  std::uint64_t qlen = 0;     // packets queued now
  std::uint64_t backlog = 0;  // bytes queued now
};

/// tc handles as major:minor, e.g. Handle{1, 3} is "1:3".
struct Handle {
  std::uint16_t major = 0;
  std::uint16_t minor = 0;
  std::uint32_t raw() const { return (std::uint32_t{major} << 16) | minor; }
  std::string to_string() const;  // as tc prints it: hexadecimal, "10:" for minor 0, "root"
  static Handle root();           // TC_H_ROOT
};

/// One key of a u32 filter: the 32-bit word at byte `offset` of the IPv4 header (a
/// multiple of 4), masked, must equal `value`. Host order; the message carries network order.
struct U32Key {
  std::uint32_t value = 0;
  std::uint32_t mask = 0;
  int offset = 0;
  bool operator==(const U32Key&) const = default;
};

/// A u32 filter with any number of keys (all must match; none: every packet matches) that
/// sends what it matches to `flowid`. Filters of one `prio` and protocol form one u32
/// instance, tried before those of a higher prio.
struct U32Filter {
  std::uint16_t prio = 1;
  std::uint16_t protocol = 0x0800;  // ethertype, host order (ETH_P_IP; 0x0003 ETH_P_ALL)
  std::uint32_t handle = 0;         // 0: the kernel picks (nodes 0x800 and up); else u32_node(N)
  std::vector<U32Key> keys;
  Handle flowid;
};

/// The handle of node `node` (1..0xfff) in a u32 instance's root hash table, tc's "<ht>::N".
/// The table's id is left 0: the kernel fills it in (800: for the first u32 instance under a
/// parent, 801: and on for the next ones).
std::uint32_t u32_node(std::uint32_t node);

/// A netlink message built but not sent (for inspection in tests).
class Message {
 public:
  explicit Message(nl_msg* m) : msg_(m) {}
  ~Message();
  Message(Message&& o) noexcept : msg_(std::exchange(o.msg_, nullptr)) {}
  Message& operator=(Message&& o) noexcept;
  Message(const Message&) = delete;
  Message& operator=(const Message&) = delete;
  nl_msg* get() const { return msg_; }
  std::uint16_t type() const;   // nlmsghdr.nlmsg_type (e.g. RTM_NEWTCLASS)
  std::uint16_t flags() const;  // nlmsghdr.nlmsg_flags
  std::vector<std::uint8_t> bytes() const;

 private:
  nl_msg* msg_ = nullptr;
};

// Message builders (pure: no socket, no kernel). `ifindex` is the target interface.
// `replace` = false builds a create (NLM_F_CREATE|NLM_F_EXCL); true an in-place change.
Message build_htb_qdisc(int ifindex, Handle handle, std::uint32_t default_minor);
Message build_htb_class(int ifindex, Handle parent, Handle classid, const HtbClassParams& p, bool replace);
Message build_netem_qdisc(int ifindex, Handle parent, Handle handle, const NetemParams& p, bool replace);
Message build_pfifo_qdisc(int ifindex, Handle parent, Handle handle, std::uint32_t limit_packets, bool replace);
Message build_u32_src_filter(int ifindex, Handle parent, std::uint16_t prio, std::uint32_t src_addr /*host order*/,
                             int prefix_len, Handle flowid);
Message build_u32_filter(int ifindex, Handle parent, const U32Filter& f);
/// Deletes the filter `handle` of the u32 instance at `prio`/`protocol` under `parent`; a
/// handle of 0 deletes that whole instance (every filter of the prio).
Message build_delete_filter(int ifindex, Handle parent, std::uint16_t prio, std::uint16_t protocol,
                            std::uint32_t handle);
/// Deletes a class (and the qdisc under it). The kernel refuses while a filter points to it
/// or it has children.
Message build_delete_class(int ifindex, Handle classid);
/// Asks for every class on an interface (a dump: one reply per class, then done).
Message build_class_dump(int ifindex);
/// Deletes the root qdisc of an interface (and everything under it).
Message build_delete_root_qdisc(int ifindex);
/// Sets IPv4 forwarding on one interface (its devconf "forwarding", through RTM_SETLINK:
/// no /proc/sys write, so it works where /proc/sys is read-only, as in containers).
Message build_ipv4_forwarding(const std::string& ifname, bool on);

/// Adds the IPv4 address addr/prefix_len to interface `ifindex` (RTM_NEWADDR, create,
/// exclusive: as `ip addr add`), or deletes it (RTM_DELADDR: `ip addr del`; the prefix
/// length must be the address's). Throws Error for a prefix length outside 0..32.
Message build_add_address(int ifindex, std::uint32_t addr /*host order*/, int prefix_len);
Message build_delete_address(int ifindex, std::uint32_t addr /*host order*/, int prefix_len);

/// An IPv4 address of an interface.
struct InterfaceAddress {
  std::string ifname;
  std::uint32_t address = 0;  // host order
  int prefix_len = 0;
};

/// A NETLINK_ROUTE socket bound to the namespace it was opened in (the calling thread's,
/// or the given one). All operations act inside that namespace. Not thread-safe; one per
/// thread.
class Socket {
 public:
  static Socket open();  // in the calling thread's namespace
  static Socket open_in(const Netns& ns);
  Socket(Socket&&) noexcept;
  Socket& operator=(Socket&&) noexcept;
  ~Socket();

  /// Name of the namespace for error messages ("" = the caller's).
  const std::string& ns_name() const { return ns_name_; }

  // Links. Interface names are at most 15 characters.
  /// ifindex, or nullopt if absent.
  std::optional<int> ifindex(const std::string& ifname);
  /// Creates a veth pair: `name` here, `peer` moved into `peer_ns` at creation.
  void add_veth(const std::string& name, const std::string& peer, const Netns& peer_ns, int mtu);
  void add_bridge(const std::string& name, int mtu);
  /// Deletes an interface (a veth takes its peer along). False if there was none.
  bool delete_link(const std::string& ifname);
  void set_master(const std::string& ifname, const std::string& master);
  void set_up(const std::string& ifname);
  void set_alias(const std::string& ifname, const std::string& alias);
  /// Sets the interface's hardware address (live, where the device allows it, as veths do).
  void set_mac(const std::string& ifname, const std::array<std::uint8_t, 6>& mac);
  /// Returns false if the address already exists.
  bool add_address(const std::string& ifname, std::uint32_t addr, int prefix_len);
  /// Deletes addr/prefix_len from the interface. Returns false if it has no such address.
  /// Deleting a subnet's primary address deletes its secondaries too, unless the interface
  /// promotes them (net.ipv4.conf.IF.promote_secondaries), as with `ip addr del`.
  bool delete_address(const std::string& ifname, std::uint32_t addr, int prefix_len);
  /// Adds a route to dst/len via gateway (0: directly on ifname). False if it exists.
  bool add_route(std::uint32_t dst, int prefix_len, std::uint32_t gateway, const std::string& ifname);
  /// Deletes the main table's route to dst/len (whatever its next hop). False if there is none.
  bool delete_route(std::uint32_t dst, int prefix_len);
  /// Names of all interfaces in this namespace.
  std::vector<std::string> link_names();
  /// Every IPv4 address in this namespace, with its interface.
  std::vector<InterfaceAddress> ipv4_addresses();
  /// IPv4 forwarding of one interface (the kernel forwards what arrives on it only if on).
  void set_ipv4_forwarding(const std::string& ifname, bool on);
  bool ipv4_forwarding(const std::string& ifname);

  // Traffic control.
  void add_htb_qdisc(const std::string& ifname, Handle handle, std::uint32_t default_minor);
  void add_htb_class(const std::string& ifname, Handle parent, Handle classid, const HtbClassParams& p);
  void change_htb_class(const std::string& ifname, Handle parent, Handle classid, const HtbClassParams& p);
  void add_netem(const std::string& ifname, Handle parent, Handle handle, const NetemParams& p);
  void change_netem(const std::string& ifname, Handle parent, Handle handle, const NetemParams& p);
  void add_pfifo(const std::string& ifname, Handle parent, Handle handle, std::uint32_t limit);
  void change_pfifo(const std::string& ifname, Handle parent, Handle handle, std::uint32_t limit);
  void add_u32_src_filter(const std::string& ifname, Handle parent, std::uint16_t prio, std::uint32_t src_addr,
                          int prefix_len, Handle flowid);
  void add_u32_filter(const std::string& ifname, Handle parent, const U32Filter& f);
  /// See build_delete_filter. Returns false if there was no such filter (or prio).
  bool delete_filter(const std::string& ifname, Handle parent, std::uint16_t prio, std::uint16_t protocol,
                     std::uint32_t handle);
  /// Returns false if there was no such class.
  bool delete_class(const std::string& ifname, Handle classid);
  /// Returns false if the interface had no root qdisc of its own.
  bool delete_root_qdisc(const std::string& ifname);
  /// Counters of a qdisc / class by handle; nullopt if absent.
  std::optional<TcStats> qdisc_stats(const std::string& ifname, Handle handle);
  std::optional<TcStats> class_stats(const std::string& ifname, Handle classid);
  /// Counters of every class on the interface, in one dump (for classes of a leaf, the
  /// queue figures are its qdisc's).
  std::vector<std::pair<Handle, TcStats>> all_class_stats(const std::string& ifname);

 private:
  Socket(nl_sock* s, std::string ns_name);
  void send(Message msg, const std::string& what, const std::string& object);
  nl_sock* sock_ = nullptr;
  std::string ns_name_;
};

/// True if this kernel can create a netem qdisc (tried on a veth inside a throwaway
/// namespace; the result is cached for the process).
bool netem_available();

}  // namespace wanlab::netlink
