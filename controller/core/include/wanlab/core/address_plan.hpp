#pragma once
// The lab's IPv4 address plan inside 198.18.0.0/15 (RFC 2544 benchmarking space).
//   DC k (0-based, k < 64): LAN 198.18.4k.0/22; gateway .1; node i at base + 2 + i.
//   Router <-> gateway of DC k: 198.19.0.4k/30; router .4k+1, gateway .4k+2.
//   Rail r of DC k (a DC whose fabric is rails; k < 15, r < 16): 198.19.(16 + 16k + r).0/24;
//   node i's port at .1 + i (i < 253). No gateway: a rail joins the DC's nodes only.
// Every lab lives in its own namespaces, so two labs reuse the same addresses safely.
#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace wanlab::core {

struct Ipv4 {
  std::uint32_t value = 0;  // host byte order
  std::string to_string() const;
  auto operator<=>(const Ipv4&) const = default;
};

struct Ipv4Prefix {
  Ipv4 address;
  int length = 32;
  std::string to_string() const;  // "198.18.4.0/22"
  bool contains(Ipv4 a) const;
  auto operator<=>(const Ipv4Prefix&) const = default;
};

inline constexpr int kMaxDcs = 64;
inline constexpr int kMaxNodesPerDc = 1021;  // a /22 less network, gateway and broadcast

Ipv4Prefix dc_subnet(int dc);
Ipv4 dc_gateway(int dc);
Ipv4 node_address(int dc, int node);
Ipv4Prefix transit_router_side(int dc);   // router's address with the /30 length
Ipv4Prefix transit_gateway_side(int dc);  // gateway's address with the /30 length
Ipv4Prefix lab_supernet();                // 198.18.0.0/15

/// The lab's rails (docs/rails.md): the address space above limits them to DCs of index
/// below kMaxRailDcs, kMaxRails rails and kMaxRailNodes nodes (lab::plan_lab says so).
inline constexpr int kMaxRailDcs = 15;
inline constexpr int kMaxRails = 16;
inline constexpr int kMaxRailNodes = 253;
Ipv4Prefix rail_subnet(int dc, int rail);          // 198.19.(16 + 16 dc + rail).0/24
Ipv4 rail_address(int dc, int rail, int node);     // .1 + node in it
/// Which rail port an address of the rails' space is: (dc, rail, node), or nullopt.
std::optional<std::array<int, 3>> rail_port_of(Ipv4 a);
/// The hardware address of node `node`'s port on rail `rail` of DC `dc`: 02:57:52 and the
/// port address's last three bytes (the rail switch sends each frame to its port's address).
std::array<std::uint8_t, 6> rail_mac(int dc, int rail, int node);

/// Swarm labs (Docker Swarm does not give services static addresses): Docker allocates the
/// containers' own addresses from the upper half of each DC's /22 (198.18.4k+2.0/23, the
/// overlay network's subnet), and each node adds its plan address (in the lower half) itself.
/// So a DC of a swarm lab has at most kMaxSwarmNodesPerDc nodes (198.18.4k.2 .. 4k+1.254).
inline constexpr int kMaxSwarmNodesPerDc = 509;
Ipv4Prefix swarm_task_subnet(int dc);  // 198.18.4k+2.0/23

/// The hardware address of node `node` of DC `dc` in router-only labs (containers), where
/// the router sends frames straight to the nodes: 02:57:4c (locally administered) and the
/// node address's last three bytes, e.g. 02:57:4c:12:04:02 for 198.18.4.2.
std::array<std::uint8_t, 6> node_mac(int dc, int node);
std::string mac_text(const std::array<std::uint8_t, 6>& mac);  // "02:57:4c:12:04:02"

}  // namespace wanlab::core
