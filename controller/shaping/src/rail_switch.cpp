// The lab's rail switch (rail_switch.hpp says what it models).
#include "wanlab/shaping/rail_switch.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fmt/format.h>
#include <functional>
#include <optional>
#include <spdlog/spdlog.h>
#include <stdexcept>
#include <thread>

#include "packet_pool.hpp"
#include "wanlab/common/indexed_heap.hpp"
#include "wanlab/common/unique_fd.hpp"
#include "wanlab/core/address_plan.hpp"
#include "wanlab/lab/naming.hpp"
#include "wanlab/shaping/link_model.hpp"
#include "wanlab/shaping/packet_socket.hpp"

namespace wanlab::shaping {
namespace {

using engine_detail::mono_now;
using engine_detail::PiMutex;
using engine_detail::Pools;

constexpr std::uint32_t kRxBudget = 128;   // frames per port per loop turn
constexpr Nanos kSpin = 20'000;            // spin, rather than sleep, this close to a deadline
constexpr Nanos kPublishEvery = 10'000'000;
constexpr std::size_t kPortQueue = 1000;   // frames each port's models queue (drop-tail beyond)
const Ring kPortRing{2048, 1024, 256};     // MTU-sized frames only: the nodes segment (plan_rails)


std::uint32_t be32(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) << 24 | static_cast<std::uint32_t>(p[1]) << 16 |
         static_cast<std::uint32_t>(p[2]) << 8 | p[3];
}
std::uint16_t be16(const std::uint8_t* p) { return static_cast<std::uint16_t>(p[0] << 8 | p[1]); }

// An IPv4 frame's addresses, its TCP ports and sequence space, and its L4 payload.
RailFrameInfo parse(const std::uint8_t* f, std::uint32_t len) {
  RailFrameInfo r;
  const std::uint8_t* ip = f + 14;
  const std::uint32_t ihl = static_cast<std::uint32_t>(ip[0] & 0x0f) * 4;
  const std::uint32_t total = be16(ip + 2);
  r.src_ip = be32(ip + 12);
  r.dst_ip = be32(ip + 16);
  if (ihl < 20 || total < ihl || 14 + total > len) return r;
  if (ip[9] == 6 && total >= ihl + 20) {
    const std::uint8_t* t = ip + ihl;
    const std::uint32_t doff = static_cast<std::uint32_t>(t[12] >> 4) * 4;
    r.tcp = true;
    r.sport = be16(t);
    r.dport = be16(t + 2);
    r.seq = be32(t + 4);
    r.ack = be32(t + 8);
    r.has_ack = (t[13] & 0x10) != 0;
    r.payload = total >= ihl + doff ? total - ihl - doff : 0;
  } else {
    r.payload = total - ihl;
  }
  return r;
}

LinkModelParams port_params(const RailFabricConfig& c, double scale, bool down) {
  LinkModelParams p;
  p.rate = Rate{static_cast<std::uint64_t>(static_cast<double>(c.port_rate.bps) * scale)};
  p.delay = down ? c.delay : Duration{};
  p.queue = QueueLimit{QueueLimit::Unit::packets, kPortQueue};
  return p;
}

}  // namespace

