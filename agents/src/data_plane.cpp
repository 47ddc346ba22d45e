#include "data_plane.hpp"

#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <deque>

#include <boost/asio/buffer.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "wanlab/common/flows.hpp"

namespace wanlab::agent {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

constexpr std::uint32_t kHelloMagic = 0x574c4831;   // "WLH1"
constexpr std::uint32_t kStripeMagic = 0x574c4431;  // "WLD1"
constexpr std::uint32_t kPostedMagic = 0x574c5031;  // "WLP1": a rendezvous recv is posted
constexpr std::size_t kChunk = 1 << 20;

// Payload bytes are zeros: what matters is that they cross the network.
const std::array<char, kChunk>& zeros() {
  static const std::array<char, kChunk> z{};
  return z;
}

void put32(unsigned char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void put64(unsigned char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
std::uint32_t get32(const unsigned char* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | p[i];
  return v;
}
std::uint64_t get64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

}  // namespace

struct DataPlane::Conn {
  explicit Conn(asio::io_context& io) : socket(io) {}
  tcp::socket socket;
  int src = -1, dst = -1;
  std::string peer;  // for messages
  // Receive side.
  std::array<unsigned char, 32> header{};
  std::uint64_t tag = 0, left = 0, stripe = 0;
  std::vector<char> scratch;
  bool clamped = false;  // its receive window is held to the scenario's (window_clamp_)
  // Send side: stripes waiting, the one being written.
  struct Stripe {
    std::array<unsigned char, 32> header;
    std::uint64_t bytes;
    std::shared_ptr<std::function<void()>> part_done;  // shared by a message's stripes
  };
  std::deque<Stripe> queue;
  bool writing = false;
  bool header_sent = false;
  // Rendezvous notices: written on an incoming connection, read on an outgoing one.
  std::deque<std::array<unsigned char, 32>> notices;
  bool noticing = false;
  std::array<unsigned char, 32> notice_in{};
  std::uint64_t sent = 0;
};

DataPlane::DataPlane() {
  // The io thread outlives every operation: a work guard keeps run() going while idle.
  io_thread_ = std::thread([this] {
    auto guard = asio::make_work_guard(io_);
    try {
      io_.run();
    } catch (const std::exception& e) {
      fail(fmt::format("data plane io thread: {}", e.what()));
    }
  });
}

DataPlane::~DataPlane() {
  abort();
  io_.stop();
  if (io_thread_.joinable()) io_thread_.join();
}

std::uint16_t DataPlane::listen(std::uint16_t port, const std::set<int>& local_workers, int expected_incoming) {
  local_workers_ = local_workers;
  expected_incoming_ = expected_incoming;
  acceptor_ = std::make_unique<tcp::acceptor>(io_);
  tcp::endpoint ep(tcp::v4(), port);
  acceptor_->open(ep.protocol());
  acceptor_->set_option(tcp::acceptor::reuse_address(true));
  acceptor_->bind(ep);
  acceptor_->listen(1024);
  const auto bound = acceptor_->local_endpoint().port();
  asio::post(io_, [this] { accept_next(); });
  return bound;
}

void DataPlane::accept_next() {
  auto c = std::make_shared<Conn>(io_);
  acceptor_->async_accept(c->socket, [this, c](const boost::system::error_code& ec) {
    if (ec) {
      if (ec != asio::error::operation_aborted) fail(fmt::format("accept: {}", ec.message()));
      return;
    }
    c->socket.set_option(tcp::no_delay(true));
    set_congestion(*c);
    boost::system::error_code ignored;
    auto remote = c->socket.remote_endpoint(ignored);
    c->peer = remote.address().to_string();
    {
      std::lock_guard lock(mutex_);
      incoming_.push_back(c);
    }
    read_hello(c);
    accept_next();
  });
}

void DataPlane::read_hello(std::shared_ptr<Conn> c) {
  asio::async_read(c->socket, asio::buffer(c->header.data(), 16),
                   [this, c](const boost::system::error_code& ec, std::size_t) {
                     if (ec) {
                       if (!aborted_) fail(fmt::format("connection from {}: no hello: {}", c->peer, ec.message()));
                       return;
                     }
                     const auto* h = c->header.data();
                     c->src = static_cast<int>(get32(h + 4));
                     c->dst = static_cast<int>(get32(h + 8));
                     if (get32(h) != kHelloMagic || !local_workers_.count(c->dst)) {
                       fail(fmt::format("connection from {}: not a wanlab data connection for a worker here "
                                        "(magic {:#x}, worker {})",
                                        c->peer, get32(h), c->dst));
                       c->socket.close();
                       return;
                     }
                     // The clamp alone does not hold: recent kernels reset it to the
                     // buffer's window (buffer x their payload-to-memory ratio, from ~0.6 for
                     // MTU-sized packets to ~0.95 for 64 KB aggregates) whenever that ratio
                     // estimate changes, and buffer autotuning raises it with the buffer.
                     // So the buffer is fixed (SO_RCVBUF; the kernel doubles the value) to
                     // twice the window, which it covers at any ratio above 0.5, and the clamp
                     // is set again at every read (clamp_window): it holds from then on.
                     c->clamped = window_clamp_ > 0 && clamped_senders_.count(c->src) > 0;
                     const int rcvbuf = window_clamp_;
                     if (c->clamped &&
                         (::setsockopt(c->socket.native_handle(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf) != 0 ||
                          !clamp_window(*c))) {
                       fail(fmt::format("data connection {}->{} from {}: receive window of {} bytes: {}", c->src,
                                        c->dst, c->peer, window_clamp_, std::strerror(errno)));
                       return;
                     }
                     c->scratch.resize(256 * 1024);
                     {
                       std::lock_guard lock(mutex_);
                       ++hellos_;
                     }
                     cv_.notify_all();
                     read_header(c);
                   });
}

void DataPlane::read_header(std::shared_ptr<Conn> c) {
  asio::async_read(c->socket, asio::buffer(c->header), [this, c](const boost::system::error_code& ec, std::size_t) {
    if (ec) {
      // A peer closing after the run is ordinary; during one it is an error.
      if (ec != asio::error::eof && ec != asio::error::operation_aborted && !aborted_)
        fail(fmt::format("data connection {}->{} from {}: {}", c->src, c->dst, c->peer, ec.message()));
      return;
    }
    const auto* h = c->header.data();
    if (get32(h) != kStripeMagic) {
      fail(fmt::format("data connection {}->{} from {}: bad stripe header", c->src, c->dst, c->peer));
      c->socket.close();
      return;
    }
    c->tag = get64(h + 16);
    c->left = c->stripe = get64(h + 24);
    if (c->left == 0) {
      delivered(c->src, c->dst, c->tag, 0);
      read_header(c);
    } else {
      read_payload(c);
    }
  });
}

void DataPlane::read_payload(std::shared_ptr<Conn> c) {
  const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(c->left, c->scratch.size()));
  c->socket.async_read_some(asio::buffer(c->scratch.data(), n), [this, c](const boost::system::error_code& ec,
                                                                           std::size_t got) {
    if (ec) {
      if (!aborted_)
        fail(fmt::format("data connection {}->{} from {}: {} with {} bytes of a stripe left", c->src, c->dst, c->peer,
                         ec.message(), c->left));
      return;
    }
    c->left -= got;
    arriving(c->src, c->dst, c->tag, got);
    if (c->clamped) clamp_window(*c);
    if (c->left > 0) return read_payload(c);
    delivered(c->src, c->dst, c->tag, c->stripe);
    read_header(c);
  });
}

bool DataPlane::clamp_window(Conn& c) {
  return ::setsockopt(c.socket.native_handle(), IPPROTO_TCP, TCP_WINDOW_CLAMP, &window_clamp_, sizeof window_clamp_) ==
         0;
}

void DataPlane::set_congestion(Conn& c) {
  if (congestion_.empty()) return;
  if (::setsockopt(c.socket.native_handle(), IPPROTO_TCP, TCP_CONGESTION, congestion_.data(),
                   static_cast<socklen_t>(congestion_.size())) != 0)
    throw std::runtime_error(fmt::format("TCP congestion control \"{}\": {}", congestion_, std::strerror(errno)));
}

void DataPlane::arriving(int src, int dst, std::uint64_t tag, std::uint64_t bytes) {
  // Under the lock, so that once wait() has ended the watch no call of it is under way.
  std::lock_guard lock(mutex_);
  const auto key = std::make_tuple(src, dst, tag);
  const auto total = arrived_[key] += bytes;
  const auto w = watches_.find(key);
  if (w == watches_.end()) return;
  const auto now = std::chrono::steady_clock::now();
  auto& x = w->second;
  x.received = total;
  if (x.first == std::chrono::steady_clock::time_point{}) {
    x.first = now;
    x.first_bytes = total;
    return;
  }
  const auto dt = now - x.first;
  const auto db = x.received - x.first_bytes;
  if (db == 0 || dt <= std::chrono::steady_clock::duration::zero() || x.received >= x.bytes) return;
  x.eta(now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                  dt * (static_cast<double>(x.bytes - x.received) / static_cast<double>(db))));
}

void DataPlane::watch(int src, int dst, std::uint64_t tag, std::uint64_t bytes, Eta eta) {
  std::lock_guard lock(mutex_);
  const auto key = std::make_tuple(src, dst, tag);
  const auto it = arrived_.find(key);
  watches_[key] = {bytes, it == arrived_.end() ? 0 : it->second, 0, {}, std::move(eta)};
}

void DataPlane::delivered(int src, int dst, std::uint64_t tag, std::uint64_t bytes) {
  std::uint64_t total = 0;
  {
    std::lock_guard lock(mutex_);
    auto& in = inbox_[{src, dst, tag}];
    total = in.bytes += bytes;
    in.last = std::chrono::steady_clock::now();
  }
  cv_.notify_all();
  if (on_delivered_) on_delivered_(src, dst, tag, total);
}

void DataPlane::connect(const std::vector<OutgoingPair>& pairs, const std::map<int, PeerAddress>& peers,
                        std::chrono::steady_clock::time_point deadline) {
  for (const auto& p : pairs) {
    const auto it = peers.find(p.dst);
    if (it == peers.end()) throw std::runtime_error(fmt::format("no address for worker {}", p.dst));
    const tcp::endpoint ep(asio::ip::make_address_v4(it->second.address), it->second.port);
    auto& conns = outgoing_[{p.src, p.dst}];
    for (int i = 0; i < p.stripes; ++i) {
      auto c = std::make_shared<Conn>(io_);
      c->src = p.src;
      c->dst = p.dst;
      c->peer = fmt::format("{}:{}", it->second.address, it->second.port);
      boost::system::error_code ec;
      for (;;) {
        if (aborted_) throw Aborted();
        c->socket = tcp::socket(io_);
        if (p.slot >= 0) {
          // A fixed source port: the flow's identity on the wire. Closing resets the
          // connection (linger 0) so no TIME_WAIT keeps the port from the next run.
          const auto port = flows::source_port(p.slot, (i + p.port_salt) % flows::kFlowPortStride);
          c->socket.open(tcp::v4());
          c->socket.set_option(tcp::socket::reuse_address(true));
          c->socket.set_option(asio::socket_base::linger(true, 0));
          c->socket.bind(tcp::endpoint(tcp::v4(), port), ec);
          if (ec)
            throw std::runtime_error(fmt::format("worker {} -> worker {}: cannot bind source port {}: {}", p.src, p.dst,
                                                 port, ec.message()));
        }
        c->socket.connect(ep, ec);
        if (!ec) break;
        if (std::chrono::steady_clock::now() > deadline)
          throw std::runtime_error(fmt::format("worker {} cannot connect to worker {} at {}: {}", p.src, p.dst,
                                               c->peer, ec.message()));
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      c->socket.set_option(tcp::no_delay(true));
      set_congestion(*c);
      if (p.pacing_bytes_per_s > 0) {
        const std::uint64_t rate = p.pacing_bytes_per_s;
        if (::setsockopt(c->socket.native_handle(), SOL_SOCKET, SO_MAX_PACING_RATE, &rate, sizeof rate) != 0)
          throw std::runtime_error(fmt::format("worker {} -> worker {}: SO_MAX_PACING_RATE {} B/s: {}", p.src, p.dst,
                                               rate, std::strerror(errno)));
      }
      std::array<unsigned char, 16> hello{};
      put32(hello.data(), kHelloMagic);
      put32(hello.data() + 4, static_cast<std::uint32_t>(p.src));
      put32(hello.data() + 8, static_cast<std::uint32_t>(p.dst));
      put32(hello.data() + 12, static_cast<std::uint32_t>(i));
      asio::write(c->socket, asio::buffer(hello), ec);
      if (ec)
        throw std::runtime_error(
            fmt::format("worker {} -> worker {} at {}: hello: {}", p.src, p.dst, c->peer, ec.message()));
      asio::post(io_, [this, c] { read_notice(c); });
      conns.push_back(std::move(c));
    }
  }
}

void DataPlane::read_notice(std::shared_ptr<Conn> c) {
  asio::async_read(c->socket, asio::buffer(c->notice_in), [this, c](const boost::system::error_code& ec, std::size_t) {
    if (ec) return;  // the receiver closing ends the run's connections; a lost notice shows as a stuck send
    const auto* h = c->notice_in.data();
    if (get32(h) != kPostedMagic) {
      fail(fmt::format("data connection {}->{} to {}: bad notice from the receiver", c->src, c->dst, c->peer));
      return;
    }
    posted(static_cast<int>(get32(h + 4)), static_cast<int>(get32(h + 8)), get64(h + 16));
    read_notice(c);
  });
}

void DataPlane::post(int src, int dst, std::uint64_t tag) {
  asio::post(io_, [this, src, dst, tag] {
    std::shared_ptr<Conn> c;
    {
      std::lock_guard lock(mutex_);
      for (const auto& x : incoming_)
        if (x->src == src && x->dst == dst) {
          c = x;
          break;
        }
    }
    if (!c) return posted(src, dst, tag);  // the sender is here (or not connected: it is, by now)
    std::array<unsigned char, 32> n{};
    put32(n.data(), kPostedMagic);
    put32(n.data() + 4, static_cast<std::uint32_t>(src));
    put32(n.data() + 8, static_cast<std::uint32_t>(dst));
    put64(n.data() + 16, tag);
    c->notices.push_back(n);
    if (!c->noticing) write_notice(c);
  });
}

void DataPlane::write_notice(std::shared_ptr<Conn> c) {
  if (c->notices.empty() || aborted_) {
    c->noticing = false;
    return;
  }
  c->noticing = true;
  asio::async_write(c->socket, asio::buffer(c->notices.front()), [this, c](const boost::system::error_code& ec,
                                                                          std::size_t) {
    if (ec) {
      if (!aborted_) fail(fmt::format("data connection {}->{} from {}: notice: {}", c->src, c->dst, c->peer, ec.message()));
      c->noticing = false;
      return;
    }
    c->notices.pop_front();
    write_notice(c);
  });
}

void DataPlane::posted(int src, int dst, std::uint64_t tag) {
  std::function<void()> go;
  {
    std::lock_guard lock(mutex_);
    const auto key = std::make_tuple(src, dst, tag);
    const auto it = unposted_.find(key);
    if (it == unposted_.end()) {
      posted_.insert(key);
      return;
    }
    go = std::move(it->second);
    unposted_.erase(it);
  }
  go();
}

void DataPlane::when_posted(int src, int dst, std::uint64_t tag, std::function<void()> go) {
  {
    std::lock_guard lock(mutex_);
    const auto key = std::make_tuple(src, dst, tag);
    if (posted_.erase(key) == 0) {
      unposted_.emplace(key, std::move(go));
      return;
    }
  }
  go();
}

void DataPlane::wait_incoming(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  if (!cv_.wait_until(lock, deadline, [&] { return hellos_ >= expected_incoming_ || aborted_ || !error_.empty(); }))
    throw std::runtime_error(
        fmt::format("{} of {} expected data connections arrived", hellos_, expected_incoming_));
  if (aborted_) throw Aborted();
  if (!error_.empty()) throw std::runtime_error(error_);
}

void DataPlane::send(int src, int dst, std::uint64_t tag, std::uint64_t bytes, SendDone done) {
  auto it = outgoing_.find({src, dst});
  if (it == outgoing_.end() || it->second.empty())
    throw std::logic_error(fmt::format("worker {} has no connection to worker {}", src, dst));
  auto& conns = it->second;
  const std::uint64_t k = conns.size();
  // Stripes with bytes; a message of fewer bytes than connections uses fewer stripes, and
  // an empty one still sends one header so the receiver sees it arrive.
  const std::uint64_t used = std::max<std::uint64_t>(1, std::min(k, bytes));
  auto remaining = std::make_shared<std::atomic<std::uint64_t>>(used);
  auto on_part = std::make_shared<std::function<void()>>([remaining, done = std::move(done)] {
    if (remaining->fetch_sub(1) == 1 && done) done();
  });
  for (std::uint64_t i = 0; i < used; ++i) {
    Conn::Stripe s{};
    s.bytes = bytes / used + (i < bytes % used ? 1 : 0);
    put32(s.header.data(), kStripeMagic);
    put32(s.header.data() + 4, static_cast<std::uint32_t>(src));
    put32(s.header.data() + 8, static_cast<std::uint32_t>(dst));
    put64(s.header.data() + 16, tag);
    put64(s.header.data() + 24, s.bytes);
    s.part_done = on_part;
    auto c = conns[i];
    asio::post(io_, [this, c, s = std::move(s)]() mutable {
      c->queue.push_back(std::move(s));
      if (!c->writing) write_next(c);
    });
  }
}

void DataPlane::write_next(std::shared_ptr<Conn> c) {
  if (c->queue.empty() || aborted_) {
    c->writing = false;
    return;
  }
  c->writing = true;
  auto& s = c->queue.front();
  const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(s.bytes - c->sent, kChunk));
  std::array<asio::const_buffer, 2> bufs{asio::buffer(s.header), asio::buffer(zeros().data(), n)};
  auto on_written = [this, c, n](const boost::system::error_code& ec, std::size_t) {
    if (ec) {
      if (!aborted_) fail(fmt::format("sending {}->{} to {}: {}", c->src, c->dst, c->peer, ec.message()));
      c->writing = false;
      return;
    }
    c->header_sent = true;
    c->sent += n;
    auto& front = c->queue.front();
    if (c->sent >= front.bytes) {
      auto done = front.part_done;
      c->queue.pop_front();
      c->sent = 0;
      c->header_sent = false;
      (*done)();
    }
    write_next(c);
  };
  if (!c->header_sent)
    asio::async_write(c->socket, bufs, on_written);
  else
    asio::async_write(c->socket, asio::buffer(zeros().data(), n), on_written);
}

std::chrono::steady_clock::time_point DataPlane::wait(int src, int dst, std::uint64_t tag, std::uint64_t bytes) {
  std::unique_lock lock(mutex_);
  const auto key = std::make_tuple(src, dst, tag);
  cv_.wait(lock, [&] {
    if (aborted_ || !error_.empty()) return true;
    auto it = inbox_.find(key);
    return it != inbox_.end() && it->second.bytes >= bytes;
  });
  watches_.erase(key);
  if (aborted_) throw Aborted();
  auto it = inbox_.find(key);
  if (it == inbox_.end() || it->second.bytes < bytes) throw std::runtime_error(error_);
  const auto in = it->second.last;
  inbox_.erase(it);
  arrived_.erase(key);
  return in;
}

bool DataPlane::has(int src, int dst, std::uint64_t tag, std::uint64_t bytes) const {
  std::lock_guard lock(mutex_);
  const auto it = inbox_.find(std::make_tuple(src, dst, tag));
  return it != inbox_.end() && it->second.bytes >= bytes;
}

void DataPlane::fail(const std::string& what) {
  {
    std::lock_guard lock(mutex_);
    if (error_.empty()) error_ = what;
  }
  spdlog::error("{}", what);
  cv_.notify_all();
}

std::vector<TcpState> DataPlane::tcp_states(int src) const {
  std::vector<TcpState> out;
  for (const auto& [pair, conns] : outgoing_) {
    if (pair.first != src) continue;
    for (const auto& c : conns) {
      ::tcp_info info{};
      socklen_t len = sizeof info;
      if (::getsockopt(c->socket.native_handle(), IPPROTO_TCP, TCP_INFO, &info, &len) != 0) continue;
      // (glibc's tcp_info stops before the pacing fields: the socket option itself.)
      std::uint64_t max_pacing = ~std::uint64_t{0};
      socklen_t plen = sizeof max_pacing;
      if (::getsockopt(c->socket.native_handle(), SOL_SOCKET, SO_MAX_PACING_RATE, &max_pacing, &plen) != 0 ||
          plen != sizeof max_pacing)
        max_pacing = ~std::uint64_t{0};
      out.push_back({pair.second, info.tcpi_snd_cwnd, info.tcpi_snd_ssthresh, info.tcpi_rtt, info.tcpi_snd_mss,
                     info.tcpi_total_retrans, max_pacing});
    }
  }
  return out;
}

void DataPlane::abort() {
  if (aborted_.exchange(true)) return;
  cv_.notify_all();
  asio::post(io_, [this] {
    boost::system::error_code ignored;
    if (acceptor_) acceptor_->close(ignored);
    for (auto& [k, conns] : outgoing_)
      for (auto& c : conns) c->socket.close(ignored);
    for (auto& c : incoming_) c->socket.close(ignored);
  });
}

}  // namespace wanlab::agent
