#pragma once
// How WAN links are shaped at run time: in-place parameter changes and live counters.
// Backends: kernel (HTB + netem through netlink) and userspace (the engine in the controller).
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "wanlab/core/topology.hpp"

namespace wanlab::shaping {

struct LinkCounters {
  std::uint64_t packets = 0;     // sent on the link
  std::uint64_t bytes = 0;
  std::uint64_t drops = 0;       // queue overflow and emulated loss
  std::uint64_t overlimits = 0;  // times the rate held a packet back
  std::uint64_t queued_packets = 0;
  std::uint64_t queued_bytes = 0;
  // The userspace engine also tells these apart (the kernel backend leaves them 0).
  std::uint64_t packets_in = 0;
  std::uint64_t bytes_in = 0;
  std::uint64_t dropped_queue = 0;
  std::uint64_t dropped_loss = 0;
  std::uint64_t in_flight_packets = 0;
  std::uint64_t payload_bytes = 0;  // TCP/UDP payload sent on the link
};

class LinkShaper {
 public:
  virtual ~LinkShaper() = default;
  virtual std::string backend() const = 0;
  /// Whether delay, jitter and loss are applied (rate and queue limit always are).
  virtual bool applies_delay() const = 0;
  /// Applies `link.params` (already updated in `topo`) in place: queues are kept.
  virtual void apply(const core::Topology& topo, const core::WanLink& link) = 0;
  virtual LinkCounters counters(const core::Topology& topo, const core::WanLink& link) = 0;
  /// Backend-wide counters worth showing in `status` (name, value); none by default.
  virtual std::vector<std::pair<std::string, std::uint64_t>> stats() const { return {}; }
};

}  // namespace wanlab::shaping