struct RailSwitch::Impl {
  struct Fabric {
    RailFabricConfig cfg;
    std::vector<std::unique_ptr<PacketSocket>> sockets;  // per port: node * rails + rail
    std::vector<std::uint32_t> pending_tx;
    // Per port: frames that may cross but wait for room in the port's queue (what waited for
    // its circuit, released at once, and what came behind it), fed in order as it drains.
    std::vector<std::deque<std::uint32_t>> backlog;
    std::unique_ptr<RailCircuits> circuits;
    std::size_t first_model = 0;  // models [first, first + 2 ports): up, down per port
    RailSwitchStats stats;
  };
  std::vector<Fabric> fabrics;
  std::vector<std::unique_ptr<LinkModel>> models;  // per port: up (2i), down (2i + 1)
  std::vector<std::uint32_t> model_fabric, model_port;
  std::unique_ptr<Pools> pool;
  std::vector<std::uint32_t> slot_src, slot_dst;  // per small slot: the ports
  std::vector<std::uint8_t> slot_data;            // counts as data inside the switch
  IndexedMinHeap<Nanos> heap;                     // models, then one per fabric (its circuits)
  double scale = 1.0;
  ThreadSched sched;
  UniqueFd wake_fd;
  std::thread thread;
  std::atomic<bool> running{false};
  mutable PiMutex mutex;
  std::vector<std::function<void(Nanos)>> pending;
  std::uint64_t requested = 0, applied = 0;
  std::condition_variable_any applied_cv;
  std::atomic<bool> has_pending{false};
  std::vector<RailSwitchStats> published;
  std::vector<std::uint32_t> released;  // scratch

