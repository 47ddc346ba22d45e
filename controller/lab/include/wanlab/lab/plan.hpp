#pragma once
// Plan, then apply: a pure function turns a topology into the ordered list of kernel
// operations that builds its lab (testable as data, golden files in tests/unit/golden).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "wanlab/core/address_plan.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/netlink/netlink.hpp"

namespace wanlab::lab {

/// The namespace of an operation that acts where the process itself runs (router-only labs
/// in containers, router_only.hpp). Lab namespaces always contain a '.', so no lab's
/// namespace is called this.
inline constexpr const char* kOwnNetns = "self";

struct CreateNetns { std::string ns; };
struct SetSysctl { std::string ns, key, value; };
struct CreateVeth { std::string ns, name, peer_ns, peer; int mtu; };
struct CreateBridge { std::string ns, name; int mtu; };
struct SetMaster { std::string ns, ifname, master; };
struct SetUp { std::string ns, ifname; };
struct SetAlias { std::string ns, ifname, alias; };
struct AddAddress { std::string ns, ifname; core::Ipv4Prefix prefix; };
struct AddRoute { std::string ns; core::Ipv4Prefix dst; core::Ipv4 via; std::string ifname; };
struct AddHtbQdisc { std::string ns, ifname; netlink::Handle handle; std::uint32_t default_minor; };
struct AddHtbClass { std::string ns, ifname; netlink::Handle parent, classid; netlink::HtbClassParams params; };
struct AddNetem { std::string ns, ifname; netlink::Handle parent, handle; netlink::NetemParams params; };
struct AddPfifo { std::string ns, ifname; netlink::Handle parent, handle; std::uint32_t limit; };
struct AddSrcFilter { std::string ns, ifname; netlink::Handle parent; std::uint16_t prio; core::Ipv4Prefix src; netlink::Handle flowid; };
struct DisableOffloads { std::string ns, ifname; };
struct SetForwarding { std::string ns, ifname; bool on; };  // IPv4, per interface (netlink, not /proc/sys)
struct SetMac { std::string ns, ifname; std::array<std::uint8_t, 6> mac; };
struct DelRoute { std::string ns; core::Ipv4Prefix dst; };  // absent already: nothing to do
// A node's identity: a UTS namespace kept at /run/utsns/<ns> with the node's host name, and
// the lab's hosts file at /etc/netns/<ns>/hosts, which every command entering the node sees
// as /etc/hosts (netlink/node_entry.hpp, as `ip netns exec` shows /etc/netns/<ns>/*).
struct CreateUtsns { std::string ns, hostname; };
struct WriteHosts { std::string ns, text; };
// Receive packet steering of an interface (netlink/rps.hpp): the CPUs, as a hex mask, that
// run the receive path of the frames it takes in. Best effort: a failure is logged, not fatal.
struct SetRps { std::string ns, ifname, mask; };

using Op = std::variant<CreateNetns, SetSysctl, CreateVeth, CreateBridge, SetMaster, SetUp, SetAlias, AddAddress,
                        AddRoute, AddHtbQdisc, AddHtbClass, AddNetem, AddPfifo, AddSrcFilter, DisableOffloads,
                        SetForwarding, SetMac, DelRoute, CreateUtsns, WriteHosts, SetRps>;

/// The name of each operation type, by its index in Op. Sized by its initializer, so a
/// type added to Op without a name here fails the build (static_assert below).
inline constexpr std::array kOpTypeNames{"CreateNetns",  "SetSysctl",       "CreateVeth",    "CreateBridge",
                                         "SetMaster",    "SetUp",           "SetAlias",      "AddAddress",
                                         "AddRoute",     "AddHtbQdisc",     "AddHtbClass",   "AddNetem",
                                         "AddPfifo",     "AddSrcFilter",    "DisableOffloads", "SetForwarding",
                                         "SetMac",       "DelRoute",        "CreateUtsns",   "WriteHosts",
                                         "SetRps"};
static_assert(kOpTypeNames.size() == std::variant_size_v<Op>, "lab::kOpTypeNames needs one name per lab::Op type");
inline const char* op_type_name(const Op& op) { return kOpTypeNames[op.index()]; }

/// One line per operation, e.g. "veth demo.gw-use:use-0-p <-> demo.use-0:use-0 mtu 1500".
std::string to_string(const Op& op);
/// The namespace an operation acts in.
const std::string& op_namespace(const Op& op);

enum class Backend { kernel, userspace };

struct PlanOptions {
  Backend backend = Backend::kernel;
  bool netem = true;  // kernel backend without netem: leaves are pfifo, delay/jitter/loss not applied
  /// Every node's net.ipv4.tcp_congestion_control; none: the host's default (the caller
  /// decides, lab/host_tcp.hpp: the host must allow it to namespaces).
  std::optional<std::string> tcp_congestion{};
  /// The rps_cpus mask of every veth end (both ends of each pair), e.g. every CPU but the
  /// userspace engine's, so frames the engine sends are received on other CPUs; none: the
  /// kernel's default (received on the sending CPU).
  std::optional<std::string> rps_cpus{};
};

struct Plan {
  std::vector<std::string> namespaces;  // every namespace the lab owns, router first
  std::vector<Op> ops;                  // in order
};

/// A DC whose fabric is rails also gets its rail switch's namespace and every node's rail
/// ports (docs/rails.md). Throws core::ConfigError for rails the lab cannot build (the
/// kernel backend; beyond the rails' address plan).
Plan plan_lab(const core::Topology& topo, const PlanOptions& options);

/// The WAN links' traffic control (kernel backend): on the router's egress toward each
/// destination DC (`ports[dst]`, in namespace `router`), one HTB class per source DC,
/// classified by source subnet, with its leaf.
void plan_wan(const core::Topology& topo, const PlanOptions& options, const std::string& router,
              const std::vector<std::string>& ports, Plan& plan);

}  // namespace wanlab::lab
