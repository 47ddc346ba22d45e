// The netlink layer's message builders, read back attribute by attribute. No socket, no
// privileges.
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <netlink/utils.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "wanlab/netlink/internal.hpp"
#include "wanlab/netlink/netlink.hpp"

using namespace wanlab;
using namespace wanlab::netlink;

namespace {

constexpr int kIfindex = 7;

// A built tc message split into its header, tcmsg and top-level attributes. Keeps a
// temporary message alive (the pointers point into it).
struct TcMessage {
  explicit TcMessage(Message&& m) : owned(std::move(m)), hdr(nlmsg_hdr(owned->get())) { parse(); }
  explicit TcMessage(const Message& m) : hdr(nlmsg_hdr(m.get())) { parse(); }
  void parse() {
    REQUIRE(nlmsg_parse(hdr, sizeof(tcmsg), tb, TCA_MAX, nullptr) == 0);
    tcm = static_cast<const tcmsg*>(nlmsg_data(hdr));
  }
  std::string kind() const {
    REQUIRE(tb[TCA_KIND] != nullptr);
    return nla_get_string(tb[TCA_KIND]);
  }
  // TCA_OPTIONS as a plain nested attribute.
  void options(nlattr** out, int max) const {
    REQUIRE(tb[TCA_OPTIONS] != nullptr);
    REQUIRE(nla_parse_nested(out, max, tb[TCA_OPTIONS], nullptr) == 0);
  }
  std::optional<Message> owned;
  nlmsghdr* hdr;
  const tcmsg* tcm = nullptr;
  nlattr* tb[TCA_MAX + 1] = {};
};

template <class T>
T attr_struct(const nlattr* a) {
  REQUIRE(a != nullptr);
  REQUIRE(nla_len(a) >= static_cast<int>(sizeof(T)));
  T value;
  std::memcpy(&value, nla_data(a), sizeof(T));
  return value;
}

bool is_create(const Message& m) {
  return (m.flags() & NLM_F_CREATE) != 0 && (m.flags() & NLM_F_EXCL) != 0 && (m.flags() & NLM_F_REPLACE) == 0;
}
bool is_change(const Message& m) {
  return (m.flags() & (NLM_F_CREATE | NLM_F_EXCL)) == 0;
}

}  // namespace

TEST_CASE("tc handles print as tc does and root is TC_H_ROOT", "[netlink]") {
  CHECK(Handle{1, 3}.to_string() == "1:3");
  CHECK(Handle{1, 0x10}.to_string() == "1:10");
  CHECK(Handle{0x10, 0}.to_string() == "10:");
  CHECK(Handle{1, 3}.raw() == 0x00010003u);
  CHECK(Handle::root().raw() == TC_H_ROOT);
  CHECK(Handle::root().to_string() == "root");
}

TEST_CASE("errors name the operation, the object and the errno", "[netlink]") {
  const Error e("add htb class", "1:3 on to-euw in demo.router", EINVAL);
  CHECK(std::string(e.what()) == "add htb class 1:3 on to-euw in demo.router: Invalid argument");
  CHECK(e.code() == EINVAL);
  const Error with_detail("add netem qdisc", "1: on x", ENOENT, "Specified qdisc kind is unknown");
  CHECK(std::string(with_detail.what()) ==
        "add netem qdisc 1: on x: No such file or directory (Specified qdisc kind is unknown)");
}

TEST_CASE("libnl error codes map to errno", "[netlink]") {
  CHECK(libnl::to_errno(-NLE_EXIST) == EEXIST);
  CHECK(libnl::to_errno(-NLE_OBJ_NOTFOUND) == ENODEV);
  CHECK(libnl::to_errno(-NLE_NODEV) == ENODEV);
  CHECK(libnl::to_errno(-NLE_INVAL) == EINVAL);
  CHECK(libnl::to_errno(-NLE_PERM) == EPERM);
  CHECK(libnl::to_errno(-NLE_NOMEM) == ENOMEM);
  CHECK(libnl::to_errno(-NLE_BUSY) == EBUSY);
  CHECK(libnl::to_errno(-NLE_OPNOTSUPP) == EOPNOTSUPP);
  CHECK(libnl::to_errno(-NLE_RANGE) == ERANGE);
  CHECK(libnl::to_errno(-NLE_SEQ_MISMATCH) == EIO);
}

