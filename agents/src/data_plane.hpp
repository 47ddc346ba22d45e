#pragma once
// The agent's data plane: the TCP connections that carry a run's bytes between stage
// workers (activations, activation-gradients, all-reduce chunks) through the emulated
// network.
//
// Connections. For every (sending worker, receiving worker) pair the sender opens
// `stripes` connections: k (the scenario's connections per WAN peer) when the two are in
// different DCs, 1 inside a DC. Each begins with a hello naming the pair and its index.
// A message of B bytes is split over the pair's connections (B/k each, the first ones one
// byte more), each stripe a 32-byte header then its payload. The receiver counts bytes per
// (sender, receiver, tag); a recv completes when all of the message's bytes have arrived,
// whichever connections carried them.
//
// Rendezvous sends (program::Op::rendezvous): a receiver that reaches its recv posts it,
// a 32-byte notice back to the sender over the first connection of the pair; the sender's
// bytes leave once it has read that notice.
//
// Threads: one io thread runs every socket (Asio); workers call send() (non-blocking,
// completion reported through a callback on the io thread) and wait() (blocking).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace wanlab::agent {

struct PeerAddress {
  std::string address;  // IPv4 of the peer's node
  std::uint16_t port = 0;
  std::string dc;
};

/// Pairs of (local sender, remote receiver) to connect, and how many connections each.
struct OutgoingPair {
  int src = 0;
  int dst = 0;
  int stripes = 1;
  /// WAN pairs: the sender's GPU slot on its node; its connections bind the source ports
  /// of common/flows.hpp (stripe i on port slot base + (i + port_salt) % 64), so the data
  /// plane can gate the pair as one flow. -1: an ephemeral port (pairs inside a DC).
  int slot = -1;
  int port_salt = 0;
  /// > 0: each connection is paced to at most this many bytes/s (SO_MAX_PACING_RATE,
  /// TCP's internal pacing), so the pair's connections together leave at the link's rate
  /// instead of bursting whole windows into its queue. kPacingWithoutCap: paced as TCP
  /// paces with the fq qdisc (cwnd / SRTT x 200 % or 120 %), with no cap.
  std::uint64_t pacing_bytes_per_s = 0;
};

/// An SO_MAX_PACING_RATE that turns TCP's internal pacing on (any value but ~0, which
/// means "unlimited" and leaves it off) and never binds.
inline constexpr std::uint64_t kPacingWithoutCap = ~std::uint64_t{0} - 1;

class Aborted : public std::runtime_error {
 public:
  Aborted() : std::runtime_error("run aborted") {}
};

/// One outgoing connection's TCP state (TCP_INFO), as the run's report carries it.
struct TcpState {
  int dst = -1;
  std::uint32_t cwnd = 0;          // segments
  std::uint32_t ssthresh = 0;      // segments; >= kTcpInfiniteSsthresh: never left slow start
  std::uint32_t srtt_us = 0;       // smoothed RTT
  std::uint32_t mss = 0;           // bytes per segment
  std::uint32_t total_retrans = 0; // segments sent again over the connection's life
  /// SO_MAX_PACING_RATE (bytes/s): ~0 leaves TCP unpaced (no fq
  /// here); any other value has TCP pace the connection itself.
  std::uint64_t max_pacing_rate = ~std::uint64_t{0};
  bool paced() const { return max_pacing_rate != ~std::uint64_t{0}; }
};
/// Linux's TCP_INFINITE_SSTHRESH: the ssthresh of a connection still in its first slow start.
inline constexpr std::uint32_t kTcpInfiniteSsthresh = 0x7fffffff;

class DataPlane {
 public:
  using SendDone = std::function<void()>;  // runs on the io thread
  /// Runs on the io thread after each stripe's bytes arrived: the total of (src, dst, tag) so far.
  using OnDelivered = std::function<void(int src, int dst, std::uint64_t tag, std::uint64_t total)>;

  DataPlane();
  ~DataPlane();
  DataPlane(const DataPlane&) = delete;
  DataPlane& operator=(const DataPlane&) = delete;

  /// Binds and listens on 0.0.0.0:`port` (0: any); returns the port. Accepts connections
  /// for `local_workers` only.
  std::uint16_t listen(std::uint16_t port, const std::set<int>& local_workers, int expected_incoming);
  /// Opens every outgoing connection (retrying refused connects until `deadline`); throws
  /// std::runtime_error naming the pair and the peer on failure.
  void connect(const std::vector<OutgoingPair>& pairs, const std::map<int, PeerAddress>& peers,
               std::chrono::steady_clock::time_point deadline);
  /// Set before listen().
  void set_on_delivered(OnDelivered f) { on_delivered_ = std::move(f); }
  /// The TCP congestion control of every data connection (TCP_CONGESTION, e.g. "cubic");
  /// empty: the node's default. Set before listen().
  void set_congestion(std::string name) { congestion_ = std::move(name); }
  /// Clamps the receive window of incoming connections from `senders` to `bytes`
  /// (TCP_WINDOW_CLAMP, set when their hello arrives, before any data, and again at every
  /// read, since the kernel resets it when its buffer accounting changes): each keeps at
  /// most that in flight. 0: the node's buffers decide. Set before listen().
  void set_window_clamp(int bytes, std::set<int> senders) {
    window_clamp_ = bytes;
    clamped_senders_ = std::move(senders);
  }
  /// Blocks until every expected incoming connection has said hello (or the deadline).
  void wait_incoming(std::chrono::steady_clock::time_point deadline);

