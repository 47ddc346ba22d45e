#pragma once
// The userspace WAN engine: the lab router's forwarding, done in the controller. One
// thread receives frames on the router's DC-facing interfaces (memory-mapped rings),
// passes each through its directed link's model (queue, serializer, loss, propagation)
// and transmits it toward the destination DC when the model releases it.
//
// No allocation per packet: frames live in a fixed pool of slots (mapped without
// reserving memory, so only slots ever used cost memory); the models hold slot indices.
// Release times come from an indexed min-heap of each link's next event. Between events
// the thread sleeps in ppoll() with nanosecond timeouts (timer slack 1 ns) and spins only
// for the last few microseconds before a deadline.
//
// Flow gating (see LinkShaper, flow_gate.hpp): a link with declared flows classifies each
// frame before its model; a frame of a flow whose gate is closed waits in that flow's FIFO
// (its pool slot held) and enters the model when the gate opens, ahead of the flow's later
// packets. Links without declared flows pay one branch per frame. The pool grows (mremap,
// when flows are declared) by the packets the gates may hold, so held packets never take
// the links' share. Declarations and gate changes are applied by the engine thread, like
// link changes; set_flows returns once it has applied them, set_gate at once (the thread
// applies queued gate changes in order within microseconds). A link's counters
// count what entered its model: held packets once their gate opens, not those dropped at
// a full gate (the flow's `dropped` and EngineStats::gate_dropped count those).
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "wanlab/common/thread.hpp"
#include "wanlab/netlink/netlink.hpp"
#include "wanlab/shaping/link_model.hpp"
#include "wanlab/shaping/link_shaper.hpp"
#include "wanlab/shaping/packet_socket.hpp"

