#include "wanlab/shaping/flow_gate.hpp"

#include <algorithm>
#include <bit>
#include <fmt/format.h>
#include <stdexcept>

namespace wanlab::shaping {
namespace {

std::size_t hash_key(std::uint32_t saddr, std::uint32_t daddr, std::uint16_t sport) {
  std::uint64_t h = (static_cast<std::uint64_t>(saddr) << 32 | daddr) ^ (static_cast<std::uint64_t>(sport) * 0x9e3779b97f4a7c15ULL);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return static_cast<std::size_t>(h);
}

}  // namespace

std::optional<FlowKey> frame_flow_key(const std::uint8_t* f, std::uint32_t len) {
  if (len < 14 + 20 || f[12] != 0x08 || f[13] != 0x00) return std::nullopt;
  const std::uint8_t* ip = f + 14;
  if ((ip[0] >> 4) != 4) return std::nullopt;
  const std::uint32_t ihl = static_cast<std::uint32_t>(ip[0] & 0x0f) * 4;
  if (ihl < 20 || 14 + ihl + 2 > len) return std::nullopt;  // the source port must be there
  if (ip[9] != 6 && ip[9] != 17) return std::nullopt;
  // A fragment other than the first carries no ports.
  if (((ip[6] & 0x1f) | ip[7]) != 0) return std::nullopt;
  FlowKey k;
  k.saddr = static_cast<std::uint32_t>(ip[12]) << 24 | static_cast<std::uint32_t>(ip[13]) << 16 |
            static_cast<std::uint32_t>(ip[14]) << 8 | ip[15];
  k.daddr = static_cast<std::uint32_t>(ip[16]) << 24 | static_cast<std::uint32_t>(ip[17]) << 16 |
            static_cast<std::uint32_t>(ip[18]) << 8 | ip[19];
  k.sport = static_cast<std::uint16_t>(ip[ihl] << 8 | ip[ihl + 1]);
  return k;
}

void FlowClassifier::Table::insert(const Entry& e) {
  const std::size_t mask = slots.size() - 1;
  for (std::size_t i = hash_key(e.saddr, e.daddr, e.sport) & mask;; i = (i + 1) & mask) {
    Entry& s = slots[i];
    if (s.flow == kNone) {
      s = e;
      return;
    }
    if (s.saddr == e.saddr && s.daddr == e.daddr && s.sport == e.sport) {
      s.flow = std::min(s.flow, e.flow);  // the flow declared first keeps the key
      return;
    }
  }
}

int FlowClassifier::Table::find(std::uint32_t saddr, std::uint32_t daddr, std::uint16_t sport) const {
  if (slots.empty()) return kNone;
  const std::size_t mask = slots.size() - 1;
  for (std::size_t i = hash_key(saddr, daddr, sport) & mask;; i = (i + 1) & mask) {
    const Entry& s = slots[i];
    if (s.flow == kNone) return kNone;
    if (s.saddr == saddr && s.daddr == daddr && s.sport == sport) return s.flow;
  }
}

FlowClassifier::FlowClassifier(const std::vector<GatedFlow>& flows) {
  // Count the matches per mask and kind, so each table is sized once.
  struct Sizes {
    std::uint16_t mask;
    std::size_t exact = 0, wildcard = 0;
  };
  std::vector<Sizes> sizes;
  auto sizes_of = [&](std::uint16_t mask) -> Sizes& {
    for (auto& s : sizes)
      if (s.mask == mask) return s;
    return sizes.emplace_back(Sizes{mask});
  };
  // A match whose port has bits outside its mask can never match: left out.
  auto usable = [](const FlowMatch& m) { return (m.sport & m.sport_mask) == m.sport; };
  for (const auto& f : flows)
    for (const auto& m : f.matches)
      if (usable(m)) (m.daddr ? sizes_of(m.sport_mask).exact : sizes_of(m.sport_mask).wildcard)++;
  auto table_size = [](std::size_t n) { return n == 0 ? 0 : std::bit_ceil(std::max<std::size_t>(2 * n, 8)); };
  for (const auto& s : sizes) {
    Group& g = groups_.emplace_back();
    g.mask = s.mask;
    g.exact.slots.resize(table_size(s.exact));
    g.wildcard.slots.resize(table_size(s.wildcard));
  }
  for (std::size_t i = 0; i < flows.size(); ++i)
    for (const auto& m : flows[i].matches) {
      if (!usable(m)) continue;
      for (auto& g : groups_)
        if (g.mask == m.sport_mask) (m.daddr ? g.exact : g.wildcard).insert({m.saddr, m.daddr, m.sport, static_cast<std::int32_t>(i)});
    }
}

int FlowClassifier::classify(const FlowKey& k) const {
  int best = kNone;
  for (const auto& g : groups_) {
    const auto port = static_cast<std::uint16_t>(k.sport & g.mask);
    for (const int f : {g.exact.find(k.saddr, k.daddr, port), g.wildcard.find(k.saddr, 0, port)})
      if (f != kNone && (best == kNone || f < best)) best = f;
  }
  return best;
}

FlowGates::FlowGates(const std::vector<GatedFlow>& flows, std::size_t hold_capacity) : classifier_(flows) {
  flows_.resize(flows.size());
  for (std::size_t i = 0; i < flows.size(); ++i) {
    const int id = flows[i].id;
    if (id < 0) throw std::invalid_argument(fmt::format("gated flow id {}: ids are >= 0", id));
    for (std::size_t j = 0; j < i; ++j)
      if (flows[j].id == id) throw std::invalid_argument(fmt::format("gated flow id {} declared twice", id));
    flows_[i].c.id = id;
    flows_[i].held.resize(std::max<std::size_t>(hold_capacity, 1));
  }
}

int FlowGates::index_of(int id) const {
  for (std::size_t i = 0; i < flows_.size(); ++i)
    if (flows_[i].c.id == id) return static_cast<int>(i);
  return FlowClassifier::kNone;
}

void FlowGates::counters(std::vector<FlowCounters>& out) const {
  out.resize(flows_.size());
  for (std::size_t i = 0; i < flows_.size(); ++i) {
    out[i] = flows_[i].c;
    out[i].held_packets = flows_[i].count;
  }
}

std::uint64_t FlowGates::held_packets() const {
  std::uint64_t n = 0;
  for (const auto& f : flows_) n += f.count;
  return n;
}

std::uint64_t FlowGates::hold_capacity() const {
  std::uint64_t n = 0;
  for (const auto& f : flows_) n += f.held.size();
  return n;
}

std::uint64_t FlowGates::open_gates() const {
  std::uint64_t n = 0;
  for (const auto& f : flows_) n += f.c.open ? 1 : 0;
  return n;
}

}  // namespace wanlab::shaping
