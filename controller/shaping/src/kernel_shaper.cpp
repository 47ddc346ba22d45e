#include "wanlab/shaping/kernel_shaper.hpp"

#include <linux/if_ether.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <unordered_set>

#include "wanlab/lab/naming.hpp"
#include "wanlab/lab/wan_tc.hpp"

namespace wanlab::shaping {

namespace {

// The link class's own filter chain once it is inner: the flows' filters first, then the
// catch-all to the default child. (Without a match there, HTB would send the packet past
// every class, unshaped.) The prios differ from the plan's (1..number of DCs, on the root)
// and between links: u32 instances under one qdisc share their hash tables, and tc lists
// every table of a prio under each instance of that prio.
std::uint16_t flow_prio(const core::WanLink& link) {
  return static_cast<std::uint16_t>(0x4000 + 2 * link.src);
}
std::uint16_t fallback_prio(const core::WanLink& link) {
  return static_cast<std::uint16_t>(flow_prio(link) + 1);
}
// Handles the shaper allocates on a router interface, clear of the plan's (classes 1:<src+1>,
// leaves <0x10+src>:) and of the kernel's automatic qdisc handles (0x8000 and up).
constexpr std::uint16_t kFirstMinor = 0x1000;
constexpr std::uint16_t kLastMinor = 0xffff;
constexpr std::uint16_t kFirstMajor = 0x1000;
constexpr std::uint16_t kLastMajor = 0x7fff;
// u32 node ids of one instance: 1..0xfff.
constexpr std::size_t kMaxFlowFilters = 0xfff;

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::uint16_t allocate(std::set<std::uint16_t>& used, std::uint16_t first, std::uint16_t last,
                       const std::string& what) {
  for (std::uint32_t v = first; v <= last; ++v) {
    if (used.insert(static_cast<std::uint16_t>(v)).second) return static_cast<std::uint16_t>(v);
  }
  throw std::runtime_error(fmt::format("no free {} on this interface", what));
}

// A match whose port has bits outside its mask can never match (as in the userspace gate).
bool usable(const FlowMatch& m) {
  return (m.sport & m.sport_mask) == m.sport;
}

// The u32 keys of one FlowMatch for one IP protocol. Offsets are into the IPv4 header: the
// source port sits at 20 only without IP options, hence the IHL key.
std::vector<netlink::U32Key> flow_keys(const FlowMatch& m, std::uint8_t protocol) {
  std::vector<netlink::U32Key> keys = {
      {0x45000000, 0xff000000, 0},                     // IPv4, header of 20 bytes
      {0, 0x00001fff, 4},                              // fragment offset 0
      {std::uint32_t{protocol} << 16, 0x00ff0000, 8},  // protocol
      {m.saddr, 0xffffffff, 12},                       // source address
  };
  if (m.daddr != 0) keys.push_back({m.daddr, 0xffffffff, 16});
  if (m.sport_mask != 0)
    keys.push_back({std::uint32_t{m.sport} << 16, std::uint32_t{m.sport_mask} << 16, 20});  // source port
  return keys;
}

constexpr std::uint8_t kTcp = 6;
constexpr std::uint8_t kUdp = 17;

}  // namespace

KernelShaper::KernelShaper(netlink::Socket router, bool netem, std::vector<std::string> ports)
    : router_(std::move(router)), netem_(netem), ports_(std::move(ports)) {}

std::string KernelShaper::port(const core::Topology& topo, std::size_t dc) const {
  return ports_.empty() ? lab::if_router_to(topo.dcs.at(dc).name) : ports_.at(dc);
}

void KernelShaper::apply(const core::Topology& topo, const core::WanLink& link) {
  const auto ifname = port(topo, link.dst);
  const auto tc = lab::wan_link_tc(topo, link);
  router_.change_htb_class(ifname, lab::kWanRootQdisc, tc.classid, tc.htb);
  if (!netem_) {
    router_.change_pfifo(ifname, tc.classid, tc.leaf, tc.limit_packets);
    return;
  }
  const auto it = gated_.find({link.src, link.dst});
  if (it == gated_.end()) {
    router_.change_netem(ifname, tc.classid, tc.leaf, tc.netem);
    return;
  }
  // Gated: the link class is inner; every child follows the new rate, every leaf the new
  // netem parameters.
  const Gated& g = it->second;
  const auto gate = lab::wan_gate_tc(topo, link, g.flows.size() + 1);
  router_.change_htb_class(ifname, tc.classid, g.fallback, gate.open);
  router_.change_netem(ifname, g.fallback, g.fallback_leaf, tc.netem);
  for (const auto& f : g.flows) {
    router_.change_htb_class(ifname, tc.classid, f.cls, f.open ? gate.open : gate.closed);
    router_.change_netem(ifname, f.cls, f.leaf, tc.netem);
  }
}

LinkCounters KernelShaper::counters(const core::Topology& topo, const core::WanLink& link) {
  const auto ifname = port(topo, link.dst);
  const auto tc = lab::wan_link_tc(topo, link);
  LinkCounters c;
  if (const auto it = gated_.find({link.src, link.dst}); it != gated_.end()) {
    // The link class counts what left through any child; drops and queues are the leaves'.
    std::unordered_set<std::uint32_t> leaves{it->second.fallback.raw()};
    for (const auto& f : it->second.flows) leaves.insert(f.cls.raw());
    for (const auto& [h, s] : router_.all_class_stats(ifname)) {
      if (h.raw() == tc.classid.raw()) {
        c.packets = s.packets;
        c.bytes = s.bytes;
        c.overlimits = s.overlimits;
      } else if (leaves.contains(h.raw())) {
        c.drops += s.drops;
        c.queued_packets += s.qlen;
        c.queued_bytes += s.backlog;
      }
    }
    return c;
  }
  if (auto cls = router_.class_stats(ifname, tc.classid)) {
    c.packets = cls->packets;
    c.bytes = cls->bytes;
    c.overlimits = cls->overlimits;
  }
  if (auto leaf = router_.qdisc_stats(ifname, tc.leaf)) {
    c.drops = leaf->drops;
    c.queued_packets = leaf->qlen;
    c.queued_bytes = leaf->backlog;
  }
  return c;
}

KernelShaper::Gated& KernelShaper::split(const core::Topology& topo, const core::WanLink& link) {
  if (const auto it = gated_.find({link.src, link.dst}); it != gated_.end()) return it->second;
  const auto ifname = port(topo, link.dst);
  const auto tc = lab::wan_link_tc(topo, link);
  auto& h = handles_[ifname];
  Gated g;
  g.fallback = {lab::kWanRootQdisc.major, allocate(h.minors, kFirstMinor, kLastMinor, "class minor")};
  // The catch-all first: from the moment the link class is inner, every packet it gets
  // finds its child.
  netlink::U32Filter all;
  all.prio = fallback_prio(link);
  all.protocol = ETH_P_ALL;
  all.keys = {{0, 0, 0}};
  all.flowid = g.fallback;
  try {
    router_.add_u32_filter(ifname, tc.classid, all);
    // The link class turns inner here: the kernel destroys its netem leaf (and what it held).
    router_.add_htb_class(ifname, tc.classid, g.fallback, lab::wan_gate_tc(topo, link, 1).open);
  } catch (...) {
    try {
      router_.delete_filter(ifname, tc.classid, fallback_prio(link), ETH_P_ALL, 0);
    } catch (const std::exception&) {
    }
    h.minors.erase(g.fallback.minor);
    throw;
  }
  // The default child takes over the link's leaf handle (free again now), so that `tc` shows
  // the link's netem where it was.
  g.fallback_leaf = tc.leaf;
  auto& stored = gated_.emplace(LinkKey{link.src, link.dst}, g).first->second;
  try {
    router_.add_netem(ifname, stored.fallback, stored.fallback_leaf, tc.netem);
  } catch (const netlink::Error& e) {
    if (e.code() != EEXIST) throw;
    stored.fallback_leaf = {allocate(h.majors, kFirstMajor, kLastMajor, "qdisc major"), 0};
    router_.add_netem(ifname, stored.fallback, stored.fallback_leaf, tc.netem);
  }
  return stored;
}

void KernelShaper::remove_flows(const core::Topology& topo, const core::WanLink& link, Gated& g) {
  const auto ifname = port(topo, link.dst);
  const auto tc = lab::wan_link_tc(topo, link);
  // No new packet reaches the flows' classes once their filters are gone (they take the
  // default child)...
  if (g.flow_filters) {
    router_.delete_filter(ifname, tc.classid, flow_prio(link), ETH_P_IP, 0);
    g.flow_filters = false;
  }
  if (g.flows.empty()) return;
  // ...and what the closed gates hold is released: every gate opens, and the classes go
  // once their leaves are empty (or after the time that should take).
  const auto gate = lab::wan_gate_tc(topo, link, g.flows.size() + 1);
  for (auto& f : g.flows) {
    if (!f.open) router_.change_htb_class(ifname, tc.classid, f.cls, gate.open);
    f.open = true;
  }
  const auto queued = [&] {
    std::uint64_t q = 0;
    std::unordered_set<std::uint32_t> classes;
    for (const auto& f : g.flows) classes.insert(f.cls.raw());
    for (const auto& [h, s] : router_.all_class_stats(ifname))
      if (classes.contains(h.raw())) q += s.qlen;
    return q;
  };
  if (const auto q = queued(); q > 0) {
    const auto& p = link.params;
    const double rate = static_cast<double>(tc.htb.rate.bps);
    const auto drain = std::chrono::duration<double>(static_cast<double>(q) * (topo.lan.mtu + 14) * 8 / rate);
    auto wait = p.delay + p.jitter + std::chrono::duration_cast<Duration>(drain) + std::chrono::milliseconds(20);
    wait = std::min<Duration>(wait, std::chrono::seconds(5));
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while (std::chrono::steady_clock::now() < deadline && queued() > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  auto& h = handles_[ifname];
  while (!g.flows.empty()) {
    const Flow& f = g.flows.back();
    router_.delete_class(ifname, f.cls);  // and its netem leaf
    h.minors.erase(f.cls.minor);
    h.majors.erase(f.leaf.major);
    g.flows.pop_back();
  }
}

void KernelShaper::set_flows(const core::Topology& topo, const core::WanLink& link,
                             const std::vector<GatedFlow>& flows) {
  if (!netem_) LinkShaper::set_flows(topo, link, flows);  // refuses: no gates without netem
  std::unordered_set<int> ids;
  std::size_t filters = 0;
  for (const auto& f : flows) {
    if (f.id < 0) throw std::invalid_argument(fmt::format("gated flow id {} is negative", f.id));
    if (!ids.insert(f.id).second) throw std::invalid_argument(fmt::format("gated flow id {} declared twice", f.id));
    for (const auto& m : f.matches) filters += usable(m) ? 2 : 0;
  }
  if (filters > kMaxFlowFilters)
    throw std::invalid_argument(fmt::format("{} flow matches on one link: the kernel backend gates at most {}",
                                            filters / 2, kMaxFlowFilters / 2));
  const auto key = LinkKey{link.src, link.dst};
  if (flows.empty() && !gated_.contains(key)) return;  // nothing declared, nothing to end

  const auto ifname = port(topo, link.dst);
  const auto tc = lab::wan_link_tc(topo, link);
  Gated& g = split(topo, link);
  remove_flows(topo, link, g);

  auto& h = handles_[ifname];
  const auto gate = lab::wan_gate_tc(topo, link, flows.size() + 1);
  for (const auto& f : flows) {
    Flow flow;
    flow.id = f.id;
    flow.cls = {lab::kWanRootQdisc.major, allocate(h.minors, kFirstMinor, kLastMinor, "class minor")};
    try {
      flow.leaf = {allocate(h.majors, kFirstMajor, kLastMajor, "qdisc major"), 0};
    } catch (...) {
      h.minors.erase(flow.cls.minor);
      throw;
    }
    try {
      router_.add_htb_class(ifname, tc.classid, flow.cls, gate.closed);
    } catch (...) {
      h.minors.erase(flow.cls.minor);
      h.majors.erase(flow.leaf.major);
      throw;
    }
    g.flows.push_back(flow);  // from here on, remove_flows deletes it
    router_.add_netem(ifname, flow.cls, flow.leaf, tc.netem);
  }
  // The default child's share of the link rate follows the number of children.
  router_.change_htb_class(ifname, tc.classid, g.fallback, gate.open);

  // The filters last: a flow's packets reach its class only once its leaf is in place.
  std::uint32_t node = 0;
  for (std::size_t i = 0; i < flows.size(); ++i) {
    for (const auto& m : flows[i].matches) {
      if (!usable(m)) continue;
      for (const std::uint8_t protocol : {kTcp, kUdp}) {
        netlink::U32Filter filter;
        filter.prio = flow_prio(link);
        filter.protocol = ETH_P_IP;
        filter.handle = netlink::u32_node(++node);
        filter.keys = flow_keys(m, protocol);
        filter.flowid = g.flows[i].cls;
        router_.add_u32_filter(ifname, tc.classid, filter);
        g.flow_filters = true;
      }
    }
  }
}

KernelShaper::Flow& KernelShaper::find_flow(const core::WanLink& link, int flow) {
  const auto it = gated_.find({link.src, link.dst});
  if (it != gated_.end()) {
    for (auto& f : it->second.flows)
      if (f.id == flow) return f;
  }
  throw std::out_of_range(fmt::format("no gated flow {} on the link from DC {} to DC {}", flow, link.src, link.dst));
}

void KernelShaper::set_gate(const core::Topology& topo, const core::WanLink& link, int flow, bool open) {
  if (!netem_) LinkShaper::set_gate(topo, link, flow, open);  // refuses
  Flow& f = find_flow(link, flow);
  if (f.open == open) return;
  const auto ifname = port(topo, link.dst);
  const auto tc = lab::wan_link_tc(topo, link);
  const auto gate = lab::wan_gate_tc(topo, link, gated_.at({link.src, link.dst}).flows.size() + 1);
  router_.change_htb_class(ifname, tc.classid, f.cls, open ? gate.open : gate.closed);
  f.open = open;
  if (open) f.opened_ns = steady_ns();
}

std::vector<FlowCounters> KernelShaper::flow_counters(const core::Topology& topo, const core::WanLink& link) {
  if (!netem_) return LinkShaper::flow_counters(topo, link);  // refuses
  std::vector<FlowCounters> out;
  const auto it = gated_.find({link.src, link.dst});
  if (it == gated_.end() || it->second.flows.empty()) return out;
  const auto ifname = port(topo, link.dst);
  std::map<std::uint32_t, netlink::TcStats> stats;
  for (const auto& [h, s] : router_.all_class_stats(ifname)) stats[h.raw()] = s;
  for (const auto& f : it->second.flows) {
    FlowCounters c;
    c.id = f.id;
    c.open = f.open;
    if (const auto s = stats.find(f.cls.raw()); s != stats.end()) {
      c.packets = s->second.packets;
      c.bytes = s->second.bytes;
      c.admitted_bytes = c.bytes;  // the flow's leaf is both its gate and its queue
      c.held_packets = f.open ? 0 : s->second.qlen;
      c.dropped = s->second.drops;
    }
    c.opened_ns = f.opened_ns;
    out.push_back(c);
  }
  return out;
}

}  // namespace wanlab::shaping
