// Traffic-control messages built as values (no socket, no kernel), so that unit tests
// can read them back; Socket sends them.
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <netlink/route/cls/u32.h>
#include <netlink/route/link/inet.h>
#include <netlink/route/qdisc/fifo.h>
#include <netlink/route/qdisc/htb.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "wanlab/netlink/internal.hpp"
#include "wanlab/netlink/netlink.hpp"

namespace wanlab::netlink {

namespace {

// NLM_F_REQUEST is added again when sending; set here so that the built bytes are the
// request itself.
int create_flags() {
  return NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL;
}
// An in-place change of an existing object. Without NLM_F_CREATE the kernel refuses
// (ENOENT) rather than creating a missing one, and never deletes and re-adds.
int change_flags() {
  return NLM_F_REQUEST | NLM_F_REPLACE;
}
int flags_for(bool replace) {
  return replace ? change_flags() : create_flags();
}

std::string tc_object(Handle handle, int ifindex) {
  return fmt::format("{} on ifindex {}", handle.to_string(), ifindex);
}

// Throws for a failed libnl call while building (only out-of-memory or a bug).
void check(int rc, const std::string& operation, const std::string& object) {
  if (rc < 0) throw Error(operation, object, libnl::to_errno(rc), libnl::describe(rc));
}

template <class T>
T* check_alloc(T* object, const std::string& operation, const std::string& object_name) {
  if (object == nullptr) throw Error(operation, object_name, ENOMEM);
  return object;
}

void set_common(rtnl_tc* tc, int ifindex, Handle parent, Handle handle, const char* kind, const std::string& operation,
                const std::string& object) {
  rtnl_tc_set_ifindex(tc, ifindex);
  rtnl_tc_set_parent(tc, parent.raw());
  rtnl_tc_set_handle(tc, handle.raw());
  check(rtnl_tc_set_kind(tc, kind), operation, object);
}

Message qdisc_message(rtnl_qdisc* qdisc, int flags, const std::string& operation, const std::string& object) {
  nl_msg* raw = nullptr;
  check(rtnl_qdisc_build_add_request(qdisc, flags, &raw), operation, object);
  return Message(raw);
}

// Kernel psched ticks are 64 ns (PSCHED_SHIFT 6). Only the legacy 32-bit netem fields
// use them; the 64-bit nanosecond attributes take precedence.
std::uint32_t ns_to_ticks(std::int64_t ns) {
  if (ns <= 0) return 0;
  return static_cast<std::uint32_t>(std::min<std::int64_t>(ns >> 6, UINT32_MAX));
}

// netem's probabilities are u32 fractions of UINT32_MAX.
std::uint32_t probability_to_u32(Probability p) {
  const std::uint64_t ppb = std::min(p.ppb, Probability::kOne);
  return static_cast<std::uint32_t>((ppb * UINT32_MAX + Probability::kOne / 2) / Probability::kOne);
}

}  // namespace

std::string Handle::to_string() const {
  if (raw() == TC_H_ROOT) return "root";
  // tc's spelling: hexadecimal, "1:" for a qdisc handle.
  if (minor == 0) return fmt::format("{:x}:", major);
  return fmt::format("{:x}:{:x}", major, minor);
}

Handle Handle::root() {
  return Handle{TC_H_MAJ(TC_H_ROOT) >> 16, TC_H_MIN(TC_H_ROOT)};
}

Message::~Message() {
  if (msg_ != nullptr) nlmsg_free(msg_);
}

Message& Message::operator=(Message&& o) noexcept {
  if (this != &o) {
    if (msg_ != nullptr) nlmsg_free(msg_);
    msg_ = std::exchange(o.msg_, nullptr);
  }
  return *this;
}

std::uint16_t Message::type() const {
  return nlmsg_hdr(msg_)->nlmsg_type;
}

std::uint16_t Message::flags() const {
  return nlmsg_hdr(msg_)->nlmsg_flags;
}

std::vector<std::uint8_t> Message::bytes() const {
  const nlmsghdr* hdr = nlmsg_hdr(msg_);
  const auto* begin = reinterpret_cast<const std::uint8_t*>(hdr);
  return {begin, begin + hdr->nlmsg_len};
}

Message build_htb_qdisc(int ifindex, Handle handle, std::uint32_t default_minor) {
  const std::string op = "build htb qdisc";
  const std::string object = tc_object(handle, ifindex);
  libnl::QdiscPtr qdisc(check_alloc(rtnl_qdisc_alloc(), op, object));
  set_common(libnl::as_tc(qdisc.get()), ifindex, Handle::root(), handle, "htb", op, object);
  // The kernel combines the qdisc's major with this minor (as tc's "default 3" does).
  check(rtnl_htb_set_defcls(qdisc.get(), default_minor), op, object);
  return qdisc_message(qdisc.get(), create_flags(), op, object);
}

Message build_htb_class(int ifindex, Handle parent, Handle classid, const HtbClassParams& p, bool replace) {
  const std::string op = "build htb class";
  const std::string object = tc_object(classid, ifindex);
  if (p.rate.bps < 8) throw Error(op, object, EINVAL, "rate must be at least 8 bit/s");
  // libnl takes bucket sizes as int; larger ones make no sense for a WAN link anyway.
  if (p.burst.value > INT_MAX || p.cburst.value > INT_MAX) throw Error(op, object, ERANGE, "burst above 2 GiB");

  libnl::ClassPtr cls(check_alloc(rtnl_class_alloc(), op, object));
  set_common(libnl::as_tc(cls.get()), ifindex, parent, classid, "htb", op, object);
  // Bytes/s; libnl adds TCA_HTB_RATE64/CEIL64 when a value does not fit in 32 bits.
  check(rtnl_htb_set_rate64(cls.get(), p.rate.bytes_per_second()), op, object);
  // A ceil of 0 means "no borrowing": ceil = rate.
  const Rate ceil = p.ceil.bps >= 8 ? p.ceil : p.rate;
  check(rtnl_htb_set_ceil64(cls.get(), ceil.bytes_per_second()), op, object);
  // Buckets in bytes; libnl converts them to the kernel's time units at these rates.
  if (p.burst.value > 0) check(rtnl_htb_set_rbuffer(cls.get(), static_cast<std::uint32_t>(p.burst.value)), op, object);
  if (p.cburst.value > 0)
    check(rtnl_htb_set_cbuffer(cls.get(), static_cast<std::uint32_t>(p.cburst.value)), op, object);
  if (p.quantum > 0) check(rtnl_htb_set_quantum(cls.get(), p.quantum), op, object);

  nl_msg* raw = nullptr;
  check(rtnl_class_build_add_request(cls.get(), flags_for(replace), &raw), op, object);
  return Message(raw);
}

Message build_netem_qdisc(int ifindex, Handle parent, Handle handle, const NetemParams& p, bool replace) {
  // Built by hand: libnl's netem module cannot express a netem rate. TCA_OPTIONS is not
  // a plain nested attribute here: its payload is a struct tc_netem_qopt followed by
  // netem attributes, as iproute2's q_netem.c builds it.
  const std::string op = "build netem qdisc";
  const std::string object = tc_object(handle, ifindex);
  if (p.delay.count() < 0 || p.jitter.count() < 0) throw Error(op, object, EINVAL, "negative delay or jitter");

  libnl::MsgPtr msg(check_alloc(nlmsg_alloc_simple(RTM_NEWQDISC, flags_for(replace)), op, object));
  tcmsg tcm{};
  tcm.tcm_family = AF_UNSPEC;
  tcm.tcm_ifindex = ifindex;
  tcm.tcm_handle = handle.raw();
  tcm.tcm_parent = parent.raw();
  check(nlmsg_append(msg.get(), &tcm, sizeof(tcm), NLMSG_ALIGNTO), op, object);
  check(nla_put_string(msg.get(), TCA_KIND, "netem"), op, object);

  tc_netem_qopt qopt{};
  qopt.latency = ns_to_ticks(p.delay.count());
  qopt.jitter = ns_to_ticks(p.jitter.count());
  qopt.loss = p.loss_burst ? 0 : probability_to_u32(p.loss);
  qopt.limit = p.limit;

  // Offsets, not pointers, so nothing dangles should the message buffer move.
  const std::uint32_t options_at = nlmsg_hdr(msg.get())->nlmsg_len;
  check(nla_put(msg.get(), TCA_OPTIONS, sizeof(qopt), &qopt), op, object);
  check(nla_put_s64(msg.get(), TCA_NETEM_LATENCY64, p.delay.count()), op, object);
  check(nla_put_s64(msg.get(), TCA_NETEM_JITTER64, p.jitter.count()), op, object);
  if (p.order_rate.bps > 0) {
    const std::uint64_t bytes_per_second = std::max<std::uint64_t>(p.order_rate.bytes_per_second(), 1);
    tc_netem_rate rate{};
    rate.rate = static_cast<std::uint32_t>(std::min<std::uint64_t>(bytes_per_second, UINT32_MAX));
    check(nla_put(msg.get(), TCA_NETEM_RATE, sizeof(rate), &rate), op, object);
    if (bytes_per_second > UINT32_MAX) check(nla_put_u64(msg.get(), TCA_NETEM_RATE64, bytes_per_second), op, object);
  } else if (replace) {
    // netem keeps the rate of an earlier change when a change carries no TCA_NETEM_RATE:
    // clear it with a zero rate, or an order rate from a time with jitter would outlive
    // the jitter (and cap the link once its rate is raised past it).
    const tc_netem_rate none{};
    check(nla_put(msg.get(), TCA_NETEM_RATE, sizeof(none), &none), op, object);
  }
  if (p.loss_burst) {
    // netem's Gilbert-Elliott model: in the good state a packet is lost when a draw is
    // below k1 (1-k), in the bad state when it is above h; a change without TCA_NETEM_LOSS
    // goes back to random loss.
    tc_netem_gemodel ge{};
    ge.p = probability_to_u32(p.loss_burst->p);
    ge.r = probability_to_u32(p.loss_burst->r);
    ge.h = probability_to_u32(Probability{Probability::kOne - p.loss_burst->bad.ppb});
    ge.k1 = probability_to_u32(p.loss);
    nlattr* loss = nla_nest_start(msg.get(), TCA_NETEM_LOSS);
    if (!loss) throw Error(op, object, ENOMEM, "TCA_NETEM_LOSS");
    check(nla_put(msg.get(), NETEM_LOSS_GE, sizeof(ge), &ge), op, object);
    nla_nest_end(msg.get(), loss);
  }
  nlmsghdr* hdr = nlmsg_hdr(msg.get());
  auto* options = reinterpret_cast<nlattr*>(reinterpret_cast<char*>(hdr) + options_at);
  options->nla_len = static_cast<std::uint16_t>(hdr->nlmsg_len - options_at);
  return Message(msg.release());
}

Message build_pfifo_qdisc(int ifindex, Handle parent, Handle handle, std::uint32_t limit_packets, bool replace) {
  const std::string op = "build pfifo qdisc";
  const std::string object = tc_object(handle, ifindex);
  if (limit_packets > INT_MAX) throw Error(op, object, ERANGE, "limit above INT_MAX packets");
  libnl::QdiscPtr qdisc(check_alloc(rtnl_qdisc_alloc(), op, object));
  set_common(libnl::as_tc(qdisc.get()), ifindex, parent, handle, "pfifo", op, object);
  check(rtnl_qdisc_fifo_set_limit(qdisc.get(), static_cast<int>(limit_packets)), op, object);
  return qdisc_message(qdisc.get(), flags_for(replace), op, object);
}

Message build_u32_src_filter(int ifindex, Handle parent, std::uint16_t prio, std::uint32_t src_addr, int prefix_len,
                             Handle flowid) {
  const std::string op = "build u32 filter";
  const std::string object = fmt::format("to {} on ifindex {}", flowid.to_string(), ifindex);
  if (prefix_len < 0 || prefix_len > 32) throw Error(op, object, EINVAL, "IPv4 prefix length outside 0..32");
  const std::uint32_t mask = prefix_len == 0 ? 0 : ~std::uint32_t{0} << (32 - prefix_len);

  libnl::ClsPtr filter(check_alloc(rtnl_cls_alloc(), op, object));
  rtnl_tc* tc = libnl::as_tc(filter.get());
  rtnl_tc_set_ifindex(tc, ifindex);
  rtnl_tc_set_parent(tc, parent.raw());
  check(rtnl_tc_set_kind(tc, "u32"), op, object);
  rtnl_cls_set_prio(filter.get(), prio);
  rtnl_cls_set_protocol(filter.get(), ETH_P_IP);
  // "match ip src A/N": the source address is at offset 12 of the IPv4 header. Value and
  // mask are in host order here; libnl stores them in network order.
  constexpr int kIpv4SourceOffset = 12;
  check(rtnl_u32_add_key_uint32(filter.get(), src_addr & mask, mask, kIpv4SourceOffset, 0), op, object);
  // A match is final (no further hash-table links), as tc sets for "flowid".
  check(rtnl_u32_set_cls_terminal(filter.get()), op, object);
  check(rtnl_u32_set_classid(filter.get(), flowid.raw()), op, object);

  nl_msg* raw = nullptr;
  check(rtnl_cls_build_add_request(filter.get(), create_flags(), &raw), op, object);
  return Message(raw);
}

std::uint32_t u32_node(std::uint32_t node) {
  // u32 handles are htid (12 bits) : hash (8 bits) : node (12 bits). A handle with htid 0
  // names a node of the instance's root table, whatever that table's id.
  return node & 0xfff;
}

Message build_u32_filter(int ifindex, Handle parent, const U32Filter& f) {
  const std::string op = "build u32 filter";
  const std::string object = fmt::format("prio {} to {} on ifindex {}", f.prio, f.flowid.to_string(), ifindex);
  if (f.prio == 0) throw Error(op, object, EINVAL, "prio 0 lets the kernel pick one");
  for (const auto& k : f.keys)
    if (k.offset < 0 || k.offset % 4 != 0) throw Error(op, object, EINVAL, "key offset not a multiple of 4");

  libnl::ClsPtr filter(check_alloc(rtnl_cls_alloc(), op, object));
  rtnl_tc* tc = libnl::as_tc(filter.get());
  rtnl_tc_set_ifindex(tc, ifindex);
  rtnl_tc_set_parent(tc, parent.raw());
  if (f.handle != 0) rtnl_tc_set_handle(tc, f.handle);
  check(rtnl_tc_set_kind(tc, "u32"), op, object);
  rtnl_cls_set_prio(filter.get(), f.prio);
  rtnl_cls_set_protocol(filter.get(), f.protocol);
  // Value and mask in host order here; libnl stores them in network order.
  for (const auto& k : f.keys)
    check(rtnl_u32_add_key_uint32(filter.get(), k.value & k.mask, k.mask, k.offset, 0), op, object);
  check(rtnl_u32_set_cls_terminal(filter.get()), op, object);
  check(rtnl_u32_set_classid(filter.get(), f.flowid.raw()), op, object);

  nl_msg* raw = nullptr;
  check(rtnl_cls_build_add_request(filter.get(), create_flags(), &raw), op, object);
  return Message(raw);
}

namespace {
// A bare tc request: the header and a tcmsg, no attributes.
Message tc_request(int type, int flags, int ifindex, std::uint32_t parent, std::uint32_t handle, std::uint32_t info,
                   const std::string& operation, const std::string& object) {
  libnl::MsgPtr msg(check_alloc(nlmsg_alloc_simple(type, flags), operation, object));
  tcmsg tcm{};
  tcm.tcm_family = AF_UNSPEC;
  tcm.tcm_ifindex = ifindex;
  tcm.tcm_parent = parent;
  tcm.tcm_handle = handle;
  tcm.tcm_info = info;
  check(nlmsg_append(msg.get(), &tcm, sizeof(tcm), NLMSG_ALIGNTO), operation, object);
  return Message(msg.release());
}
}  // namespace

Message build_delete_filter(int ifindex, Handle parent, std::uint16_t prio, std::uint16_t protocol,
                            std::uint32_t handle) {
  const std::string op = "build filter delete";
  const std::string object =
      fmt::format("prio {} handle {:x} under {} on ifindex {}", prio, handle, parent.to_string(), ifindex);
  // Prio 0 would delete every filter under the parent.
  if (prio == 0) throw Error(op, object, EINVAL, "prio 0 names every filter");
  // tcm_info: the prio in the upper 16 bits, the protocol (network order) in the lower.
  const std::uint32_t info = TC_H_MAKE(std::uint32_t{prio} << 16, htons(protocol));
  return tc_request(RTM_DELTFILTER, NLM_F_REQUEST, ifindex, parent.raw(), handle, info, op, object);
}

Message build_delete_class(int ifindex, Handle classid) {
  const std::string op = "build class delete";
  const std::string object = tc_object(classid, ifindex);
  return tc_request(RTM_DELTCLASS, NLM_F_REQUEST, ifindex, 0, classid.raw(), 0, op, object);
}

Message build_class_dump(int ifindex) {
  const std::string op = "build class dump";
  const std::string object = fmt::format("ifindex {}", ifindex);
  return tc_request(RTM_GETTCLASS, NLM_F_REQUEST | NLM_F_DUMP, ifindex, 0, 0, 0, op, object);
}

Message build_delete_root_qdisc(int ifindex) {
  const std::string op = "build qdisc delete";
  const std::string object = fmt::format("root on ifindex {}", ifindex);
  return tc_request(RTM_DELQDISC, NLM_F_REQUEST, ifindex, TC_H_ROOT, 0, 0, op, object);
}

Message build_ipv4_forwarding(const std::string& ifname, bool on) {
  const std::string op = "build ipv4 forwarding change";
  const std::string object = ifname;
  libnl::LinkPtr changes(check_alloc(rtnl_link_alloc(), op, object));
  rtnl_link_set_name(changes.get(), ifname.c_str());
  check(rtnl_link_inet_set_conf(changes.get(), IPV4_DEVCONF_FORWARDING, on ? 1 : 0), op, object);
  const libnl::LinkPtr orig(check_alloc(rtnl_link_alloc(), op, object));
  nl_msg* raw = nullptr;
  check(rtnl_link_build_change_request(orig.get(), changes.get(), 0, &raw), op, object);
  return Message(raw);
}

namespace {

Message address_request(int type, int flags, int ifindex, std::uint32_t addr, int prefix_len, const std::string& op) {
  const std::string object = fmt::format("{}.{}.{}.{}/{} on ifindex {}", addr >> 24, (addr >> 16) & 0xff,
                                         (addr >> 8) & 0xff, addr & 0xff, prefix_len, ifindex);
  if (prefix_len < 0 || prefix_len > 32) throw Error(op, object, EINVAL, "IPv4 prefix length outside 0..32");
  Message m(check_alloc(nlmsg_alloc_simple(type, flags), op, object));
  ifaddrmsg am{};
  am.ifa_family = AF_INET;
  am.ifa_prefixlen = static_cast<unsigned char>(prefix_len);
  am.ifa_index = static_cast<unsigned>(ifindex);
  check(nlmsg_append(m.get(), &am, sizeof am, NLMSG_ALIGNTO), op, object);
  const std::uint32_t be = htonl(addr);
  // IFA_LOCAL is the interface's address; IFA_ADDRESS the same on a broadcast link (as ip does).
  check(nla_put(m.get(), IFA_LOCAL, sizeof be, &be), op, object);
  check(nla_put(m.get(), IFA_ADDRESS, sizeof be, &be), op, object);
  return m;
}

}  // namespace

Message build_add_address(int ifindex, std::uint32_t addr, int prefix_len) {
  return address_request(RTM_NEWADDR, NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL, ifindex, addr, prefix_len,
                         "build address add");
}

Message build_delete_address(int ifindex, std::uint32_t addr, int prefix_len) {
  return address_request(RTM_DELADDR, NLM_F_REQUEST, ifindex, addr, prefix_len, "build address delete");
}

}  // namespace wanlab::netlink
