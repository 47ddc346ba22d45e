#include "wanlab/shaping/engine.hpp"

#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <stdexcept>

#include "wanlab/common/indexed_heap.hpp"
#include "wanlab/common/thread.hpp"
#include "wanlab/common/unique_fd.hpp"
#include "wanlab/shaping/flow_gate.hpp"
#include "wanlab/shaping/gso.hpp"
#include "wanlab/shaping/thread_load.hpp"
#include "packet_pool.hpp"

namespace wanlab::shaping {
namespace {

using engine_detail::mono_now;
using engine_detail::PiMutex;
using engine_detail::Pools;
using engine_detail::SlotMeta;

constexpr std::uint32_t kNoLink = UINT32_MAX;
// The host part of an address in a DC's /22.
constexpr std::uint32_t kHostMask = 0x3ff;
constexpr std::uint32_t kRxBudget = 256;       // frames per interface per loop turn
constexpr Nanos kSpin = 40'000;                // spin, rather than sleep, this close to a deadline
// A real-time thread wakes within microseconds of its timer, so it spins less. It must: at
// 24k releases a second (three-dc-7b) a 40 µs spin kept it on the CPU 85 % of the time, in
// bursts that used up the kernel's RT budget (sched_rt_runtime_us: "RT throttling
// activated"), which then stopped it for up to 50 ms.
constexpr Nanos kSpinRealtime = 10'000;
constexpr Nanos kPublishEvery = 10'000'000;    // counters snapshot period
// Frames released are handed to the kernel in batches: when this many wait, when the
// oldest has waited this long, or before the thread sleeps.
constexpr std::uint32_t kFlushFrames = 64;
constexpr Nanos kFlushAge = 10'000;
// The engine is the network: it runs before the lab's workload (agents, prefill, iperf3)
// when both want a CPU. At nice 0 on a 2-core machine a BubbleTea run (12 agents) let the
// RX rings overflow, 1,850-2,300 super-frames a run; at nice -20, 0-74 (bench/README.md,
// "The engine's priority"). Nice -20 did not keep it on time when the host was busy: 9-29 %
// of releases more than 1 ms late. It now runs SCHED_FIFO (default_engine_sched()); a
// real-time thread must not spin long: it spins at most kSpinRealtime before a release and sleeps
// in ppoll() otherwise, and the kernel's RT throttling bounds it in any case.
constexpr int kEngineNice = -20;

Nanos real_now() {
  timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<Nanos>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Packets a link may hold at once: its queue limit plus what propagates in two
// bandwidth-delay products of full-size frames, plus slack for small packets.
std::size_t link_capacity(const LinkModelParams& p) {
  const double bdp_frames = static_cast<double>(p.rate.bps) / 8.0 *
                            static_cast<double>((p.delay + p.jitter).count()) / 1e9 / 1514.0;
  const std::size_t queue = p.queue.unit == QueueLimit::Unit::packets ? p.queue.value : p.queue.value / 64 + 1;
  return std::min<std::size_t>(queue, 1u << 20) + static_cast<std::size_t>(2 * bdp_frames) + 4096;
}

}  // namespace

Mac interface_mac(const netlink::Netns& ns, const std::string& ifname) {
  netlink::ScopedNetns in(ns);
  const UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd) throw std::runtime_error(fmt::format("socket: {}", std::strerror(errno)));
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
  const int rc = ::ioctl(fd.get(), SIOCGIFHWADDR, &ifr);
  const int err = errno;
  if (rc != 0) throw std::runtime_error(fmt::format("SIOCGIFHWADDR {} in {}: {}", ifname, ns.name(), std::strerror(err)));
  Mac m;
  std::memcpy(m.data(), ifr.ifr_hwaddr.sa_data, 6);
  return m;
}

struct Engine::Impl {
  EngineConfig cfg;
  // Per port: the sockets for MTU-sized frames and for super-frames (packet_socket.hpp).
  std::vector<std::unique_ptr<PacketSocket>> sockets, big_sockets;
  std::uint32_t small_max = 0;  // largest frame the small rings carry
  std::vector<std::uint8_t> last_tx_big;  // per port: the socket the last frame went to
  std::vector<std::unique_ptr<LinkModel>> models;      // per link
  std::vector<std::uint32_t> link_of;                  // [src * ports + dst] -> link or kNoLink
  std::unique_ptr<Pools> pool;
  std::size_t pool_slots = 0;  // for the links' own packets; the gates' come on top
  std::vector<std::unique_ptr<FlowGates>> gates;  // per link; null: no gated flows
  // Every link by its next event (kNever: none).
  IndexedMinHeap<Nanos> heap;
  UniqueFd wake_fd;
  std::thread thread;
  std::atomic<bool> running{false};

