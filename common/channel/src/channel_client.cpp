#include "wanlab/common/channel_client.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <stdexcept>

#include <fmt/format.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "channel_log.hpp"

namespace wanlab::protocol {
namespace net = boost::asio;
using Local = net::local::stream_protocol;
using Tcp = net::ip::tcp;
using detail::channel_log;

namespace {

nlohmann::json checked_hello(nlohmann::json hello) {
  if (auto err = validate(hello, Sender::agent))
    throw std::invalid_argument("channel client hello: " + err->message +
                                (err->field.empty() ? "" : " (field \"" + err->field + "\")"));
  if (hello["type"] != "hello")
    throw std::invalid_argument(fmt::format("channel client hello: a {} message, not a hello", hello["type"].dump()));
  return hello;
}

// Runs an application callback outside any channel's delivery loop, where nothing would
// catch what it throws.
template <class F>
void guarded(const char* what, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    channel_log().error("channel client: the {} handler failed: {}", what, e.what());
  } catch (...) {
    channel_log().error("channel client: the {} handler failed", what);
  }
}

}  // namespace

struct ChannelClient::Impl : std::enable_shared_from_this<ChannelClient::Impl> {
  Impl(net::io_context& ioc, ChannelClientOptions o, ChannelClientHandlers h)
      : strand(net::make_strand(ioc)),
        address(parse_address(o.address)),
        options(std::move(o)),
        handlers(std::move(h)),
        hello(checked_hello(options.hello)),
        backoff(options.initial_backoff),
        down_since(std::chrono::steady_clock::now()),
        retry_timer(strand),
        connect_timer(strand),
        resolver(strand) {
    options.channel.side = Sender::agent;
  }

  net::strand<net::io_context::executor_type> strand;
  const Address address;
  ChannelClientOptions options;
  const ChannelClientHandlers handlers;

  mutable std::mutex mutex;  // hello and current: read and set from any thread
  nlohmann::json hello;
  std::shared_ptr<Channel> current;

  std::atomic<bool> stopped{false};
  std::chrono::milliseconds backoff;
  std::chrono::steady_clock::time_point down_since;  // without a connection since then
  net::steady_timer retry_timer;
  net::steady_timer connect_timer;
  Tcp::resolver resolver;
  std::shared_ptr<Local::socket> unix_attempt;  // the connect in progress, to abort it
  std::shared_ptr<Tcp::socket> tcp_attempt;

  // All below on the strand.

  void attempt() {
    if (stopped) return;
    if (address.kind == Address::Kind::unix_socket) {
      auto socket = unix_attempt = std::make_shared<Local::socket>(strand);
      limit_connect(socket);
      socket->async_connect(Local::endpoint(address.path),
                            [self = shared_from_this(), socket](const boost::system::error_code& ec) {
                              self->connect_done(ec, *socket);
                            });
      return;
    }
    resolver.async_resolve(
        address.host, std::to_string(address.port),
        [self = shared_from_this()](const boost::system::error_code& ec, const Tcp::resolver::results_type& results) {
          if (self->stopped) return;
          if (ec) return self->failed(fmt::format("resolve {}: {}", self->address.host, ec.message()));
          auto socket = self->tcp_attempt = std::make_shared<Tcp::socket>(self->strand);
          self->limit_connect(socket);
          net::async_connect(*socket, results,
                             [self, socket](const boost::system::error_code& cec, const Tcp::endpoint&) {
                               if (!cec) {
                                 boost::system::error_code ignored;
                                 socket->set_option(Tcp::no_delay(true), ignored);
                               }
                               self->connect_done(cec, *socket);
                             });
        });
  }

  template <class Socket>
  void limit_connect(const std::shared_ptr<Socket>& socket) {
    connect_timer.expires_after(options.channel.read_timeout);
    connect_timer.async_wait([weak = std::weak_ptr<Socket>(socket)](const boost::system::error_code& ec) {
      if (ec) return;
      boost::system::error_code ignored;
      if (auto s = weak.lock()) s->close(ignored);  // the connect completes with operation_aborted
    });
  }