TEST_CASE("htb qdisc: root, handle, default class", "[netlink]") {
  const Message m = build_htb_qdisc(kIfindex, Handle{1, 0}, 3);
  CHECK(m.type() == RTM_NEWQDISC);
  CHECK(is_create(m));
  const TcMessage tc(m);
  CHECK(tc.kind() == "htb");
  CHECK(tc.tcm->tcm_ifindex == kIfindex);
  CHECK(tc.tcm->tcm_parent == TC_H_ROOT);
  CHECK(tc.tcm->tcm_handle == 0x00010000u);
  nlattr* opts[TCA_HTB_MAX + 1] = {};
  tc.options(opts, TCA_HTB_MAX);
  const auto glob = attr_struct<tc_htb_glob>(opts[TCA_HTB_INIT]);
  CHECK(glob.version == TC_HTB_PROTOVER);
  CHECK(glob.defcls == 3);
  CHECK(m.bytes().size() == tc.hdr->nlmsg_len);
}

TEST_CASE("htb class: create vs in-place change, rates, burst, quantum", "[netlink]") {
  HtbClassParams p;
  p.rate = Rate{1'000'000'000};  // 125e6 bytes/s
  p.ceil = Rate{2'000'000'000};
  p.burst = Bytes{125'000};   // 1 ms at rate
  p.cburst = Bytes{250'000};  // 1 ms at ceil
  p.quantum = 60'000;

  const Message add = build_htb_class(kIfindex, Handle{1, 0}, Handle{1, 3}, p, false);
  const Message change = build_htb_class(kIfindex, Handle{1, 0}, Handle{1, 3}, p, true);
  CHECK(add.type() == RTM_NEWTCLASS);
  CHECK(change.type() == RTM_NEWTCLASS);  // a change is RTM_NEWTCLASS, never delete + add
  CHECK(is_create(add));
  CHECK(is_change(change));

  const TcMessage tc(change);
  CHECK(tc.kind() == "htb");
  CHECK(tc.tcm->tcm_parent == 0x00010000u);
  CHECK(tc.tcm->tcm_handle == 0x00010003u);
  nlattr* opts[TCA_HTB_MAX + 1] = {};
  tc.options(opts, TCA_HTB_MAX);
  const auto opt = attr_struct<tc_htb_opt>(opts[TCA_HTB_PARMS]);
  CHECK(opt.rate.rate == 125'000'000u);
  CHECK(opt.ceil.rate == 250'000'000u);
  CHECK(opt.quantum == 60'000u);
  // Buckets travel as transmission time at their rate, in psched ticks: 1 ms each.
  CHECK(nl_ticks2us(opt.buffer) == Approx(1000).margin(1));
  CHECK(nl_ticks2us(opt.cbuffer) == Approx(1000).margin(1));
  // Rates that fit in 32 bits need no 64-bit attributes.
  CHECK(opts[TCA_HTB_RATE64] == nullptr);
  CHECK(opts[TCA_HTB_CEIL64] == nullptr);
}

TEST_CASE("htb class: rates above 4 GB/s travel as rate64/ceil64", "[netlink]") {
  HtbClassParams p;
  p.rate = Rate{40'000'000'000};   // 5e9 bytes/s
  p.ceil = Rate{100'000'000'000};  // 12.5e9 bytes/s
  p.burst = Bytes{5'000'000};      // 1 ms at rate
  p.cburst = Bytes{12'500'000};
  const TcMessage tc(build_htb_class(kIfindex, Handle{1, 0}, Handle{1, 4}, p, false));
  nlattr* opts[TCA_HTB_MAX + 1] = {};
  tc.options(opts, TCA_HTB_MAX);
  const auto opt = attr_struct<tc_htb_opt>(opts[TCA_HTB_PARMS]);
  CHECK(opt.rate.rate == UINT32_MAX);
  REQUIRE(opts[TCA_HTB_RATE64] != nullptr);
  REQUIRE(opts[TCA_HTB_CEIL64] != nullptr);
  CHECK(nla_get_u64(opts[TCA_HTB_RATE64]) == 5'000'000'000u);
  CHECK(nla_get_u64(opts[TCA_HTB_CEIL64]) == 12'500'000'000u);
  CHECK(nl_ticks2us(opt.buffer) == Approx(1000).margin(1));
}

TEST_CASE("htb class: a zero ceil means ceil = rate; a zero rate is refused", "[netlink]") {
  HtbClassParams p;
  p.rate = Rate{8'000'000};
  const TcMessage tc(build_htb_class(kIfindex, Handle{1, 0}, Handle{1, 5}, p, false));
  nlattr* opts[TCA_HTB_MAX + 1] = {};
  tc.options(opts, TCA_HTB_MAX);
  CHECK(attr_struct<tc_htb_opt>(opts[TCA_HTB_PARMS]).ceil.rate == 1'000'000u);

  p.rate = Rate{0};
  CHECK_THROWS_AS(build_htb_class(kIfindex, Handle{1, 0}, Handle{1, 5}, p, false), Error);
}

namespace {
// netem's TCA_OPTIONS: a struct tc_netem_qopt, then netem attributes.
struct NetemOptions {
  explicit NetemOptions(TcMessage message) : tc(std::move(message)) {
    const nlattr* options = tc.tb[TCA_OPTIONS];
    REQUIRE(options != nullptr);
    REQUIRE(nla_len(options) >= static_cast<int>(sizeof(tc_netem_qopt)));
    std::memcpy(&qopt, nla_data(options), sizeof(qopt));
    const int skip = NLA_ALIGN(sizeof(tc_netem_qopt));
    auto* attrs = reinterpret_cast<nlattr*>(static_cast<char*>(nla_data(options)) + skip);
    REQUIRE(nla_parse(tb, TCA_NETEM_MAX, attrs, nla_len(options) - skip, nullptr) == 0);
  }
  TcMessage tc;  // owns what tb points into
  tc_netem_qopt qopt{};
  nlattr* tb[TCA_NETEM_MAX + 1] = {};
};
}  // namespace

TEST_CASE("netem qdisc: delay and jitter in ns, loss, limit, no rate by default", "[netlink]") {
  NetemParams p;
  p.delay = std::chrono::microseconds(34'200);
  p.jitter = std::chrono::microseconds(1'500);
  p.loss = Probability{1'000'000};  // 0.1 %
  p.limit = 4321;

  const Message add = build_netem_qdisc(kIfindex, Handle{1, 3}, Handle{13, 0}, p, false);
  CHECK(add.type() == RTM_NEWQDISC);
  CHECK(is_create(add));
  const TcMessage tc(add);
  CHECK(tc.kind() == "netem");
  CHECK(tc.tcm->tcm_ifindex == kIfindex);
  CHECK(tc.tcm->tcm_parent == 0x00010003u);
  CHECK(tc.tcm->tcm_handle == 0x000d0000u);

  const NetemOptions netem(TcMessage{add});
  REQUIRE(netem.tb[TCA_NETEM_LATENCY64] != nullptr);
  REQUIRE(netem.tb[TCA_NETEM_JITTER64] != nullptr);
  CHECK(nla_get_s64(netem.tb[TCA_NETEM_LATENCY64]) == 34'200'000);
  CHECK(nla_get_s64(netem.tb[TCA_NETEM_JITTER64]) == 1'500'000);
  CHECK(netem.qopt.latency == 34'200'000u / 64);  // psched ticks, for old kernels
  CHECK(netem.qopt.jitter == 1'500'000u / 64);
  CHECK(netem.qopt.limit == 4321u);
  CHECK(netem.qopt.loss == Approx(UINT32_MAX / 1000.0).margin(1));
  CHECK(netem.tb[TCA_NETEM_RATE] == nullptr);
  CHECK(netem.tb[TCA_NETEM_RATE64] == nullptr);
  // The options attribute ends exactly at the end of the message.
  CHECK(reinterpret_cast<const char*>(tc.tb[TCA_OPTIONS]) + tc.tb[TCA_OPTIONS]->nla_len ==
        reinterpret_cast<const char*>(tc.hdr) + tc.hdr->nlmsg_len);
}

TEST_CASE("netem qdisc: bursty loss travels as NETEM_LOSS_GE, random loss without it", "[netlink]") {
  NetemParams p;
  p.loss = Probability{10'000'000};                                               // 1 % in the good state
  p.loss_burst = LossBurst{Probability{5'000'000}, Probability{250'000'000}, Probability{800'000'000}};
  const NetemOptions netem{TcMessage(build_netem_qdisc(kIfindex, Handle{1, 3}, Handle{13, 0}, p, true))};
  CHECK(netem.qopt.loss == 0u);
  REQUIRE(netem.tb[TCA_NETEM_LOSS] != nullptr);
  nlattr* loss[NETEM_LOSS_MAX + 1] = {};
  REQUIRE(nla_parse_nested(loss, NETEM_LOSS_MAX, netem.tb[TCA_NETEM_LOSS], nullptr) == 0);
  REQUIRE(loss[NETEM_LOSS_GE] != nullptr);
  const auto ge = attr_struct<tc_netem_gemodel>(loss[NETEM_LOSS_GE]);
  CHECK(ge.p == Approx(UINT32_MAX * 0.005).margin(1));
  CHECK(ge.r == Approx(UINT32_MAX * 0.25).margin(1));
  CHECK(ge.h == Approx(UINT32_MAX * 0.2).margin(1));  // netem loses in the bad state above h: 1 - 80 %
  CHECK(ge.k1 == Approx(UINT32_MAX * 0.01).margin(1));
  p.loss_burst.reset();
  const NetemOptions plain{TcMessage(build_netem_qdisc(kIfindex, Handle{1, 3}, Handle{13, 0}, p, true))};
  CHECK(plain.tb[TCA_NETEM_LOSS] == nullptr);  // a change without it goes back to random loss
  CHECK(plain.qopt.loss == Approx(UINT32_MAX * 0.01).margin(1));
}

TEST_CASE("netem qdisc: loss scaling covers 0 and 100 %", "[netlink]") {
  NetemParams p;
  p.loss = Probability{0};
  CHECK(NetemOptions(TcMessage(build_netem_qdisc(kIfindex, Handle{1, 3}, Handle{13, 0}, p, false))).qopt.loss == 0u);
  p.loss = Probability{Probability::kOne};
  CHECK(NetemOptions(TcMessage(build_netem_qdisc(kIfindex, Handle{1, 3}, Handle{13, 0}, p, false))).qopt.loss ==
        UINT32_MAX);
  p.loss = Probability{Probability::kOne / 2};
  CHECK(NetemOptions(TcMessage(build_netem_qdisc(kIfindex, Handle{1, 3}, Handle{13, 0}, p, false))).qopt.loss ==
        Approx(UINT32_MAX / 2.0).margin(1));
}

TEST_CASE("netem qdisc: order rate travels as TCA_NETEM_RATE, and RATE64 above u32", "[netlink]") {
  NetemParams p;
  p.delay = std::chrono::milliseconds(20);
  p.jitter = std::chrono::milliseconds(2);
  p.order_rate = Rate{10'000'000'000};  // 1.25e9 bytes/s: fits in u32

  const Message change = build_netem_qdisc(kIfindex, Handle{1, 3}, Handle{13, 0}, p, true);
  CHECK(change.type() == RTM_NEWQDISC);
  CHECK(is_change(change));
  CHECK((change.flags() & NLM_F_REPLACE) != 0);
  {
    const NetemOptions netem{TcMessage(change)};
    const auto rate = attr_struct<tc_netem_rate>(netem.tb[TCA_NETEM_RATE]);
    CHECK(rate.rate == 1'250'000'000u);
    CHECK(netem.tb[TCA_NETEM_RATE64] == nullptr);
  }

  p.order_rate = Rate{400'000'000'000};  // 5e10 bytes/s
  const NetemOptions netem{TcMessage(build_netem_qdisc(kIfindex, Handle{1, 3}, Handle{13, 0}, p, false))};
  CHECK(attr_struct<tc_netem_rate>(netem.tb[TCA_NETEM_RATE]).rate == UINT32_MAX);
  REQUIRE(netem.tb[TCA_NETEM_RATE64] != nullptr);
  CHECK(nla_get_u64(netem.tb[TCA_NETEM_RATE64]) == 50'000'000'000u);
}

TEST_CASE("pfifo qdisc: packet limit, create vs change", "[netlink]") {
  const Message add = build_pfifo_qdisc(kIfindex, Handle{1, 3}, Handle{13, 0}, 1000, false);
  const Message change = build_pfifo_qdisc(kIfindex, Handle{1, 3}, Handle{13, 0}, 2500, true);
  CHECK(add.type() == RTM_NEWQDISC);
  CHECK(is_create(add));
  CHECK(is_change(change));
  const TcMessage tc(change);
  CHECK(tc.kind() == "pfifo");
  CHECK(tc.tcm->tcm_parent == 0x00010003u);
  CHECK(tc.tcm->tcm_handle == 0x000d0000u);
  CHECK(attr_struct<tc_fifo_qopt>(tc.tb[TCA_OPTIONS]).limit == 2500u);
}

TEST_CASE("u32 filter: IPv4 source prefix at offset 12 to a class", "[netlink]") {
  const std::uint32_t src = (198u << 24) | (18u << 16) | (4u << 8) | 0u;  // 198.18.4.0
  const Message m = build_u32_src_filter(kIfindex, Handle{1, 0}, 5, src, 22, Handle{1, 3});
  CHECK(m.type() == RTM_NEWTFILTER);
  CHECK(is_create(m));
  const TcMessage tc(m);
  CHECK(tc.kind() == "u32");
  CHECK(tc.tcm->tcm_parent == 0x00010000u);
  CHECK(TC_H_MAJ(tc.tcm->tcm_info) >> 16 == 5u);         // prio
  CHECK(ntohs(TC_H_MIN(tc.tcm->tcm_info)) == ETH_P_IP);  // protocol

  nlattr* opts[TCA_U32_MAX + 1] = {};
  tc.options(opts, TCA_U32_MAX);
  REQUIRE(opts[TCA_U32_CLASSID] != nullptr);
  CHECK(nla_get_u32(opts[TCA_U32_CLASSID]) == 0x00010003u);
  REQUIRE(opts[TCA_U32_SEL] != nullptr);
  REQUIRE(nla_len(opts[TCA_U32_SEL]) >= static_cast<int>(sizeof(tc_u32_sel) + sizeof(tc_u32_key)));
  tc_u32_sel sel;
  std::memcpy(&sel, nla_data(opts[TCA_U32_SEL]), sizeof(sel));
  tc_u32_key key;
  std::memcpy(&key, static_cast<const char*>(nla_data(opts[TCA_U32_SEL])) + sizeof(tc_u32_sel), sizeof(key));
  CHECK(sel.nkeys == 1);
  CHECK((sel.flags & TC_U32_TERMINAL) != 0);
  CHECK(key.off == 12);
  CHECK(ntohl(key.val) == 0xC6120400u);   // 198.18.4.0
  CHECK(ntohl(key.mask) == 0xFFFFFC00u);  // /22
}

TEST_CASE("u32 filter: host bits are masked off, bad prefixes refused", "[netlink]") {
  const std::uint32_t host = 0xC6120405u;  // 198.18.4.5
  const TcMessage tc(build_u32_src_filter(kIfindex, Handle{1, 0}, 1, host, 24, Handle{1, 2}));
  nlattr* opts[TCA_U32_MAX + 1] = {};
  tc.options(opts, TCA_U32_MAX);
  tc_u32_key key;
  std::memcpy(&key, static_cast<const char*>(nla_data(opts[TCA_U32_SEL])) + sizeof(tc_u32_sel), sizeof(key));
  CHECK(ntohl(key.val) == 0xC6120400u);
  CHECK(ntohl(key.mask) == 0xFFFFFF00u);

  CHECK_THROWS_AS(build_u32_src_filter(kIfindex, Handle{1, 0}, 1, host, 33, Handle{1, 2}), Error);
  CHECK_THROWS_AS(build_u32_src_filter(kIfindex, Handle{1, 0}, 1, host, -1, Handle{1, 2}), Error);
}

namespace {
// A u32 filter's selector and keys (network order, as the kernel gets them).
struct U32Selector {
  explicit U32Selector(const TcMessage& tc) {
    nlattr* opts[TCA_U32_MAX + 1] = {};
    tc.options(opts, TCA_U32_MAX);
    REQUIRE(opts[TCA_U32_CLASSID] != nullptr);
    classid = nla_get_u32(opts[TCA_U32_CLASSID]);
    REQUIRE(opts[TCA_U32_SEL] != nullptr);
    const auto* data = static_cast<const char*>(nla_data(opts[TCA_U32_SEL]));
    REQUIRE(nla_len(opts[TCA_U32_SEL]) >= static_cast<int>(sizeof(tc_u32_sel)));
    tc_u32_sel sel;
    std::memcpy(&sel, data, sizeof(sel));
    nkeys = sel.nkeys;
    flags = sel.flags;
    REQUIRE(nla_len(opts[TCA_U32_SEL]) >= static_cast<int>(sizeof(tc_u32_sel) + sel.nkeys * sizeof(tc_u32_key)));
    for (int i = 0; i < sel.nkeys; ++i) {
      tc_u32_key k;
      std::memcpy(&k, data + sizeof(tc_u32_sel) + i * sizeof(tc_u32_key), sizeof(k));
      keys.push_back({ntohl(k.val), ntohl(k.mask), k.off});
    }
  }
  std::uint32_t classid = 0;
  int nkeys = 0;
  unsigned flags = 0;
  std::vector<U32Key> keys;
};
}  // namespace

TEST_CASE("u32 filter: several keys, explicit handle, prio and protocol", "[netlink]") {
  CHECK(u32_node(1) == 1u);  // tc's 800::1 in the first instance (the kernel adds the table's id)
  CHECK(u32_node(0xfff) == 0xfffu);

  U32Filter f;
  f.prio = 1;
  f.protocol = ETH_P_IP;
  f.handle = u32_node(7);
  // A flow: TCP from 198.18.0.2 to 198.18.4.2, source port 16448/0xffc0 (slot 1's block).
  f.keys = {{0x45000000, 0xff000000, 0},   {0, 0x00001fff, 4},
            {6u << 16, 0x00ff0000, 8},     {0xC6120002u, 0xffffffff, 12},
            {0xC6120402u, 0xffffffff, 16}, {16448u << 16, 0xffc0u << 16, 20}};
  f.flowid = Handle{1, 0x1001};
  const Message m = build_u32_filter(kIfindex, Handle{1, 1}, f);
  CHECK(m.type() == RTM_NEWTFILTER);
  CHECK(is_create(m));
  const TcMessage tc(m);
  CHECK(tc.kind() == "u32");
  CHECK(tc.tcm->tcm_ifindex == kIfindex);
  CHECK(tc.tcm->tcm_parent == 0x00010001u);  // the link class's own filter chain
  CHECK(tc.tcm->tcm_handle == 7u);
  CHECK(TC_H_MAJ(tc.tcm->tcm_info) >> 16 == 1u);
  CHECK(ntohs(TC_H_MIN(tc.tcm->tcm_info)) == ETH_P_IP);
  const U32Selector u32(tc);
  CHECK(u32.classid == 0x00011001u);
  CHECK((u32.flags & TC_U32_TERMINAL) != 0);
  REQUIRE(u32.nkeys == 6);
  CHECK(u32.keys == f.keys);
}

TEST_CASE("u32 filter: a catch-all for every protocol; value bits outside the mask dropped", "[netlink]") {
  U32Filter all;
  all.prio = 2;
  all.protocol = ETH_P_ALL;
  all.keys = {{0, 0, 0}};
  all.flowid = Handle{1, 0x1000};
  const TcMessage tc(build_u32_filter(kIfindex, Handle{1, 2}, all));
  CHECK(tc.tcm->tcm_handle == 0u);  // the kernel picks it
  CHECK(ntohs(TC_H_MIN(tc.tcm->tcm_info)) == ETH_P_ALL);
  const U32Selector u32(tc);
  CHECK(u32.classid == 0x00011000u);
  REQUIRE(u32.keys.size() == 1);
  CHECK(u32.keys[0] == U32Key{0, 0, 0});

  U32Filter port;
  port.keys = {{0x4040ffffu, 0xffc00000u, 20}};
  port.flowid = Handle{1, 3};
  const U32Selector masked(TcMessage(build_u32_filter(kIfindex, Handle{1, 2}, port)));
  CHECK(masked.keys[0] == U32Key{0x40400000u, 0xffc00000u, 20});
}

TEST_CASE("u32 filter: prio 0 and unaligned offsets refused", "[netlink]") {
  U32Filter f;
  f.flowid = Handle{1, 3};
  f.prio = 0;
  CHECK_THROWS_AS(build_u32_filter(kIfindex, Handle{1, 0}, f), Error);
  f.prio = 1;
  f.keys = {{0, 0xffff, 22}};
  CHECK_THROWS_AS(build_u32_filter(kIfindex, Handle{1, 0}, f), Error);
}

TEST_CASE("filter delete: one u32 node, or a whole prio", "[netlink]") {
  const Message one = build_delete_filter(kIfindex, Handle{1, 1}, 1, ETH_P_IP, 0x80000003u);
  CHECK(one.type() == RTM_DELTFILTER);
  CHECK((one.flags() & (NLM_F_CREATE | NLM_F_EXCL | NLM_F_REPLACE)) == 0);
  const TcMessage tc(one);
  CHECK(tc.tcm->tcm_ifindex == kIfindex);
  CHECK(tc.tcm->tcm_parent == 0x00010001u);
  CHECK(tc.tcm->tcm_handle == 0x80000003u);
  CHECK(TC_H_MAJ(tc.tcm->tcm_info) >> 16 == 1u);
  CHECK(ntohs(TC_H_MIN(tc.tcm->tcm_info)) == ETH_P_IP);
  CHECK(tc.tb[TCA_KIND] == nullptr);

  const TcMessage all(build_delete_filter(kIfindex, Handle{1, 1}, 2, ETH_P_ALL, 0));
  CHECK(all.tcm->tcm_handle == 0u);  // the whole u32 instance of prio 2
  CHECK(TC_H_MAJ(all.tcm->tcm_info) >> 16 == 2u);
  CHECK(ntohs(TC_H_MIN(all.tcm->tcm_info)) == ETH_P_ALL);
  // Prio 0 would flush every filter under the parent.
  CHECK_THROWS_AS(build_delete_filter(kIfindex, Handle{1, 1}, 0, ETH_P_IP, 0), Error);
}

TEST_CASE("class delete and class dump", "[netlink]") {
  const Message del = build_delete_class(kIfindex, Handle{1, 0x1002});
  CHECK(del.type() == RTM_DELTCLASS);
  CHECK((del.flags() & (NLM_F_CREATE | NLM_F_EXCL | NLM_F_REPLACE)) == 0);
  const TcMessage tc(del);
  CHECK(tc.tcm->tcm_ifindex == kIfindex);
  CHECK(tc.tcm->tcm_handle == 0x00011002u);

  const Message dump = build_class_dump(kIfindex);
  CHECK(dump.type() == RTM_GETTCLASS);
  CHECK((dump.flags() & NLM_F_DUMP) == NLM_F_DUMP);
  const TcMessage d(dump);
  CHECK(d.tcm->tcm_ifindex == kIfindex);
  CHECK(d.tcm->tcm_handle == 0u);
}

TEST_CASE("messages move and expose their bytes", "[netlink]") {
  Message a = build_pfifo_qdisc(kIfindex, Handle{1, 3}, Handle{13, 0}, 10, false);
  const std::vector<std::uint8_t> bytes = a.bytes();
  REQUIRE(bytes.size() >= sizeof(nlmsghdr));
  nlmsghdr hdr;
  std::memcpy(&hdr, bytes.data(), sizeof(hdr));
  CHECK(hdr.nlmsg_len == bytes.size());
  CHECK(hdr.nlmsg_type == RTM_NEWQDISC);
  Message b = std::move(a);
  CHECK(a.get() == nullptr);
  CHECK(b.bytes() == bytes);
  Message c = build_htb_qdisc(kIfindex, Handle{1, 0}, 1);
  c = std::move(b);
  CHECK(c.bytes() == bytes);
}

TEST_CASE("address add and delete: ifaddrmsg and IFA_LOCAL as ip addr sends them", "[netlink]") {
  const std::uint32_t addr = (198u << 24) | (18u << 16) | (0u << 8) | 2u;
  for (const bool add : {true, false}) {
    const auto m = add ? build_add_address(kIfindex, addr, 22) : build_delete_address(kIfindex, addr, 22);
    CHECK(m.type() == (add ? RTM_NEWADDR : RTM_DELADDR));
    CHECK((m.flags() & NLM_F_REQUEST) != 0);
    if (add) CHECK(is_create(m));
    else CHECK((m.flags() & (NLM_F_CREATE | NLM_F_EXCL)) == 0);
    nlmsghdr* hdr = nlmsg_hdr(m.get());
    nlattr* tb[IFA_MAX + 1] = {};
    REQUIRE(nlmsg_parse(hdr, sizeof(ifaddrmsg), tb, IFA_MAX, nullptr) == 0);
    const auto* am = static_cast<const ifaddrmsg*>(nlmsg_data(hdr));
    CHECK(am->ifa_family == AF_INET);
    CHECK(am->ifa_prefixlen == 22);
    CHECK(am->ifa_index == static_cast<unsigned>(kIfindex));
    CHECK(ntohl(attr_struct<std::uint32_t>(tb[IFA_LOCAL])) == addr);
    CHECK(ntohl(attr_struct<std::uint32_t>(tb[IFA_ADDRESS])) == addr);
  }
  CHECK_THROWS_AS(build_delete_address(kIfindex, addr, 33), Error);
  CHECK_THROWS_AS(build_add_address(kIfindex, addr, -1), Error);
}