  // Cross-thread: parameter changes in, counter snapshots out.
  mutable PiMutex mutex;
  std::string scheduling;  // what the thread got (Engine::scheduling)
  Nanos spin = kSpin;      // the engine thread's: kSpinRealtime under a real-time policy
  std::vector<std::pair<std::uint32_t, LinkModelParams>> pending;
  std::atomic<bool> has_pending{false};
  // Flow declarations and gate changes, in call order; callers wait until applied.
  struct GateOp {
    std::uint32_t link = 0;
    bool declare = false;               // set_flows (else set_gate)
    std::unique_ptr<FlowGates> flows;   // declare: the new gates (null: gating ends)
    int flow = 0;                       // set_gate
    bool open = false;
  };
  std::vector<GateOp> pending_gates;
  std::vector<std::vector<int>> declared;  // per link: the flow ids of the latest set_flows
  std::uint64_t gate_ops_requested = 0, gate_ops_applied = 0;
  std::condition_variable_any gate_ops_cv;
  std::atomic<bool> thread_alive{false};
  std::vector<LinkModelCounters> published;
  std::vector<std::vector<FlowCounters>> published_flows;
  EngineStats published_stats;
  EngineStats stats;

  Impl(const netlink::Netns& router, EngineConfig c) : cfg(std::move(c)), heap(cfg.links.size()) {
    const std::size_t n = cfg.ports.size();
    link_of.assign(n * n, kNoLink);
    std::size_t capacity = 0;
    for (std::size_t i = 0; i < cfg.links.size(); ++i) {
      const auto& l = cfg.links[i];
      if (l.src >= n || l.dst >= n) throw std::invalid_argument("engine link outside the ports");
      link_of[l.src * n + l.dst] = static_cast<std::uint32_t>(i);
      heap.set(static_cast<std::uint32_t>(i), kNever);
      const auto cap = link_capacity(l.params);
      capacity += cap;
      models.push_back(std::make_unique<LinkModel>(l.params, cap, cfg.seed * 1'000'003 + i));
    }
    // One pool for all links: in practice far fewer slots are used than the sum allows,
    // and unused slots cost address space only.
    const auto t0 = std::chrono::steady_clock::now();
    // Twice the starting capacities leaves room for links changed to a larger rate x delay.
    pool_slots = std::min<std::size_t>(std::max<std::size_t>(2 * capacity, 1u << 18), 4u << 20);
    // Super-frame slots (64 KiB of address space each): a quarter as many, at most 64 Ki.
    pool = std::make_unique<Pools>(pool_slots, cfg.ring.small.frame_size,
                                   std::min<std::size_t>(pool_slots / 4, 1u << 16), cfg.ring.big.frame_size);
    const auto t1 = std::chrono::steady_clock::now();
    open_sockets(router);
    const auto t2 = std::chrono::steady_clock::now();
    spdlog::debug("engine: {} link models, pool of {} slots in {:.1f} ms, {} packet sockets in {:.1f} ms", models.size(),
                  pool_slots,
                  std::chrono::duration<double, std::milli>(t1 - t0).count(), sockets.size(),
                  std::chrono::duration<double, std::milli>(t2 - t1).count());
    published.resize(cfg.links.size());
    published_flows.resize(cfg.links.size());
    gates.resize(cfg.links.size());
    declared.resize(cfg.links.size());
    wake_fd.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake_fd) throw std::runtime_error(fmt::format("eventfd: {}", std::strerror(errno)));
  }