  Impl(std::vector<RailFabricConfig> configs, const ThreadSched& s, std::uint64_t seed) : heap(0), sched(s) {
    std::size_t ports = 0;
    for (auto& c : configs) {
      Fabric f;
      f.cfg = std::move(c);
      f.first_model = models.size();
      const int n = f.cfg.nodes * f.cfg.rails;
      for (int p = 0; p < n; ++p)
        for (int d = 0; d < 2; ++d) {
          model_fabric.push_back(static_cast<std::uint32_t>(fabrics.size()));
          model_port.push_back(static_cast<std::uint32_t>(p));
          models.push_back(std::make_unique<LinkModel>(port_params(f.cfg, 1.0, d == 1), kPortQueue + 4096,
                                                       seed * 1'000'003 + models.size()));
        }
      f.circuits = std::make_unique<RailCircuits>(f.cfg.nodes, f.cfg.reconfiguration.count());
      f.pending_tx.assign(static_cast<std::size_t>(n), 0);
      f.backlog.resize(static_cast<std::size_t>(n));
      f.stats.dc = f.cfg.dc;
      ports += static_cast<std::size_t>(n);
      fabrics.push_back(std::move(f));
    }
    heap = IndexedMinHeap<Nanos>(models.size() + fabrics.size());
    const std::size_t slots = std::max<std::size_t>(ports * (2 * kPortQueue + 512), 1u << 16);
    pool = std::make_unique<Pools>(slots, 2048, 16, 65536);
    slot_src.assign(slots, 0);
    slot_dst.assign(slots, 0);
    slot_data.assign(slots, 0);
    // Sockets opened in parallel (16 at a time): each ring's setup waits for an RCU grace period.
    std::vector<std::thread> threads;
    std::vector<std::exception_ptr> errors(ports);  // sized before any thread writes to it
    std::size_t opened = 0;  // sockets asked for so far: each thread's slot in `errors`
    for (auto& f : fabrics) {
      f.sockets.resize(static_cast<std::size_t>(f.cfg.nodes * f.cfg.rails));
      for (std::size_t p = 0; p < f.sockets.size(); ++p, ++opened) {
        threads.emplace_back([&, slot = opened, p, fp = &f] {
          try {
            const int node = static_cast<int>(p) / fp->cfg.rails, rail = static_cast<int>(p) % fp->cfg.rails;
            fp->sockets[p] = std::make_unique<PacketSocket>(*fp->cfg.ns, lab::if_rail_port(node, rail), kPortRing, 0,
                                                            ring_max_frame(kPortRing));
          } catch (...) {
            errors[slot] = std::current_exception();
          }
        });
        if (threads.size() >= 16) {
          for (auto& t : threads) t.join();
          threads.clear();
        }
      }
    }
    for (auto& t : threads) t.join();
    for (auto& err : errors)
      if (err) std::rethrow_exception(err);
    for (std::size_t i = 0; i < models.size() + fabrics.size(); ++i) heap.set(static_cast<std::uint32_t>(i), kNever);
    published.resize(fabrics.size());
    for (std::size_t i = 0; i < fabrics.size(); ++i) published[i] = fabrics[i].stats;
    wake_fd.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake_fd) throw std::runtime_error(fmt::format("eventfd: {}", std::strerror(errno)));
  }

  std::size_t fabric_index(std::size_t dc) const {
    for (std::size_t i = 0; i < fabrics.size(); ++i)
      if (fabrics[i].cfg.dc == dc) return i;
    throw std::invalid_argument(fmt::format("DC {} has no rails in this lab", dc));
  }

  // Runs `op` on the switch's thread (here, where it does not run) and waits for it.
  void submit(std::function<void(Nanos)> op) {
    std::unique_lock lock(mutex);
    if (!running) {
      lock.unlock();
      op(mono_now());
      publish();
      return;
    }
    pending.push_back(std::move(op));
    const auto ticket = ++requested;
    has_pending.store(true, std::memory_order_release);
    wake();
    while (applied < ticket)
      if (applied_cv.wait_for(lock, std::chrono::milliseconds(100)) == std::cv_status::timeout && !running)
        throw std::runtime_error("the rail switch is not running");
  }

  void apply_pending(Nanos now) {
    std::vector<std::function<void(Nanos)>> ops;
    std::uint64_t tickets = 0;
    {
      std::lock_guard lock(mutex);
      ops.swap(pending);
      tickets = requested;
      has_pending = false;
    }
    for (auto& op : ops) op(now);
    publish();
    {
      std::lock_guard lock(mutex);
      applied = tickets;
    }
    applied_cv.notify_all();
  }

  void wake() const {
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd.get(), &one, sizeof one);
  }

  std::uint32_t circuit_id(std::size_t fi) const { return static_cast<std::uint32_t>(models.size() + fi); }

  void set_plan(std::size_t fi, RailPlan plan, Nanos now) {
    auto& f = fabrics[fi];
    auto back = f.circuits->set_plan(std::move(plan), now);
    for (const auto slot : back) classify(fi, slot, now);
    heap.set(circuit_id(fi), f.circuits->next_event());
  }

  void set_scale(double s, Nanos now) {
    scale = s;
    for (std::size_t id = 0; id < models.size(); ++id) {
      auto& m = *models[id];
      m.set_params(port_params(fabrics[model_fabric[id]].cfg, scale, id % 2 == 1), now);
      free_lost(m);
      heap.set(static_cast<std::uint32_t>(id), m.next_event());
    }
  }

  void free_lost(LinkModel& m) {
    for (auto s : m.lost()) pool->release(s);
    m.lost().clear();
  }

  // The node whose port on `port`'s rail has address `ip`, if one of this fabric's has it.
  static std::optional<int> node_on_rail(const Fabric& f, std::size_t port, std::uint32_t ip) {
    const auto at = core::rail_port_of(core::Ipv4{ip});
    const int rail = static_cast<int>(port) % f.cfg.rails;
    if (!at || (*at)[0] != static_cast<int>(f.cfg.dc) || (*at)[1] != rail || (*at)[2] >= f.cfg.nodes)
      return std::nullopt;
    return (*at)[2];
  }

  // Answers an ARP request for an address of the port's rail with that port's hardware address.
  void arp(Fabric& f, std::size_t port, const std::uint8_t* fr, std::uint32_t len) {
    if (len < 42 || be16(fr + 14) != 1 || be16(fr + 16) != 0x0800 || fr[18] != 6 || fr[19] != 4 || be16(fr + 20) != 1)
      return;
    const auto target = node_on_rail(f, port, be32(fr + 38));
    if (!target) return;
    const auto mac = core::rail_mac(static_cast<int>(f.cfg.dc), static_cast<int>(port) % f.cfg.rails, *target);
    std::array<std::uint8_t, sizeof(VnetHdr) + 42> out{};
    std::uint8_t* r = out.data() + sizeof(VnetHdr);
    std::memcpy(r, fr + 6, 6);                         // to the asker
    std::memcpy(r + 6, mac.data(), 6);
    r[12] = 0x08, r[13] = 0x06;
    r[14] = 0, r[15] = 1, r[16] = 0x08, r[17] = 0, r[18] = 6, r[19] = 4, r[20] = 0, r[21] = 2;
    std::memcpy(r + 22, mac.data(), 6);                // sender: the target's port
    std::memcpy(r + 28, fr + 38, 4);
    std::memcpy(r + 32, fr + 22, 6);                   // target: the asker
    std::memcpy(r + 38, fr + 28, 4);
    auto& sock = *f.sockets[port];
    if (sock.send(out.data(), static_cast<std::uint32_t>(out.size()))) {
      sock.flush();
      f.stats.arp_replies++;
    }
  }

  void on_frame(std::size_t fi, std::size_t port, const VnetHdr& vnet, const std::uint8_t* fr, std::uint32_t len,
                Nanos now) {
    auto& f = fabrics[fi];
    f.stats.rx_frames++;
    if (len >= 14 && fr[12] == 0x08 && fr[13] == 0x06) return arp(f, port, fr, len);
    if (len < 34 || fr[12] != 0x08 || fr[13] != 0x00 || (fr[14] >> 4) != 4) {
      f.stats.not_for_rails++;
      return;
    }
    const auto info = parse(fr, len);
    const auto to = node_on_rail(f, port, info.dst_ip);
    if (!to) {
      f.stats.not_for_rails++;
      return;
    }
    const auto dst = static_cast<std::size_t>(*to * f.cfg.rails) + port % static_cast<std::size_t>(f.cfg.rails);
    if (dst == port) {
      f.stats.not_for_rails++;
      return;
    }
    const auto slot = pool->alloc(len);
    if (!slot || *slot >= slot_src.size()) {
      if (slot) pool->release(*slot);
      f.stats.pool_exhausted++;
      return;
    }
    std::memcpy(pool->frame(*slot), fr, len);
    *pool->vnet(*slot) = vnet;
    pool->vnet(*slot)->flags &= kVnetNeedsCsum;
    pool->meta(*slot) = {len, len, 1};
    slot_src[*slot] = static_cast<std::uint32_t>(port);
    slot_dst[*slot] = static_cast<std::uint32_t>(dst);
    classify(fi, *slot, now, &info);
  }

  void classify(std::size_t fi, std::uint32_t slot, Nanos now, const RailFrameInfo* known = nullptr) {
    auto& f = fabrics[fi];
    const auto info = known ? *known : parse(pool->frame(slot), pool->meta(slot).len);
    const int a = static_cast<int>(slot_src[slot]) / f.cfg.rails;
    const int b = static_cast<int>(slot_dst[slot]) / f.cfg.rails;
    slot_data[slot] = f.circuits->counts(info.payload);
    switch (f.circuits->classify(slot, a, b, info, now)) {
      case RailCircuits::Verdict::pass:
        to_port(fi, slot_src[slot], slot, now);
        break;
      case RailCircuits::Verdict::held:
        break;
      case RailCircuits::Verdict::dropped:
        pool->release(slot);
        break;
    }
    heap.set(circuit_id(fi), f.circuits->next_event());
  }

  // A frame that may cross enters its sender's port, behind what waits there for room.
  void to_port(std::size_t fi, std::uint32_t port, std::uint32_t slot, Nanos now) {
    auto& q = fabrics[fi].backlog[port];
    if (q.empty() && room(fi, port)) return enter(fi, fabrics[fi].first_model + 2 * port, slot, now);
    q.push_back(slot);
    feed(fi, port, now);
  }

  // Whether the port's queue toward the switch takes another frame without a drop.
  bool room(std::size_t fi, std::uint32_t port) const {
    const auto& m = *models[fabrics[fi].first_model + 2 * port];
    return m.counters().queued_packets + 1 < m.params().queue.value;
  }

  void feed(std::size_t fi, std::uint32_t port, Nanos now) {
    auto& q = fabrics[fi].backlog[port];
    while (!q.empty() && room(fi, port)) {
      const auto slot = q.front();
      q.pop_front();
      enter(fi, fabrics[fi].first_model + 2 * port, slot, now);
    }
  }

  void enter(std::size_t fi, std::size_t id, std::uint32_t slot, Nanos now) {
    auto& m = *models[id];
    m.advance(now);
    free_lost(m);
    if (m.arrive(slot, pool->meta(slot).len, now) == LinkModel::Verdict::dropped_queue) {
      fabrics[fi].stats.dropped_queue++;
      if (slot_data[slot]) fabrics[fi].circuits->left();
      pool->release(slot);
    }
    heap.set(static_cast<std::uint32_t>(id), m.next_event());
  }

  void release_model(std::size_t id, Nanos now) {
    auto& m = *models[id];
    const std::size_t fi = model_fabric[id];
    auto& f = fabrics[fi];
    m.advance(now);
    free_lost(m);
    if (id % 2 == 0) feed(fi, model_port[id], now);  // room the serializer freed
    while (const auto slot = m.release(now)) {
      if (id % 2 == 0) {  // up to the switch: on to the receiver's port
        enter(fi, f.first_model + 2 * slot_dst[*slot] + 1, *slot, now);
        continue;
      }
      const std::size_t port = model_port[id];
      auto& sock = *f.sockets[port];
      const auto len = pool->meta(*slot).len;
      if (sock.send(reinterpret_cast<const std::uint8_t*>(pool->vnet(*slot)), len + sizeof(VnetHdr))) {
        f.stats.forwarded++;
        f.stats.bytes += len;
      }
      if (++f.pending_tx[port] >= 64) {
        sock.flush();
        f.pending_tx[port] = 0;
      }
      if (slot_data[*slot]) f.circuits->left();
      pool->release(*slot);
    }
    heap.set(static_cast<std::uint32_t>(id), m.next_event());
    heap.set(circuit_id(fi), f.circuits->next_event());
  }

  void advance_circuits(std::size_t fi, Nanos now) {
    auto& f = fabrics[fi];
    released.clear();
    f.circuits->advance(now, released);
    for (const auto slot : released) to_port(fi, slot_src[slot], slot, now);
    // Due already after advancing: what waits stays (the policy keeps its circuits) until
    // another frame comes.
    const Nanos next = f.circuits->next_event();
    heap.set(circuit_id(fi), next <= now ? kNever : next);
  }

  void flush_all() {
    for (auto& f : fabrics)
      for (std::size_t p = 0; p < f.sockets.size(); ++p)
        if (f.pending_tx[p]) {
          f.sockets[p]->flush();
          f.pending_tx[p] = 0;
        }
  }

  void publish() {
    std::lock_guard lock(mutex);
    for (std::size_t i = 0; i < fabrics.size(); ++i) {
      auto& f = fabrics[i];
      f.stats.rx_ring_dropped = 0;
      for (const auto& s : f.sockets) f.stats.rx_ring_dropped += s->rx_ring_dropped();
      f.stats.circuits = f.circuits->stats();
      published[i] = f.stats;
    }
  }

  std::uint32_t receive(std::size_t fi, std::size_t port, Nanos now) {
    auto& sock = *fabrics[fi].sockets[port];
    PacketSocket::Received r{};
    std::uint32_t n = 0;
    while (n < kRxBudget && sock.peek(r)) {
      if (r.len > 0) on_frame(fi, port, *r.vnet, r.frame, r.len, now);
      sock.pop();
      ++n;
    }
    return n;
  }

  void run() {
    ::prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    name_this_thread("wanlab-rails");
    {
      ThreadSched fallback;
      fallback.policy = ThreadSched::Policy::nice;
      fallback.priority = -20;
      const auto r = apply_thread_sched(sched, fallback);
      for (const auto& w : r.warnings) spdlog::warn("rail switch: {}", w);
      spdlog::info("rail switch: scheduling {}", r.applied);
    }
    std::vector<pollfd> fds;
    std::vector<std::pair<std::size_t, std::size_t>> where;
    for (std::size_t fi = 0; fi < fabrics.size(); ++fi)
      for (std::size_t p = 0; p < fabrics[fi].sockets.size(); ++p) {
        fds.push_back({fabrics[fi].sockets[p]->fd(), POLLIN, 0});
        where.emplace_back(fi, p);
      }
    fds.push_back({wake_fd.get(), POLLIN, 0});
    Nanos next_publish = 0;
    while (running.load(std::memory_order_relaxed)) {
      Nanos now = mono_now();
      if (has_pending.load(std::memory_order_acquire)) apply_pending(now);
      std::uint32_t received = 0;
      for (const auto& [fi, p] : where) received += receive(fi, p, now);
      now = mono_now();
      while (!heap.empty() && heap.top_key() <= now) {
        const std::uint32_t id = heap.top();
        if (id < models.size())
          release_model(id, now);
        else
          advance_circuits(id - models.size(), now);
      }
      if (now >= next_publish) {
        publish();
        next_publish = now + kPublishEvery;
      }
      if (received > 0) continue;
      const Nanos next = std::min(heap.empty() ? kNever : heap.top_key(), next_publish);
      const Nanos wait = next - mono_now();
      if (wait <= kSpin) continue;
      flush_all();
      const Nanos sleep = wait - kSpin / 2;
      timespec ts{static_cast<time_t>(sleep / 1'000'000'000), static_cast<long>(sleep % 1'000'000'000)};
      if (::ppoll(fds.data(), fds.size(), &ts, nullptr) > 0 && (fds.back().revents & POLLIN)) {
        std::uint64_t v;
        [[maybe_unused]] auto n = ::read(wake_fd.get(), &v, sizeof v);
      }
    }
    flush_all();
    publish();
  }
};

