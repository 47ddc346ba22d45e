#include "wanlab/common/channel_server.hpp"

#include <sys/stat.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>

#include "channel_log.hpp"

namespace wanlab::protocol {
namespace net = boost::asio;
using Local = net::local::stream_protocol;
using Tcp = net::ip::tcp;
using detail::channel_log;

namespace {

// Identifies the socket file this server bound, so that close() does not remove one that a
// newer server has put at the same path since.
struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const FileId&) const = default;
};

std::optional<FileId> file_id(const std::filesystem::path& p) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) return std::nullopt;
  return FileId{st.st_dev, st.st_ino};
}

void clear_stale_socket(net::io_context& ioc, const std::filesystem::path& p) {
  std::error_code ec;
  const auto st = std::filesystem::symlink_status(p, ec);
  if (ec || !std::filesystem::exists(st)) return;
  if (!std::filesystem::is_socket(st))
    throw std::runtime_error(fmt::format("cannot listen on unix:{}: it exists and is not a socket", p.string()));
  Local::socket probe(ioc);
  boost::system::error_code connect_ec;
  probe.connect(Local::endpoint(p.string()), connect_ec);
  if (!connect_ec)
    throw std::runtime_error(fmt::format("cannot listen on unix:{}: another server is listening there", p.string()));
  std::filesystem::remove(p, ec);
}

template <class Acceptor, class Endpoint>
void listen(Acceptor& acceptor, const Endpoint& ep, const std::string& what) {
  boost::system::error_code ec;
  auto check = [&](const char* step) {
    if (ec) throw std::runtime_error(fmt::format("cannot listen on {}: {}: {}", what, step, ec.message()));
  };
  acceptor.open(ep.protocol(), ec);
  check("socket");
  if constexpr (std::is_same_v<Acceptor, Tcp::acceptor>) {
    acceptor.set_option(net::socket_base::reuse_address(true), ec);
    check("setsockopt SO_REUSEADDR");
  }
  if constexpr (std::is_same_v<typename Acceptor::protocol_type, Local>) {
    // The socket file is made 0600 (only its owner, the controller's user, may connect),
    // whatever the umask: Linux gives it the socket's mode at bind.
    if (::fchmod(acceptor.native_handle(), 0600) != 0)
      ec = boost::system::error_code(errno, boost::system::system_category());
    check("fchmod");
  }
  acceptor.bind(ep, ec);
  check("bind");
  acceptor.listen(net::socket_base::max_listen_connections, ec);
  check("listen");
}

std::string tcp_text(const Tcp::endpoint& ep) {
  if (ep.address().is_v6()) return fmt::format("tcp:[{}]:{}", ep.address().to_string(), ep.port());
  return fmt::format("tcp:{}:{}", ep.address().to_string(), ep.port());
}

// Connections waiting for their hello on one listening socket, and the refusals beyond
// the cap not yet logged.
struct PendingCount {
  std::atomic<std::size_t> waiting{0};
  std::atomic<std::uint64_t> refused_unlogged{0};
  std::atomic<std::int64_t> last_log_ns{0};  // steady clock
};

// A connection waiting for its hello. Touched only on the channel's strand (the timer runs
// there too).
struct Pending {
  Pending(const net::any_io_executor& ex, std::shared_ptr<PendingCount> c) : timer(ex), count(std::move(c)) {}
  ~Pending() { decide(); }
  net::steady_timer timer;
  std::shared_ptr<PendingCount> count;
  bool decided = false;  // the hello came, the time ran out, or the connection ended
  // Returns false when already decided.
  bool decide() {
    if (decided) return false;
    decided = true;
    --count->waiting;
    return true;
  }
};

void refuse(Channel& channel, std::string_view code, std::string message, std::string field) {
  channel_log().warn("{}: refused: {}", channel.peer(), message);
  channel.send(error_message({std::string(code), message, std::move(field)}));
  channel.close("refused: " + message);
}

}  // namespace

struct ChannelServer::Impl : std::enable_shared_from_this<ChannelServer::Impl> {
  Impl(net::io_context& io, ChannelServerOptions o, HelloHandler h)
      : ioc(io), options(std::move(o)), on_hello(std::move(h)), unix_acceptor(io), tcp_acceptor(io) {
    options.channel.side = Sender::controller;
    options.channel.max_first_message_bytes = options.max_hello_bytes;
  }

