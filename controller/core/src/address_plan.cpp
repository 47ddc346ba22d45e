#include "wanlab/core/address_plan.hpp"

#include <fmt/format.h>
#include <stdexcept>

namespace wanlab::core {
namespace {
constexpr std::uint32_t ip(int a, int b, int c, int d) {
  return (static_cast<std::uint32_t>(a) << 24) | (static_cast<std::uint32_t>(b) << 16) |
         (static_cast<std::uint32_t>(c) << 8) | static_cast<std::uint32_t>(d);
}
void check_dc(int dc) {
  if (dc < 0 || dc >= kMaxDcs) throw std::out_of_range(fmt::format("DC index {} outside the address plan (< {})", dc, kMaxDcs));
}
}  // namespace

std::string Ipv4::to_string() const {
  return fmt::format("{}.{}.{}.{}", value >> 24, (value >> 16) & 0xff, (value >> 8) & 0xff, value & 0xff);
}

std::string Ipv4Prefix::to_string() const { return fmt::format("{}/{}", address.to_string(), length); }

bool Ipv4Prefix::contains(Ipv4 a) const {
  const std::uint32_t mask = length == 0 ? 0 : ~std::uint32_t{0} << (32 - length);
  return (a.value & mask) == (address.value & mask);
}

Ipv4Prefix dc_subnet(int dc) {
  check_dc(dc);
  return {Ipv4{ip(198, 18, 4 * dc, 0)}, 22};
}
Ipv4 dc_gateway(int dc) { return Ipv4{dc_subnet(dc).address.value + 1}; }
Ipv4 node_address(int dc, int node) {
  if (node < 0 || node >= kMaxNodesPerDc)
    throw std::out_of_range(fmt::format("node index {} outside the address plan (< {})", node, kMaxNodesPerDc));
  return Ipv4{dc_subnet(dc).address.value + 2 + static_cast<std::uint32_t>(node)};
}
Ipv4Prefix swarm_task_subnet(int dc) {
  check_dc(dc);
  return {Ipv4{ip(198, 18, 4 * dc + 2, 0)}, 23};
}
Ipv4Prefix transit_router_side(int dc) {
  check_dc(dc);
  return {Ipv4{ip(198, 19, 0, 4 * dc + 1)}, 30};
}
Ipv4Prefix transit_gateway_side(int dc) {
  check_dc(dc);
  return {Ipv4{ip(198, 19, 0, 4 * dc + 2)}, 30};
}
Ipv4Prefix lab_supernet() { return {Ipv4{ip(198, 18, 0, 0)}, 15}; }

Ipv4Prefix rail_subnet(int dc, int rail) {
  if (dc < 0 || dc >= kMaxRailDcs)
    throw std::out_of_range(fmt::format("DC index {} outside the rails' address plan (< {})", dc, kMaxRailDcs));
  if (rail < 0 || rail >= kMaxRails)
    throw std::out_of_range(fmt::format("rail {} outside the rails' address plan (< {})", rail, kMaxRails));
  return {Ipv4{ip(198, 19, 16 + 16 * dc + rail, 0)}, 24};
}
Ipv4 rail_address(int dc, int rail, int node) {
  if (node < 0 || node >= kMaxRailNodes)
    throw std::out_of_range(fmt::format("node index {} outside the rails' address plan (< {})", node, kMaxRailNodes));
  return Ipv4{rail_subnet(dc, rail).address.value + 1 + static_cast<std::uint32_t>(node)};
}
std::optional<std::array<int, 3>> rail_port_of(Ipv4 a) {
  if ((a.value >> 16) != ip(198, 19, 0, 0) >> 16) return std::nullopt;
  const int third = static_cast<int>((a.value >> 8) & 0xff) - 16;
  const int host = static_cast<int>(a.value & 0xff);
  if (third < 0 || third >= 16 * kMaxRailDcs || host < 1 || host > kMaxRailNodes) return std::nullopt;
  return std::array<int, 3>{third / 16, third % 16, host - 1};
}
std::array<std::uint8_t, 6> rail_mac(int dc, int rail, int node) {
  const auto a = rail_address(dc, rail, node).value;
  return {0x02, 0x57, 0x52, static_cast<std::uint8_t>(a >> 16), static_cast<std::uint8_t>(a >> 8),
          static_cast<std::uint8_t>(a)};
}

std::array<std::uint8_t, 6> node_mac(int dc, int node) {
  const auto a = node_address(dc, node).value;
  return {0x02, 0x57, 0x4c, static_cast<std::uint8_t>(a >> 16), static_cast<std::uint8_t>(a >> 8),
          static_cast<std::uint8_t>(a)};
}

std::string mac_text(const std::array<std::uint8_t, 6>& m) {
  return fmt::format("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5]);
}

}  // namespace wanlab::core