  template <class Socket>
  void connect_done(const boost::system::error_code& ec, Socket& socket) {
    const bool timed_out =
        ec == net::error::operation_aborted && connect_timer.expiry() <= std::chrono::steady_clock::now();
    connect_timer.cancel();
    unix_attempt.reset();
    tcp_attempt.reset();
    if (stopped) return;
    if (ec) {
      const std::string why = timed_out ? "timed out after " + describe(options.channel.read_timeout) : ec.message();
      return failed(fmt::format("connect to {}: {}", address.to_string(), why));
    }
    connected(make_channel(std::move(socket), options.channel, address.to_string()));
  }

  void connected(const std::shared_ptr<Channel>& channel) {
    nlohmann::json h;
    {
      std::lock_guard lock(mutex);
      current = channel;
      h = hello;
    }
    down_since = std::chrono::steady_clock::time_point::max();
    if (!options.token.empty()) h["token"] = options.token;
    const std::weak_ptr<Channel> weak_channel = channel;
    channel->start(
        [weak = weak_from_this()](const nlohmann::json& m) {
          auto self = weak.lock();
          if (!self || self->stopped) return;
          if (m["type"] != "error") self->backoff = self->options.initial_backoff;
          if (self->handlers.on_message) self->handlers.on_message(m);
        },
        [weak = weak_from_this(), weak_channel](const std::string& reason) {
          if (auto self = weak.lock()) self->lost(weak_channel, reason);
        });
    channel->send(h);
    channel_log().debug("{}: connected", address.to_string());
    if (handlers.on_connected) guarded("connected", [&] { handlers.on_connected(channel); });
  }

  void lost(const std::weak_ptr<Channel>& channel, const std::string& reason) {
    {
      std::lock_guard lock(mutex);
      if (current == channel.lock()) current.reset();
    }
    if (stopped) return;
    failed(reason);
  }

  void failed(const std::string& reason) {
    const auto now = std::chrono::steady_clock::now();
    if (down_since > now) down_since = now;  // a connection was lost just now
    channel_log().debug("{}: {}; retrying in {}", address.to_string(), reason, describe(backoff));
    if (handlers.on_disconnected) guarded("disconnected", [&] { handlers.on_disconnected(reason); });
    if (stopped) return;  // the handler may have stopped the client
    if (options.give_up_after.count() > 0 && now - down_since >= options.give_up_after) {
      stopped = true;
      const auto why = fmt::format("no connection to {} for {} ({}): giving up", address.to_string(),
                                   describe(std::chrono::duration_cast<std::chrono::milliseconds>(now - down_since)),
                                   reason);
      channel_log().debug("{}", why);
      shut_down();
      if (handlers.on_gave_up) guarded("gave up", [&] { handlers.on_gave_up(why); });
      return;
    }
    retry_timer.expires_after(backoff);
    backoff = std::min(backoff * 2, options.max_backoff);
    retry_timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (!ec) self->attempt();
    });
  }

  void shut_down() {
    retry_timer.cancel();
    connect_timer.cancel();
    resolver.cancel();
    boost::system::error_code ignored;
    if (unix_attempt) unix_attempt->close(ignored);
    if (tcp_attempt) tcp_attempt->close(ignored);
    std::shared_ptr<Channel> channel;
    {
      std::lock_guard lock(mutex);
      channel.swap(current);
    }
    if (channel) channel->close("client stopped");
  }
};

ChannelClient::ChannelClient(net::io_context& ioc, ChannelClientOptions options, ChannelClientHandlers handlers)
    : impl_(std::make_shared<Impl>(ioc, std::move(options), std::move(handlers))) {
  net::dispatch(impl_->strand, [self = impl_] { self->attempt(); });
}

ChannelClient::~ChannelClient() {
  stop();
}

void ChannelClient::set_hello(nlohmann::json hello) {
  auto checked = checked_hello(std::move(hello));
  std::lock_guard lock(impl_->mutex);
  impl_->hello = std::move(checked);
}

bool ChannelClient::send(const nlohmann::json& message) {
  auto c = channel();
  return c && c->send(message);
}

std::shared_ptr<Channel> ChannelClient::channel() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->current;
}

void ChannelClient::stop() {
  if (impl_->stopped.exchange(true)) return;
  net::dispatch(impl_->strand, [self = impl_] { self->shut_down(); });
}

const Address& ChannelClient::address() const {
  return impl_->address;
}

}  // namespace wanlab::protocol
