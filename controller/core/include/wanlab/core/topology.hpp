#pragma once
// The topology model: what a lab is made of. Parsed and validated from JSON
// (topologies/README.md documents the format); pure, no I/O beyond reading the file.
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "wanlab/common/units.hpp"
#include "wanlab/core/diagnostics.hpp"

namespace wanlab::core {

// Limits that follow from kernel names (IFNAMSIZ = 16 with the NUL) and the address plan.
inline constexpr std::size_t kMaxLabName = 24;  // [a-z0-9][a-z0-9-]*, also a path and netns prefix
inline constexpr std::size_t kMaxDcName = 8;    // [a-z][a-z0-9]*; "<dc>-<node>" and "<dc>-<node>-p" name interfaces

/// Intra-DC network. A zero rate means unshaped (the veth's native speed).
struct Lan {
  Rate rate{};
  Duration delay{};
  int mtu = 1500;
  auto operator<=>(const Lan&) const = default;
};

/// What every node of a namespace lab gets besides its interface (`"node"` in the topology
/// file): the TCP congestion control of its sockets (net.ipv4.tcp_congestion_control, one
/// per network namespace) and further per-namespace sysctls a framework may need.
struct NodeSettings {
  /// none: "cubic" where the host allows it (what scenarios and the simulator assume), else
  /// the host's default with a warning; given: the lab is not built without it.
  std::optional<std::string> tcp_congestion;
  /// dotted keys ("net.ipv4.tcp_rmem") and values, sorted by key; net.* only.
  std::vector<std::pair<std::string, std::string>> sysctls;
  auto operator<=>(const NodeSettings&) const = default;
};

/// The congestion control a node uses when the topology names none.
inline constexpr const char* kDefaultTcpCongestion = "cubic";

/// A DC's scale-out network (`"fabric"` of a DC in the topology file; docs/rails.md).
///   - packet (the default): one LAN, the lab's bridge, the topology's `lan` rate per node;
///   - rails: rail k joins GPU k of every node (rails = GPUs per node), each GPU with one port
///     of `port_rate` on its rail. With `switching` packet each rail is an electrical packet
///     switch; with ocs an optical circuit switch that connects each port to one other port
///     at a time and takes `reconfiguration` to change its circuits, traffic being held at
///     the sender meanwhile.
struct Fabric {
  enum class Kind { packet, rails };
  enum class Switching { packet, ocs };
  Kind kind = Kind::packet;
  Switching switching = Switching::packet;
  int rails = 0;            // rails only: = the DC's gpus_per_node
  Rate port_rate{};         // rails only: each GPU's port on its rail, each direction
  Duration reconfiguration{};  // ocs only
  bool ocs() const { return kind == Kind::rails && switching == Switching::ocs; }
  auto operator<=>(const Fabric&) const = default;
};

/// The longest OCS reconfiguration a topology may give: beyond any optical circuit switch
/// (MEMS switches take about 10 to 25 ms, fast ones microseconds).
inline constexpr Duration kMaxReconfiguration = std::chrono::seconds(1);

/// "packet", "rails (packet, 8 x 400Gbit)", "rails (ocs, 8 x 400Gbit, 10ms)".
std::string to_string(const Fabric& fabric);

struct Dc {
  std::string name;      // e.g. "use"
  std::string region;    // free text, e.g. "aws:us-east-1" (optional)
  int nodes = 1;
  int gpus_per_node = 8;
  std::string gpu = "H100";  // one of known_gpu_kinds()
  Fabric fabric;
};

/// Parameters of one directed WAN link. Everything a `link set` can change.
struct LinkParams {
  Duration delay{};   // one-way
  Duration jitter{};
  Probability loss{};                   // per packet; with loss_burst, in its good state
  std::optional<LossBurst> loss_burst;  // bursty loss (Gilbert-Elliott); none: random loss only
  Rate rate{};
  std::optional<QueueLimit> queue;  // none: sized from the bandwidth-delay product
  auto operator<=>(const LinkParams&) const = default;
};

/// One directed WAN link src -> dst (indices into Topology::dcs).
struct WanLink {
  std::size_t src = 0;
  std::size_t dst = 0;
  LinkParams params;
  std::optional<std::filesystem::path> trace;  // resolved against the topology file's folder
  std::string json_path;                       // where it was declared, e.g. "/wan/3"
};

struct Topology {
  std::string name;         // lab name
  std::string source_file;  // as given, for messages
  Lan lan;
  NodeSettings node;
  std::vector<Dc> dcs;
  std::vector<WanLink> links;  // directed; a `between` entry yields two

  std::optional<std::size_t> dc_index(std::string_view dc_name) const;
  const WanLink* find_link(std::size_t src, std::size_t dst) const;
  WanLink* find_link(std::size_t src, std::size_t dst);
  std::size_t node_count() const;
};

/// Whether two topologies have the same DCs, in the same order, with the same nodes and GPUs
/// (a scenario planned on one runs unchanged on the other; links may differ).
bool same_dcs(const Topology& a, const Topology& b);

/// What differs between a running lab's topology (`running`) and another (`other`), one line
/// each, e.g. "DC euw: 2 nodes (running) vs 1", "link use->euw: delay 61ms (running) vs 40ms",
/// "link use->apne: only in the running lab". Empty when they build the same lab.
std::vector<std::string> topology_differences(const Topology& running, const Topology& other);

/// GPU kinds the lab knows ("A100", "H100", "H200").
const std::vector<std::string>& known_gpu_kinds();

/// "<dc>-<index>", e.g. "use-0".
std::string node_name(const Dc& dc, int index);

/// Whether a DC of the topology has rails (docs/rails.md).
bool has_rails(const Topology& topo);

/// Reads, parses and validates a topology file. Throws ConfigError listing every problem
/// (unreadable file, bad JSON with line/column, and all validation errors at once).
Topology load_topology(const std::filesystem::path& file);

/// Parses and validates an already-read document. `file` names it in diagnostics; relative
/// trace paths resolve against `base_dir`.
Topology parse_topology(const nlohmann::json& doc, const std::string& file,
                        const std::filesystem::path& base_dir);

/// Canonical JSON (directed links, canonical unit strings); parse_topology accepts it back.
nlohmann::json to_json(const Topology& topo);

/// The default queue limit for a link in packets: 1.5 x bandwidth x RTT in MTU-sized
/// packets, RTT being this link's delay plus its reverse link's, plus jitter; at least 64.
std::uint64_t default_queue_packets(const Topology& topo, const WanLink& link);

}  // namespace wanlab::core