  net::io_context& ioc;
  ChannelServerOptions options;
  HelloHandler on_hello;
  Local::acceptor unix_acceptor;
  Tcp::acceptor tcp_acceptor;
  std::optional<Tcp::endpoint> tcp_bound;
  std::optional<FileId> socket_file;
  std::atomic<std::uint64_t> accepted{0};
  std::shared_ptr<PendingCount> unix_pending = std::make_shared<PendingCount>();
  std::shared_ptr<PendingCount> tcp_pending = std::make_shared<PendingCount>();

  std::mutex mutex;  // channels and closed: hellos arrive on the channels' strands
  std::vector<std::weak_ptr<Channel>> channels;
  bool closed = false;

  template <class Acceptor>
  void accept(Acceptor& acceptor) {
    acceptor.async_accept([self = shared_from_this(), &acceptor](const boost::system::error_code& ec,
                                                                 typename Acceptor::protocol_type::socket socket) {
      if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
      if (ec) {
        // Out of descriptors, say: wait a little rather than spin.
        channel_log().warn("accept failed: {}; retrying in 100 ms", ec.message());
        auto timer = std::make_shared<net::steady_timer>(self->ioc, std::chrono::milliseconds(100));
        timer->async_wait([self, timer, &acceptor](const boost::system::error_code&) {
          if (acceptor.is_open()) self->accept(acceptor);
        });
        return;
      }
      self->admit(std::move(socket));
      self->accept(acceptor);
    });
  }

  // Counts a connection in as waiting for its hello; false (and a warning, at most one a
  // second) when max_pending already wait.
  bool reserve_pending(PendingCount& count, const char* where) {
    if (++count.waiting <= options.max_pending) return true;
    --count.waiting;
    const auto refused = ++count.refused_unlogged;
    const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    auto last = count.last_log_ns.load();
    if (now - last >= std::chrono::nanoseconds(std::chrono::seconds(1)).count() &&
        count.last_log_ns.compare_exchange_strong(last, now)) {
      count.refused_unlogged -= refused;
      channel_log().warn("{}: {} connection{} refused: {} connections are already waiting for their \"hello\" "
                         "(the limit; each waits at most {})",
                         where, refused, refused == 1 ? "" : "s", options.max_pending,
                         describe(options.channel.read_timeout));
    }
    return false;
  }

  template <class Socket>
  void admit(Socket socket) {
    auto& count = std::is_same_v<Socket, Tcp::socket> ? tcp_pending : unix_pending;
    if (!reserve_pending(*count, std::is_same_v<Socket, Tcp::socket> ? "tcp" : "unix")) {
      boost::system::error_code ec;
      socket.close(ec);
      return;
    }
    const auto n = ++accepted;
    std::string peer;
    bool over_tcp = false;
    if constexpr (std::is_same_v<Socket, Tcp::socket>) {
      over_tcp = true;
      boost::system::error_code ec;
      const auto remote = socket.remote_endpoint(ec);
      peer = ec ? fmt::format("tcp #{}", n) : tcp_text(remote);
      socket.set_option(Tcp::no_delay(true), ec);  // small messages; a start must not wait for Nagle
    } else {
      peer = fmt::format("unix:{} #{}", options.unix_path->string(), n);
    }
    auto channel = make_channel(std::move(socket), options.channel, std::move(peer));
    {
      std::lock_guard lock(mutex);
      if (closed) {
        --count->waiting;
        channel->close("server closed");
        return;
      }
      std::erase_if(channels, [](const std::weak_ptr<Channel>& w) { return w.expired(); });
      channels.push_back(channel);
    }
    channel_log().debug("{}: accepted", channel->peer());

    // From here the reservation is the Pending's, released when it is decided.
    auto pending = std::make_shared<Pending>(channel->executor(), count);
    const std::weak_ptr<Channel> weak_channel = channel;
    pending->timer.expires_after(options.channel.read_timeout);
    pending->timer.async_wait(
        [pending, weak_channel, limit = options.channel.read_timeout](const boost::system::error_code& ec) {
          if (ec || !pending->decide()) return;
          if (auto c = weak_channel.lock())
            refuse(*c, code::hello_timeout, fmt::format("no \"hello\" within {}", describe(limit)), "");
        });
    channel->start(
        [weak_self = weak_from_this(), weak_channel, pending, over_tcp](const nlohmann::json& m) {
          auto c = weak_channel.lock();
          if (!c || !pending->decide()) return;
          pending->timer.cancel();
          auto self = weak_self.lock();
          if (!self) return c->close("server closed");
          self->first_message(c, m, over_tcp);
        },
        [pending](const std::string&) {
          pending->decide();
          pending->timer.cancel();
        });
  }