  // Each ring setup waits for an RCU grace period in the kernel; opening the sockets in
  // parallel lets those waits overlap (one lab-wide wait instead of two per DC).
  void open_sockets(const netlink::Netns& router) {
    const std::size_t n = cfg.ports.size();
    sockets.resize(n);
    big_sockets.resize(n);
    last_tx_big.assign(n, 0);
    small_max = ring_max_frame(cfg.ring.small);
    const std::uint32_t big_max = ring_max_frame(cfg.ring.big);
    if (big_max <= small_max) throw std::invalid_argument("ring geometry: big slots must be larger than small ones");
    std::vector<std::exception_ptr> errors(2 * n);
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < 2 * n; ++i)
      threads.emplace_back([&, i] {
        try {
          const std::size_t port = i % n;
          if (i < n)
            sockets[port] = std::make_unique<PacketSocket>(router, cfg.ports[port].ifname, cfg.ring.small, 0, small_max);
          else
            big_sockets[port] =
                std::make_unique<PacketSocket>(router, cfg.ports[port].ifname, cfg.ring.big, small_max + 1, big_max);
        } catch (...) {
          errors[i] = std::current_exception();
        }
      });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }

  std::uint32_t link_id(std::size_t src, std::size_t dst) const {
    const std::size_t n = cfg.ports.size();
    if (src >= n || dst >= n || link_of[src * n + dst] == kNoLink)
      throw std::invalid_argument(fmt::format("no engine link {}->{}", src, dst));
    return link_of[src * n + dst];
  }

  // The caller (holding `lock`) queued a gate op: has the engine thread apply it, and (with
  // `wait`) waits until it has; applies it here where the thread is not running.
  void submit_gate_op(std::unique_lock<PiMutex>& lock, bool wait = true) {
    const std::uint64_t ticket = ++gate_ops_requested;
    has_pending.store(true, std::memory_order_release);
    if (!running) {
      lock.unlock();
      apply_pending(mono_now());
      return;
    }
    wake();
    if (!wait) return;
    while (gate_ops_applied < ticket) {
      if (gate_ops_cv.wait_for(lock, std::chrono::milliseconds(100)) == std::cv_status::timeout && !thread_alive)
        throw std::runtime_error("the userspace engine is not running");
    }
  }

  void wake() const {
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd.get(), &one, sizeof one);
  }

  void free_lost(LinkModel& m) {
    for (auto s : m.lost()) pool->release(s);
    m.lost().clear();
  }

  // A swarm lab's port: the frame's source (an address of the port's DC) at its source
  // hardware address (EnginePort::learn_hosts).
  void learn_host(std::size_t port, const std::uint8_t* f) {
    const std::uint32_t src_ip = static_cast<std::uint32_t>(f[26]) << 24 | static_cast<std::uint32_t>(f[27]) << 16 |
                                 static_cast<std::uint32_t>(f[28]) << 8 | f[29];
    auto& p = cfg.ports[port];
    if ((src_ip & 0xffff0000u) != cfg.lan_prefix || ((src_ip >> 10) & 0x3f) != port) return;
    if (std::memcmp(f + 6, p.router_mac.data(), 6) == 0) return;
    const std::size_t host = src_ip & kHostMask;
    if (p.hosts.size() <= host) p.hosts.resize(kHostMask + 1);
    Mac mac;
    std::memcpy(mac.data(), f + 6, 6);
    if (p.hosts[host] != mac) p.hosts[host] = mac;
  }

  void on_frame(std::size_t port, const VnetHdr& vnet, const std::uint8_t* f, std::uint32_t len, Nanos arrival) {
    stats.rx_frames++;
    if (len == 0) {
      stats.truncated++;
      return;
    }
    // IPv4 toward another DC's LAN; everything else (ARP, the router's own addresses) is
    // the kernel's business.
    if (len < 34 || f[12] != 0x08 || f[13] != 0x00 || (f[14] >> 4) != 4) {
      stats.not_for_wan++;
      return;
    }
    if (cfg.ports[port].learn_hosts) learn_host(port, f);
    const std::uint32_t dst_ip = static_cast<std::uint32_t>(f[30]) << 24 | static_cast<std::uint32_t>(f[31]) << 16 |
                                 static_cast<std::uint32_t>(f[32]) << 8 | f[33];
    const std::size_t n = cfg.ports.size();
    const std::size_t dst = (dst_ip >> 10) & 0x3f;
    if ((dst_ip & 0xffff0000u) != cfg.lan_prefix || dst >= n || dst == port) {
      stats.not_for_wan++;
      return;
    }
    const auto& hosts = cfg.ports[dst].hosts;
    if (!hosts.empty()) {
      const std::size_t host = dst_ip & kHostMask;
      if (host >= hosts.size() || !hosts[host]) {
        stats.not_for_wan++;
        return;
      }
    }
    const std::uint32_t id = link_of[port * n + dst];
    if (id == kNoLink) {
      stats.unroutable++;
      return;
    }
    const GsoInfo info = gso_info(vnet, f, len);
    const std::uint32_t per = chunk_segments(info, models[id]->params());
    if (info.segments > 1) stats.gso_frames++;
    if (per >= info.segments) {
      auto slot = pool->alloc(len);
      if (!slot) return pool_exhausted(id, info.wire_bytes, info.segments);
      std::memcpy(pool->frame(*slot), f, len);
      *pool->vnet(*slot) = vnet;
      pool->vnet(*slot)->flags &= kVnetNeedsCsum;  // (receive-only flags, e.g. DATA_VALID, do not go back)
      pool->meta(*slot) = {len, info.wire_bytes, info.segments};
      enter(id, *slot, arrival);
      return;
    }
    stats.gso_split++;
    std::uint32_t cur = 0;
    split(
        vnet, f, len, info, per,
        [&](std::uint32_t clen, std::uint32_t count) -> std::uint8_t* {
          auto slot = pool->alloc(clen);
          if (!slot) {
            pool_exhausted(id, clen + (count - 1) * info.header, count);
            return nullptr;
          }
          cur = *slot;
          return pool->frame(cur);
        },
        [&](std::uint32_t clen, std::uint32_t count, const VnetHdr& v) {
          *pool->vnet(cur) = v;
          pool->meta(cur) = {clen, clen + (count - 1) * info.header, count};
          enter(id, cur, arrival);
        });
  }

  // Segments per unit the link's model gets from a super-frame: single packets on a lossy
  // link, else chunks of at most kMaxBurstNs on its serializer; and never more than a
  // quarter of its queue limit, which a whole unit must fit.
  static std::uint32_t chunk_segments(const GsoInfo& info, const LinkModelParams& p) {
    if (!info.splittable) return info.segments;
    std::uint32_t per = p.loss.lossless() ? segments_per_chunk(info, p.rate.bps) : 1;
    const std::uint64_t quarter = p.queue.unit == QueueLimit::Unit::packets
                                      ? p.queue.value / 4
                                      : p.queue.value / (4ull * (info.header + info.segment));
    return static_cast<std::uint32_t>(std::clamp<std::uint64_t>(quarter, 1, per));
  }

  void pool_exhausted(std::uint32_t id, std::uint32_t wire, std::uint32_t segments) {
    stats.pool_exhausted++;
    auto& c = models[id]->counters();
    c.packets_in += segments;
    c.bytes_in += wire;
    c.dropped_queue += segments;
  }

  // A frame in `slot` enters link `id`: through its flow's gate, if the link has gated
  // flows, then into the model.
  void enter(std::uint32_t id, std::uint32_t slot, Nanos arrival) {
    auto& m = *models[id];
    const SlotMeta meta = pool->meta(slot);
    FlowGates* g = gates[id].get();
    if (g) {  // the link has gated flows
      const int flow = g->classify_frame(pool->frame(slot), meta.len);
      std::uint32_t dropped = 0;
      if (flow != FlowClassifier::kNone) {
        switch (g->admit(flow, slot, meta.wire, dropped)) {
          case FlowGates::Verdict::pass:
            g->entered(flow, meta.wire, arrival);
            break;
          case FlowGates::Verdict::held:
            return;
          case FlowGates::Verdict::held_dropping_oldest:
            stats.gate_dropped++;
            pool->release(dropped);
            return;
        }
      }
    }
    m.advance(arrival);
    free_lost(m);
    if (g && g->draining()) feed(*g, m, arrival);  // held packets first
    if (m.arrive(slot, meta.wire, arrival, meta.segments) == LinkModel::Verdict::dropped_queue) pool->release(slot);
    heap.set(id, m.next_event());
  }

  // Open gates hand their held packets to the link's queue as far as it has room (the
  // model's own drop-tail test, which would refuse them).
  void feed(FlowGates& g, LinkModel& m, Nanos now) {
    g.feed([&](std::uint32_t slot, std::uint32_t bytes) {
      const auto& c = m.counters();
      const auto& q = m.params().queue;
      const std::uint32_t segments = pool->meta(slot).segments;
      const bool full = q.unit == QueueLimit::Unit::packets ? c.queued_packets + segments > q.value
                                                            : c.queued_bytes + bytes > q.value;
      if (full || c.queued_packets + c.in_flight_packets + 1 > m.capacity()) return false;
      if (m.arrive(slot, bytes, now, segments) == LinkModel::Verdict::dropped_queue) pool->release(slot);  // (not reached)
      return true;
    }, now);
  }

  // TCP or UDP payload bytes of an IPv4 frame (0 for anything else): what applications
  // sent, so runs can check the bytes their scenario implies against the data plane.
  static std::uint32_t l4_payload(const std::uint8_t* f, std::uint32_t len) {
    if (len < 34) return 0;
    const std::uint8_t* ip = f + 14;
    const std::uint32_t ihl = static_cast<std::uint32_t>(ip[0] & 0x0f) * 4;
    const std::uint32_t total = static_cast<std::uint32_t>(ip[2]) << 8 | ip[3];
    if (total > len - 14 || ihl < 20 || total < ihl) return 0;
    if (ip[9] == 17) return total >= ihl + 8 ? total - ihl - 8 : 0;
    if (ip[9] != 6 || total < ihl + 20 || 14 + ihl + 13 > len) return 0;
    const std::uint32_t doff = static_cast<std::uint32_t>(ip[ihl + 12] >> 4) * 4;
    return total >= ihl + doff ? total - ihl - doff : 0;
  }

  void transmit(std::size_t dst, std::uint32_t slot) {
    std::uint8_t* f = pool->frame(slot);
    const std::uint32_t len = pool->meta(slot).len;
    const auto& port = cfg.ports[dst];
    if (port.hosts.empty()) {
      std::memcpy(f, port.gateway_mac.data(), 6);
    } else {  // on_frame let only frames toward a known host in
      const std::uint32_t host = static_cast<std::uint32_t>(f[32] & 0x03) << 8 | f[33];
      std::memcpy(f, port.hosts[host]->data(), 6);
    }
    std::memcpy(f + 6, port.router_mac.data(), 6);
    // Forward as a router does: one hop less to live.
    std::uint8_t* ip = f + 14;
    const std::size_t ihl = static_cast<std::size_t>(ip[0] & 0x0f) * 4;
    if (ip[8] <= 1 || ihl < 20 || 14 + ihl > len) {
      stats.ttl_expired++;
    } else {
      ip[8]--;
      set_ip_checksum(ip, ihl);
      // Frames of a port leave in the order released: switching between its two sockets
      // hands the other one's queued frames to the kernel first.
      const std::uint8_t big = len > small_max;
      if (big != last_tx_big[dst]) {
        (big ? *sockets[dst] : *big_sockets[dst]).flush();
        last_tx_big[dst] = big;
      }
      auto& sock = big ? *big_sockets[dst] : *sockets[dst];
      if (sock.send(reinterpret_cast<const std::uint8_t*>(pool->vnet(slot)), len + sizeof(VnetHdr)))
        stats.forwarded++;
      else
        stats.tx_ring_full++;
    }
    pool->release(slot);
  }

  void apply_pending(Nanos now) {
    std::vector<std::pair<std::uint32_t, LinkModelParams>> todo;
    std::vector<GateOp> gate_ops;
    std::uint64_t gate_tickets = 0;
    {
      std::lock_guard lock(mutex);
      todo.swap(pending);
      gate_ops.swap(pending_gates);
      gate_tickets = gate_ops_requested;
      has_pending = false;
    }
    for (auto& [id, p] : todo) {
      auto& m = *models[id];
      m.reserve(link_capacity(p));  // a larger rate x delay needs room for more packets
      m.set_params(p, now);
      free_lost(m);
      heap.set(id, m.next_event());
    }
    if (gate_ops.empty()) return;
    for (auto& op : gate_ops) apply_gate_op(op, now);
    publish();
    {
      std::lock_guard lock(mutex);
      gate_ops_applied = gate_tickets;
    }
    gate_ops_cv.notify_all();
  }

  void apply_gate_op(GateOp& op, Nanos now) {
    auto& m = *models[op.link];
    m.advance(now);
    free_lost(m);
    auto& g = gates[op.link];
    if (op.declare) {
      // Packets held for flows no longer declared enter the link at once, where its queue
      // limit applies.
      auto enter_model = [&](std::uint32_t slot, std::uint32_t bytes) {
        if (m.arrive(slot, bytes, now, pool->meta(slot).segments) == LinkModel::Verdict::dropped_queue)
          pool->release(slot);
      };
      if (g && op.flows) op.flows->adopt(*g, enter_model);
      else if (g) g->release_all(enter_model);
      std::swap(g, op.flows);  // the old gates, now empty, go with the op
      grow_pool();
    } else if (g) {
      const int i = g->index_of(op.flow);
      if (i != FlowClassifier::kNone) g->set_open(i, op.open, now);
      if (g->draining()) feed(*g, m, now);
    }
    heap.set(op.link, m.next_event());
  }

  // Room in the pool for every packet the gates may hold, on top of the links' share.
  void grow_pool() {
    std::size_t hold = 0;
    for (const auto& g : gates)
      if (g) hold += g->hold_capacity();
    if (pool_slots + hold <= pool->size()) return;
    try {
      pool->grow(pool_slots + hold);
      spdlog::debug("engine: pool grown to {} slots for {} held packets at most", pool->size(), hold);
    } catch (const std::exception& e) {
      spdlog::warn("engine: held packets share the pool with the links: {}", e.what());
    }
  }

  void publish() {
    std::lock_guard lock(mutex);
    for (std::size_t i = 0; i < models.size(); ++i) published[i] = models[i]->counters();
    stats.gated_flows = stats.open_gates = stats.held_packets = 0;
    for (std::size_t i = 0; i < gates.size(); ++i) {
      if (!gates[i]) {
        published_flows[i].clear();
        continue;
      }
      gates[i]->counters(published_flows[i]);
      stats.gated_flows += gates[i]->size();
      stats.open_gates += gates[i]->open_gates();
      stats.held_packets += gates[i]->held_packets();
    }
    stats.tx_ring_full = 0;
    for (const auto& s : sockets) stats.tx_ring_full += s->tx_ring_full();
    for (const auto& s : big_sockets) stats.tx_ring_full += s->tx_ring_full();
    stats.rx_ring_dropped = 0;
    for (const auto& s : sockets) stats.rx_ring_dropped += s->rx_ring_dropped();
    stats.rx_big_ring_dropped = 0;
    for (const auto& s : big_sockets) stats.rx_big_ring_dropped += s->rx_ring_dropped();
    timespec cpu{};
    if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) == 0)
      stats.cpu_us = static_cast<std::uint64_t>(cpu.tv_sec) * 1'000'000 + static_cast<std::uint64_t>(cpu.tv_nsec) / 1000;
    published_stats = stats;
  }

  void note_release(Nanos late) {
    const auto l = static_cast<std::uint64_t>(std::max<Nanos>(late, 0));
    stats.releases++;
    stats.release_late_ns_total += l;
    stats.release_late_ns_max = std::max(stats.release_late_ns_max, l);
    if (l > 100'000) stats.released_late_over_100us++;
    if (l > 1'000'000) stats.released_late_over_1ms++;
    std::size_t b = 0;
    while (l > kReleaseLateBoundsNs[b]) ++b;  // the last bound holds every value
    stats.release_late_hist[b]++;
  }

  // Drains a port's two sockets (at most kRxBudget frames) in the order the frames
  // arrived. Ring timestamps are CLOCK_REALTIME (`offset` ahead of the monotonic clock).
  std::uint32_t receive(std::size_t p, Nanos now, Nanos offset) {
    PacketSocket& a = *sockets[p];
    PacketSocket& b = *big_sockets[p];
    PacketSocket::Received ra{}, rb{};
    bool ha = a.peek(ra), hb = b.peek(rb);
    std::uint32_t n = 0;
    while (n < kRxBudget && (ha || hb)) {
      const bool use_a = ha && (!hb || ra.time <= rb.time);
      const auto& r = use_a ? ra : rb;
      Nanos arrival = r.time - offset;
      if (arrival > now || arrival < now - 1'000'000'000) arrival = now;  // clock step: trust now
      on_frame(p, *r.vnet, r.frame, r.len, arrival);
      if (use_a) {
        a.pop();
        ha = a.peek(ra);
      } else {
        b.pop();
        hb = b.peek(rb);
      }
      ++n;
    }
    return n;
  }

  void run() {
    ::prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    name_this_thread("wanlab-engine");
    {
      auto r = apply_thread_sched(cfg.sched, engine_sched_fallback());
      for (const auto& w : r.warnings)
        spdlog::warn("userspace engine: {}; on a busy machine it may release packets late and its RX rings may "
                     "overflow (summary.json engine.degraded)",
                     w);
      spdlog::info("userspace engine: scheduling {}", r.applied);
      const int policy = ::sched_getscheduler(0);
      spin = policy == SCHED_FIFO || policy == SCHED_RR || policy == 6 /* SCHED_DEADLINE */ ? kSpinRealtime : kSpin;
      std::lock_guard lock(mutex);
      scheduling = r.as_asked ? r.applied : fmt::format("{} ({} asked)", r.applied, cfg.sched.to_string());
    }
    ThreadLoadMeter load;  // opened on this thread: its schedstat
    const std::size_t nports = sockets.size();
    std::vector<pollfd> fds(2 * nports + 1);
    for (std::size_t i = 0; i < nports; ++i) {
      fds[i] = {sockets[i]->fd(), POLLIN, 0};
      fds[nports + i] = {big_sockets[i]->fd(), POLLIN, 0};
    }
    const std::size_t wake_index = 2 * nports;
    fds[wake_index] = {wake_fd.get(), POLLIN, 0};
    std::vector<std::uint32_t> pending_tx(nports, 0);
    Nanos oldest_pending = kNever;
    auto flush_port = [&](std::size_t p) {
      sockets[p]->flush();
      big_sockets[p]->flush();
      pending_tx[p] = 0;
    };
    auto flush_all = [&] {
      for (std::size_t p = 0; p < nports; ++p)
        if (pending_tx[p]) flush_port(p);
      oldest_pending = kNever;
    };
    Nanos next_publish = 0;

    while (running.load(std::memory_order_relaxed)) {
      Nanos now = mono_now();
      if (has_pending.load(std::memory_order_acquire)) apply_pending(now);

      // Receive. Ring timestamps are CLOCK_REALTIME; arrivals use the monotonic clock.
      const Nanos offset = real_now() - now;
      std::uint32_t received = 0;
      for (std::size_t p = 0; p < nports; ++p) received += receive(p, now, offset);

      // Release what is due.
      now = mono_now();
      while (!heap.empty() && heap.top_key() <= now) {
        const std::uint32_t id = heap.top();
        auto& m = *models[id];
        m.advance(now);
        free_lost(m);
        FlowGates* g = gates[id].get();
        if (g && g->draining()) feed(*g, m, now);  // room the serializer freed
        const std::size_t dst = cfg.links[id].dst;
        for (;;) {
          const Nanos due = m.next_release();
          const auto slot = m.release(now);
          if (!slot) break;
          note_release(now - due);
          const SlotMeta meta = pool->meta(*slot);
          m.counters().payload_bytes_out += l4_payload(pool->frame(*slot), meta.len);
          if (g) {
            const int flow = g->classify_frame(pool->frame(*slot), meta.len);
            if (flow != FlowClassifier::kNone) g->sent(flow, meta.wire, now);
          }
          transmit(dst, *slot);
          if (++pending_tx[dst] >= kFlushFrames) flush_port(dst);
          oldest_pending = std::min(oldest_pending, now);
        }
        heap.set(id, m.next_event());
      }
      if (oldest_pending != kNever && now - oldest_pending >= kFlushAge) flush_all();

      if (now >= next_publish) {
        load.sample(now);
        stats.run_delay_ns = load.run_delay_ns();
        stats.cpu_steal_ns = load.cpu_steal_ns();
        publish();
        next_publish = now + kPublishEvery;
      }
      if (received > 0) continue;  // more may be waiting

      // Sleep until the next release (or a frame, or a wake-up); spin the last stretch.
      const Nanos next = std::min(heap.empty() ? kNever : heap.top_key(), next_publish);
      const Nanos wait = next - mono_now();
      if (wait <= spin) {
        if (oldest_pending != kNever && wait > kFlushAge - (now - oldest_pending)) flush_all();
        continue;
      }
      flush_all();
      stats.wakeups++;
      const Nanos sleep = wait - spin / 2;
      timespec ts{static_cast<time_t>(sleep / 1'000'000'000), static_cast<long>(sleep % 1'000'000'000)};
      const int rc = ::ppoll(fds.data(), fds.size(), &ts, nullptr);
      if (rc > 0 && (fds[wake_index].revents & POLLIN)) {
        std::uint64_t v;
        [[maybe_unused]] auto n = ::read(wake_fd.get(), &v, sizeof v);
      }
    }
    flush_all();
    load.sample(mono_now(), 0);
    stats.run_delay_ns = load.run_delay_ns();
    stats.cpu_steal_ns = load.cpu_steal_ns();
    publish();
  }
};

ThreadSched default_engine_sched() {
  ThreadSched s;
  s.policy = ThreadSched::Policy::fifo;
  s.priority = 50;
  return s;
}

ThreadSched engine_sched_fallback() {
  ThreadSched s;
  s.policy = ThreadSched::Policy::nice;
  s.priority = kEngineNice;
  return s;
}

std::string Engine::scheduling() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->scheduling;
}

