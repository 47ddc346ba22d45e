#pragma once
// The ns-3 side of the reference executor, behind a narrow interface: DCs, directed WAN
// links with drop-tail queues, TCP connections between DCs, and ns-3's clock. Its source
// is compiled as C++17 (ns-3 3.37's headers do not parse as C++20), so this header uses
// the standard library only. Single-threaded; ns-3's simulator is global: one PacketNet at a
// time per process (its destructor resets ns-3).
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace wanlab::ns3ref {

struct NetLink {
  std::size_t src = 0, dst = 0;  // DC indices; every link must have its reverse
  double rate_bps = 0;           // as the lab shapes it (Ethernet frames)
  std::int64_t delay_ns = 0;     // one-way; a link and its reverse must agree
  std::uint64_t queue_packets = 0;  // drop-tail limit; or
  std::uint64_t queue_bytes = 0;    // (when non-zero) in bytes
};

struct NetTcp {
  std::uint32_t snd_buf = 3u << 20;  // bytes: the run's TCP window (unACKed and unsent bytes)
  std::uint32_t rcv_buf = 6u << 20;  // the receiver's, larger: the peer's window never binds
  bool pacing = true;                // TCP's own pacing (Linux with fq, or SO_MAX_PACING_RATE)
};

struct LinkCount {
  std::uint64_t wire_bytes = 0;  // Ethernet frame bytes sent since count_from_now()
  std::uint64_t packets = 0;
  std::uint64_t drops = 0;
  std::uint64_t dropped_bytes = 0;
};

struct ConnEnd {
  double cwnd_bytes = 0;
  double ssthresh_bytes = 0;  // >= 1e9: never set (still in its first slow start)
  double srtt_ns = 0;
  std::uint64_t recoveries = 0;  // fast recoveries entered (SACK / three duplicate ACKs)
  std::uint64_t timeouts = 0;    // retransmission timeouts (the window back to one segment)
  double rto_ns = 0;             // the retransmission timeout at the end
};

class PacketNet {
 public:
  /// Builds the network at ns-3 time 0 (one router and one host per DC). Throws
  /// std::invalid_argument for a link without its reverse or with a different delay.
  PacketNet(std::size_t dcs, const std::vector<NetLink>& links, const NetTcp& tcp, double access_rate_bps,
            std::uint32_t seed);
  ~PacketNet();
  PacketNet(const PacketNet&) = delete;
  PacketNet& operator=(const PacketNet&) = delete;

  /// A TCP connection from DC `src`'s host to DC `dst`'s, opened now; its pacing at most
  /// `max_pacing_bps`. Returns its id (0, 1, ...).
  std::size_t add_connection(std::size_t src, std::size_t dst, double max_pacing_bps);
  bool connected(std::size_t conn) const;
  /// Hands up to `bytes` to the connection's socket; returns how many it took.
  std::uint64_t write(std::size_t conn, std::uint64_t bytes);

  /// Called with a connection's bytes sent so far (its highest sequence), as it grows.
  std::function<void(std::size_t conn, std::uint64_t sent)> on_sent;
  /// Called with a connection's bytes received so far, as they arrive.
  std::function<void(std::size_t conn, std::uint64_t received)> on_received;
  /// Called when a connection's socket has room again.
  std::function<void(std::size_t conn)> on_writable;

  void schedule(std::int64_t delay_ns, std::function<void()> f);
  std::int64_t now_ns() const;
  /// Link byte counts start from now (not the handshakes).
  void count_from_now();
  void run();
  void stop();
  std::uint64_t events() const;
  LinkCount link(std::size_t i) const;
  ConnEnd conn_end(std::size_t conn) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wanlab::ns3ref