  void first_message(const std::shared_ptr<Channel>& channel, const nlohmann::json& m, bool over_tcp) {
    const auto& type = m["type"].get_ref<const std::string&>();  // validated: present, a string
    if (type != "hello")
      return refuse(*channel, code::expected_hello,
                    fmt::format("the first message must be \"hello\", not \"{}\"", type), "type");
    const auto token = m.find("token");  // validated: a string when present
    if (token == m.end()) {
      if (over_tcp)
        return refuse(*channel, code::unauthorized, "a \"hello\" over TCP must carry the controller's token", "token");
    } else if ((over_tcp || !options.token.empty()) &&
               !tokens_equal(token->get_ref<const std::string&>(), options.token)) {
      return refuse(*channel, code::unauthorized, "wrong token", "token");
    }
    channel->pause();  // until the application takes the channel over
    nlohmann::json hello = m;
    hello.erase("token");
    channel_log().debug("{}: hello from node {}", channel->peer(), hello["node"].get_ref<const std::string&>());
    on_hello(channel, hello);
  }

  void close() {
    boost::system::error_code ec;
    if (unix_acceptor.is_open()) {
      unix_acceptor.close(ec);
      // Only our own file: a newer server may have replaced it at the same path.
      if (socket_file && file_id(*options.unix_path) == socket_file) {
        std::error_code fec;
        std::filesystem::remove(*options.unix_path, fec);
      }
    }
    if (tcp_acceptor.is_open()) tcp_acceptor.close(ec);
    std::vector<std::weak_ptr<Channel>> open;
    {
      std::lock_guard lock(mutex);
      if (closed) return;
      closed = true;
      open.swap(channels);
    }
    for (auto& w : open)
      if (auto c = w.lock()) c->close("server closed");
  }
};

ChannelServer::ChannelServer(net::io_context& ioc, ChannelServerOptions options, HelloHandler on_hello) {
  if (!options.unix_path && !options.tcp)
    throw std::invalid_argument("a channel server needs a Unix socket path or a TCP endpoint to listen on");
  if (options.tcp && options.token.empty())
    throw std::invalid_argument("a channel server listening on TCP needs a token (agents present it in \"hello\")");
  if (!on_hello) throw std::invalid_argument("a channel server needs a hello handler");
  impl_ = std::make_shared<Impl>(ioc, std::move(options), std::move(on_hello));
  auto& impl = *impl_;
  try {
    if (impl.options.unix_path) {
      const auto& p = *impl.options.unix_path;
      const std::string what = "unix:" + p.string();
      if (p.string().size() >= sizeof(sockaddr_un{}.sun_path))
        throw std::runtime_error(fmt::format("cannot listen on {}: the path is longer than {} bytes", what,
                                             sizeof(sockaddr_un{}.sun_path) - 1));
      clear_stale_socket(ioc, p);
      listen(impl.unix_acceptor, Local::endpoint(p.string()), what);
      impl.socket_file = file_id(p);
    }
    if (impl.options.tcp) {
      listen(impl.tcp_acceptor, *impl.options.tcp, tcp_text(*impl.options.tcp));
      impl.tcp_bound = impl.tcp_acceptor.local_endpoint();
    }
  } catch (...) {
    impl.close();
    throw;
  }
  if (impl.unix_acceptor.is_open()) impl.accept(impl.unix_acceptor);
  if (impl.tcp_acceptor.is_open()) impl.accept(impl.tcp_acceptor);
}

ChannelServer::~ChannelServer() {
  if (impl_) impl_->close();
}

void ChannelServer::close() {
  impl_->close();
}

std::optional<Tcp::endpoint> ChannelServer::tcp_endpoint() const {
  return impl_->tcp_bound;
}

const std::optional<std::filesystem::path>& ChannelServer::unix_path() const {
  return impl_->options.unix_path;
}

}  // namespace wanlab::protocol