Engine::Engine(const netlink::Netns& router, EngineConfig config)
    : impl_(std::make_unique<Impl>(router, std::move(config))) {}

Engine::~Engine() { stop(); }

void Engine::start() {
  if (impl_->running.exchange(true)) return;
  impl_->thread_alive = true;
  impl_->thread = std::thread([this] {
    try {
      impl_->run();
    } catch (const std::exception& e) {
      spdlog::critical("userspace engine stopped: {}", e.what());
    }
    {
      std::lock_guard lock(impl_->mutex);
      impl_->thread_alive = false;
    }
    impl_->gate_ops_cv.notify_all();
  });
}

void Engine::stop() {
  if (!impl_->running.exchange(false)) return;
  impl_->wake();
  impl_->thread.join();
}

void Engine::set_link(std::size_t src, std::size_t dst, const LinkModelParams& params) {
  const std::size_t n = impl_->cfg.ports.size();
  if (src >= n || dst >= n || impl_->link_of[src * n + dst] == kNoLink)
    throw std::invalid_argument(fmt::format("no engine link {}->{}", src, dst));
  {
    std::lock_guard lock(impl_->mutex);
    impl_->pending.emplace_back(impl_->link_of[src * n + dst], params);
    impl_->has_pending.store(true, std::memory_order_release);
  }
  if (impl_->running) {
    impl_->wake();
  } else {
    impl_->apply_pending(mono_now());
    impl_->publish();
  }
}