  /// Starts sending `bytes` from `src` to `dst` under `tag`, striped over the pair's
  /// connections; `done` runs when every stripe has been written to its socket.
  void send(int src, int dst, std::uint64_t tag, std::uint64_t bytes, SendDone done);
  /// Blocks until `bytes` from `src` to local worker `dst` under `tag` have arrived; throws
  /// Aborted when the run is aborted. Returns when the io thread read their last bytes
  /// (the message was in), which is earlier than this thread's wake-up by its scheduling
  /// delay.
  std::chrono::steady_clock::time_point wait(int src, int dst, std::uint64_t tag, std::uint64_t bytes);
  /// While a worker waits for (src, dst, tag) of `bytes`: `eta` runs on the io thread as
  /// those bytes arrive (from the second read of them on), with when the rest should be in
  /// at the rate they are arriving. wait() for the same key ends the watch; `eta` runs
  /// under the data plane's lock, so it must not call back into it.
  using Eta = std::function<void(std::chrono::steady_clock::time_point)>;
  void watch(int src, int dst, std::uint64_t tag, std::uint64_t bytes, Eta eta);
  /// Receiver side: local worker `dst` has posted its recv of `tag` from `src`; tells the
  /// sender (over the pair's first incoming connection; at once when `src` is local).
  void post(int src, int dst, std::uint64_t tag);
  /// Sender side: runs `go` once `dst` has posted its recv of (src, dst, tag): at once on
  /// this thread if it has, else later on the io thread.
  void when_posted(int src, int dst, std::uint64_t tag, std::function<void()> go);
  /// Whether those bytes have all arrived already (wait() would not block).
  bool has(int src, int dst, std::uint64_t tag, std::uint64_t bytes) const;
  /// TCP_INFO of every outgoing connection of local worker `src`, in connection order per
  /// peer (call after connect(); connections that cannot be read are left out).
  std::vector<TcpState> tcp_states(int src) const;
  /// Wakes every waiter with Aborted and closes the sockets.
  void abort();
  bool aborted() const { return aborted_.load(); }

 private:
  struct Conn;
  struct Inbox;
  void accept_next();
  void read_hello(std::shared_ptr<Conn> c);
  void read_header(std::shared_ptr<Conn> c);
  void read_payload(std::shared_ptr<Conn> c);
  void write_next(std::shared_ptr<Conn> c);
  void read_notice(std::shared_ptr<Conn> c);
  void write_notice(std::shared_ptr<Conn> c);
  void posted(int src, int dst, std::uint64_t tag);
  void fail(const std::string& what);
  void delivered(int src, int dst, std::uint64_t tag, std::uint64_t bytes);
  void arriving(int src, int dst, std::uint64_t tag, std::uint64_t bytes);

  boost::asio::io_context io_;
  std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor_;
  std::set<int> local_workers_;
  std::map<std::pair<int, int>, std::vector<std::shared_ptr<Conn>>> outgoing_;  // (src, dst)
  std::vector<std::shared_ptr<Conn>> incoming_;
  int expected_incoming_ = 0;
  std::atomic<bool> aborted_{false};
  OnDelivered on_delivered_;
  std::string congestion_;
  int window_clamp_ = 0;
  std::set<int> clamped_senders_;
  void set_congestion(Conn& c);
  bool clamp_window(Conn& c);

  mutable std::mutex mutex_;  // inbox_, incoming count, error_
  std::condition_variable cv_;
  struct Inboxed {
    std::uint64_t bytes = 0;                    // whole stripes delivered so far
    std::chrono::steady_clock::time_point last{};  // when the last of them was
  };
  std::map<std::tuple<int, int, std::uint64_t>, Inboxed> inbox_;  // (src, dst, tag)
  struct Watch {
    std::uint64_t bytes = 0;     // the message's
    std::uint64_t received = 0;  // so far, stripes not yet whole included
    std::uint64_t first_bytes = 0;
    std::chrono::steady_clock::time_point first{};  // the first read seen while watched
    Eta eta;
  };
  std::map<std::tuple<int, int, std::uint64_t>, Watch> watches_;
  // Payload read of messages not yet taken by wait(), stripes not yet whole included.
  std::map<std::tuple<int, int, std::uint64_t>, std::uint64_t> arrived_;
  // Posted recvs heard of before their send, and sends waiting for their notice.
  std::set<std::tuple<int, int, std::uint64_t>> posted_;
  std::map<std::tuple<int, int, std::uint64_t>, std::function<void()>> unposted_;
  int hellos_ = 0;
  std::string error_;

  std::thread io_thread_;
};

}  // namespace wanlab::agent