RailSwitch::RailSwitch(std::vector<RailFabricConfig> fabrics, const ThreadSched& sched, std::uint64_t seed)
    : impl_(std::make_unique<Impl>(std::move(fabrics), sched, seed)) {}

RailSwitch::~RailSwitch() { stop(); }

void RailSwitch::start() {
  if (impl_->running.exchange(true)) return;
  impl_->thread = std::thread([this] {
    try {
      impl_->run();
    } catch (const std::exception& e) {
      spdlog::critical("rail switch stopped: {}", e.what());
      impl_->running = false;
    }
    impl_->applied_cv.notify_all();
  });
}

void RailSwitch::stop() {
  if (!impl_->thread.joinable()) return;
  impl_->running = false;
  impl_->wake();
  impl_->thread.join();
}

std::vector<std::size_t> RailSwitch::dcs() const {
  std::vector<std::size_t> out;
  for (const auto& f : impl_->fabrics) out.push_back(f.cfg.dc);
  return out;
}

void RailSwitch::set_plan(std::size_t dc, RailPlan plan) {
  const auto fi = impl_->fabric_index(dc);
  // Checked here, off the switch's thread, so a bad plan throws to the caller.
  RailCircuits(impl_->fabrics[fi].cfg.nodes, 0).set_plan(plan, 0);
  impl_->submit([this, fi, plan = std::move(plan)](Nanos now) mutable { impl_->set_plan(fi, std::move(plan), now); });
}

void RailSwitch::set_rate_scale(double scale) {
  impl_->submit([this, scale](Nanos now) { impl_->set_scale(scale, now); });
}

void RailSwitch::set_latency(std::size_t dc, Duration latency) {
  const auto fi = impl_->fabric_index(dc);
  impl_->submit([this, fi, latency](Nanos) {
    impl_->fabrics[fi].cfg.reconfiguration = latency;
    impl_->fabrics[fi].circuits->set_latency(latency.count());
  });
}

std::vector<RailSwitchStats> RailSwitch::stats() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->published;
}

}  // namespace wanlab::shaping