std::optional<LinkModelCounters> Engine::counters(std::size_t src, std::size_t dst) const {
  const std::size_t n = impl_->cfg.ports.size();
  if (src >= n || dst >= n || impl_->link_of[src * n + dst] == kNoLink) return std::nullopt;
  std::lock_guard lock(impl_->mutex);
  return impl_->published[impl_->link_of[src * n + dst]];
}

void Engine::set_flows(std::size_t src, std::size_t dst, const std::vector<GatedFlow>& flows,
                       std::size_t hold_packets) {
  const std::uint32_t id = impl_->link_id(src, dst);
  // Built here, off the engine thread (it allocates); checks the ids.
  auto gates = flows.empty() ? nullptr
                             : std::make_unique<FlowGates>(flows, std::clamp<std::size_t>(hold_packets, 1, 1u << 20));
  std::unique_lock lock(impl_->mutex);
  impl_->declared[id].clear();
  for (const auto& f : flows) impl_->declared[id].push_back(f.id);
  impl_->pending_gates.push_back({id, true, std::move(gates), 0, false});
  impl_->submit_gate_op(lock);
}

void Engine::set_gate(std::size_t src, std::size_t dst, int flow, bool open) {
  const std::uint32_t id = impl_->link_id(src, dst);
  std::unique_lock lock(impl_->mutex);
  const auto& ids = impl_->declared[id];
  if (std::find(ids.begin(), ids.end(), flow) == ids.end())
    throw std::out_of_range(fmt::format("no gated flow {} on engine link {}->{}", flow, src, dst));
  impl_->pending_gates.push_back({id, false, nullptr, flow, open});
  // Not waited for: a run switches gates at every window boundary, and the engine thread
  // applies queued ops in order within microseconds of the wake-up.
  impl_->submit_gate_op(lock, false);
}

std::vector<FlowCounters> Engine::flow_counters(std::size_t src, std::size_t dst) const {
  const std::uint32_t id = impl_->link_id(src, dst);
  std::lock_guard lock(impl_->mutex);
  return impl_->published_flows[id];
}

EngineStats Engine::stats() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->published_stats;
}

}  // namespace wanlab::shaping