namespace wanlab::shaping {

using Mac = std::array<std::uint8_t, 6>;

/// The router's interface toward one DC (index = DC index).
struct EnginePort {
  std::string ifname;  // in the router namespace, e.g. "to-use"
  Mac router_mac{};    // that interface's address: source of frames sent toward the DC
  Mac gateway_mac{};   // the DC gateway's address on the same veth: their destination
  // A router that sits on the DC's LAN itself (router-only labs) sends each frame to its
  // destination host: hosts[i] is the address of the DC subnet's host i (the address less
  // the subnet's), if it is one to forward to. Frames toward any other address of the
  // subnet are left to the kernel. Empty: every frame goes to gateway_mac.
  std::vector<std::optional<Mac>> hosts;
  // Swarm labs (the nodes keep the hardware addresses Docker gave them): `hosts` starts
  // empty of addresses (one slot per address of the /22) and the engine fills it from the
  // frames the port receives, each IPv4 source address of the DC's subnet with the frame's
  // source hardware address (the router's own frames aside). A node is known once it has
  // sent a frame through the router (its agent's connection to the controller does).
  bool learn_hosts = false;
};

struct EngineLink {
  std::size_t src = 0, dst = 0;
  LinkModelParams params;
};

/// The engine thread's scheduling unless `wanlab up --engine-sched` says otherwise:
/// SCHED_FIFO 50. Under the fair scheduler, even at nice -20, a busy host (a build, other
/// labs, two busy loops on 2 cores) delayed 9-29 % of its releases by more than 1 ms
/// (bench/results/2026-11-26-engine-realtime.md). It sleeps between releases and spins at
/// most kSpin (40 µs) before one, and the kernel's RT throttling (sched_rt_runtime_us)
/// bounds what it can take of a CPU, so it cannot lock the machine up.
ThreadSched default_engine_sched();
/// Where a real-time policy is refused (a container without CAP_SYS_NICE): nice -20.
ThreadSched engine_sched_fallback();

/// The bounds (ns, inclusive) of EngineStats::release_late_hist's buckets; the last catches all.
inline constexpr std::array<std::uint64_t, 15> kReleaseLateBoundsNs{
    5'000,   10'000,    20'000,    50'000,    100'000,    150'000,     200'000,   300'000,
    500'000, 1'000'000, 2'000'000, 5'000'000, 10'000'000, 100'000'000, UINT64_MAX};

struct EngineConfig {
  std::vector<EnginePort> ports;
  std::vector<EngineLink> links;
  std::uint32_t lan_prefix = 0xC6120000;  // 198.18.0.0/16: DC k's LAN is lan_prefix + (k << 10), /22
  RingGeometry ring;
  std::uint64_t seed = 1;
  ThreadSched sched = default_engine_sched();  // the engine thread's (fallback: engine_sched_fallback())
};

struct EngineStats {
  std::uint64_t rx_frames = 0;       // frames seen on the DC-facing interfaces
  std::uint64_t forwarded = 0;       // frames transmitted toward a DC
  std::uint64_t not_for_wan = 0;     // ARP, router-addressed and other frames left to the kernel
  std::uint64_t unroutable = 0;      // toward a DC this DC has no link to
  std::uint64_t truncated = 0;       // larger than a ring slot
  std::uint64_t gso_frames = 0;      // super-frames received (several packets on the wire)
  std::uint64_t gso_split = 0;       // of those, cut into chunks (gso.hpp)
  std::uint64_t ttl_expired = 0;
  std::uint64_t pool_exhausted = 0;
  std::uint64_t tx_ring_full = 0;
  // Dropped by the kernel because an RX ring was full (the engine read too late): MTU-sized
  // frames' rings, super-frames' rings.
  std::uint64_t rx_ring_dropped = 0;
  std::uint64_t rx_big_ring_dropped = 0;
  std::uint64_t wakeups = 0;
  // How late the engine handed packets to the kernel, against the time the link model made
  // them due (its own scheduling: wake-up latency, work ahead of them in the loop). Ages
  // are taken when the engine turns to a link, once per batch of due packets.
  std::uint64_t releases = 0;
  std::uint64_t release_late_ns_total = 0;
  std::uint64_t release_late_ns_max = 0;
  std::uint64_t released_late_over_100us = 0;
  std::uint64_t released_late_over_1ms = 0;
  // Releases by lateness: bucket i counts those late by at most kReleaseLateBoundsNs[i]
  // (and more than bucket i-1's bound), so a run's percentiles are two readings apart.
  std::array<std::uint64_t, kReleaseLateBoundsNs.size()> release_late_hist{};
  std::uint64_t cpu_us = 0;  // the engine thread's CPU time (user + system, incl. softirq work run on it)
  // Its time off the CPU (thread_load.hpp): runnable but waiting for its CPU, and taken from
  // its CPU by the hypervisor. Sampled every 10 ms (steal every 100 ms).
  std::uint64_t run_delay_ns = 0;
  std::uint64_t cpu_steal_ns = 0;
  // Flow gating, all links together.
  std::uint64_t gated_flows = 0;    // declared now
  std::uint64_t open_gates = 0;     // of those, open now
  std::uint64_t held_packets = 0;   // waiting at closed gates now
  std::uint64_t gate_dropped = 0;   // dropped by a full closed gate (ever)
};

class Engine {
 public:
  /// Opens the packet sockets in `router` (throws if it cannot). Call start() to run.
  Engine(const netlink::Netns& router, EngineConfig config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  void start();
  void stop();

  /// Changes a link in place (applied by the engine thread within microseconds).
  void set_link(std::size_t src, std::size_t dst, const LinkModelParams& params);
  /// Counters of a link as of at most 10 ms ago; nullopt for a link that does not exist.
  std::optional<LinkModelCounters> counters(std::size_t src, std::size_t dst) const;

  /// Declares the gated flows of a link, every gate closed (see LinkShaper::set_flows);
  /// each gate holds at most `hold_packets` packets (clamped to [1, 2^20]). Flows still
  /// declared (same id) keep their held packets and counters. Throws std::invalid_argument
  /// for a link that does not exist or duplicate or negative ids.
  void set_flows(std::size_t src, std::size_t dst, const std::vector<GatedFlow>& flows, std::size_t hold_packets);
  /// Opens or closes a declared flow's gate (std::out_of_range for one not declared);
  /// returns without waiting for the engine thread, which applies it next.
  void set_gate(std::size_t src, std::size_t dst, int flow, bool open);
  /// Counters of the link's gated flows (declaration order) as of at most 10 ms ago, or of
  /// the last set_flows, whichever is later; empty where none are declared.
  std::vector<FlowCounters> flow_counters(std::size_t src, std::size_t dst) const;
  EngineStats stats() const;
  /// The engine thread's scheduling as it got it ("SCHED_FIFO 50", "nice -20 (fifo:50
  /// refused: ...)"); empty until the thread has started.
  std::string scheduling() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The hardware address of an interface in a namespace (SIOCGIFHWADDR).
Mac interface_mac(const netlink::Netns& ns, const std::string& ifname);

}  // namespace wanlab::shaping
