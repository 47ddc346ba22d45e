#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "wanlab/netlink/netlink.hpp"
#include "wanlab/shaping/link_shaper.hpp"

namespace wanlab::shaping {

/// WAN links as the lab plan built them: on the router's egress toward the destination
/// DC, an HTB class per source DC with a netem leaf (pfifo where the kernel has no netem).
/// Changes are netlink changes of the class and the leaf, never delete and re-add.
///
/// Flow gates (where the kernel has netem; not in the pfifo fallback): per-flow HTB classes
/// whose ceilings are switched in place. The first set_flows on a link a->b turns its class
/// 1:<a+1> into an inner class (same rate and ceil) with
///   - a default child (the link's unmatched traffic: pings, other tools) with a netem leaf
///     that takes over the link's leaf handle <0x10+a>:, and a catch-all u32 filter to it
///     (in the link class's own filter chain, every protocol);
///   - per declared flow a child class with its own netem leaf (the link's delay, jitter,
///     loss and limit), and per FlowMatch two u32 filters (TCP, UDP) in the link class's
///     chain, before the catch-all: IPv4 with a 20-byte header, first fragment, protocol,
///     saddr, daddr (unless 0) and the masked source port (unless the mask is 0). Packets
///     with IP options or non-first fragments match no flow (they take the default child).
/// The children share the link rate as their rate and borrow up to it; a closed gate is a
/// ceil of 1 % of the link rate (lab::wan_gate_tc), an open one the link rate: set_gate is
/// one in-place class change. Caveats:
///   - turning the link class into an inner one destroys its qdisc: what it held is lost.
///     That happens once per link, when a run declares its flows before it sends;
///   - the link class stays inner with the default child after set_flows({}) (no second
///     purge when the next run declares flows); it then carries everything at full rate;
///   - HTB keeps a class's token debt across ceil changes: a closed class that sent a
///     packet at its 1 % ceil owes up to one frame time at that ceil (100 frame times at the
///     link rate: 61 ms at 20 Mbit/s, 1.2 ms at 1 Gbit/s), and its gate opens only once
///     the debt is paid;
///   - the 1 % is per closed flow: N closed flows with packets held leak up to N %;
///   - set_flows releases what removed flows held: their filters go first, their gates
///     open, and their classes are deleted once empty (waiting at most delay + jitter + the
///     time to send what they held, and 5 s), all under the caller's lock;
///   - held packets count the closed flow's whole leaf (those still in netem's delay too),
///     and dropped counts netem's emulated loss as well as overflow.
class KernelShaper final : public LinkShaper {
 public:
  /// `router` is a socket opened in the lab's router namespace; `ports[k]` is its interface
  /// toward DC k (default: the namespace lab's names, lab::if_router_to).
  KernelShaper(netlink::Socket router, bool netem, std::vector<std::string> ports = {});
  std::string backend() const override { return "kernel"; }
  bool applies_delay() const override { return netem_; }
  void apply(const core::Topology& topo, const core::WanLink& link) override;
  LinkCounters counters(const core::Topology& topo, const core::WanLink& link) override;

  bool gates_flows() const override { return netem_; }
  void set_flows(const core::Topology& topo, const core::WanLink& link, const std::vector<GatedFlow>& flows) override;
  void set_gate(const core::Topology& topo, const core::WanLink& link, int flow, bool open) override;
  std::vector<FlowCounters> flow_counters(const core::Topology& topo, const core::WanLink& link) override;

 private:
  struct Flow {
    int id = 0;
    netlink::Handle cls;   // 1:<minor>, child of the link class
    netlink::Handle leaf;  // <major>:, its netem
    bool open = false;
    std::optional<Nanos> opened_ns;
  };
  // A link whose class was made inner by set_flows.
  struct Gated {
    netlink::Handle fallback;       // the default child
    netlink::Handle fallback_leaf;  // its netem (the link's leaf handle)
    std::vector<Flow> flows;
    bool flow_filters = false;  // the flows' u32 instance exists
  };
  // Handles in use on one router interface, beyond the plan's.
  struct Handles {
    std::set<std::uint16_t> minors;  // of classes 1:<minor>
    std::set<std::uint16_t> majors;  // of qdiscs <major>:
  };
  using LinkKey = std::pair<std::size_t, std::size_t>;

  Gated& split(const core::Topology& topo, const core::WanLink& link);
  void remove_flows(const core::Topology& topo, const core::WanLink& link, Gated& g);
  Flow& find_flow(const core::WanLink& link, int flow);

  std::string port(const core::Topology& topo, std::size_t dc) const;

  netlink::Socket router_;
  bool netem_;
  std::vector<std::string> ports_;
  std::map<LinkKey, Gated> gated_;
  std::map<std::string, Handles> handles_;  // by interface
};

}  // namespace wanlab::shaping
