#pragma once
// The controller's end of the control channel: accepts agents on a Unix socket and/or a TCP
// endpoint and admits each connection by its first message, which must be a `hello`:
// - within the channel's read_timeout, else error `hello_timeout` and close;
// - of type `hello`, else error `expected_hello` and close;
// - over TCP, carrying "token" equal to the server's token, else error `unauthorized` and
//   close. Over the Unix socket the token may be left out (reaching the socket already
//   takes access to the host's filesystem); one that is given must still be right.
// Before its hello a connection is not trusted, and what it may cost is bounded:
// - its first message may be at most max_hello_bytes (a larger length prefix: error
//   `too_large` and close), so it cannot make the server buffer a large frame;
// - at most max_pending connections per listening socket wait for their hello at once;
//   one more is closed at once, unread, with a warning in the log (at most one a second,
//   with the count since the last).
// An admitted channel is paused and handed to on_hello, which takes it over by calling
// channel->start(on_message, on_close) (at once or later: messages wait meanwhile) and
// typically sends `welcome`; or it refuses it with close().
//
// Threading: on_hello runs on the new channel's strand (see channel.hpp), so hellos from
// different agents may run concurrently on a multi-threaded io_context. Construct, close
// and destroy the server on a thread running the io_context, or while it is not running.
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <nlohmann/json.hpp>

#include "wanlab/common/channel.hpp"

namespace wanlab::protocol {

struct ChannelServerOptions {
  /// Listen here; a stale socket file is replaced, a live one (another server answers) or
  /// anything that is not a socket is refused.
  std::optional<std::filesystem::path> unix_path;
  /// Listen here too (port 0: any free port, see tcp_endpoint()). Requires a token.
  std::optional<boost::asio::ip::tcp::endpoint> tcp;
  /// The bearer token agents present in `hello`.
  std::string token;
  /// For every accepted channel; `side` is set to the controller, and
  /// max_first_message_bytes to max_hello_bytes.
  ChannelOptions channel;
  /// The largest `hello` accepted (a real one is a few hundred bytes).
  std::size_t max_hello_bytes = 64 * 1024;
  /// Connections waiting for their hello, at most, on each listening socket. Well above
  /// the agents that start at once (a lab's nodes: 96 in bringup-96.json); one refused
  /// connects again after its backoff.
  std::size_t max_pending = 256;
};

class ChannelServer {
 public:
  /// `hello` is the agent's hello without its token (so it can be logged as is).
  using HelloHandler = std::function<void(std::shared_ptr<Channel> channel, const nlohmann::json& hello)>;

  /// Binds and starts accepting. Throws std::invalid_argument for options that cannot work
  /// (no endpoint; TCP without a token) and std::runtime_error naming the address when
  /// binding fails.
  ChannelServer(boost::asio::io_context& ioc, ChannelServerOptions options, HelloHandler on_hello);
  /// close().
  ~ChannelServer();
  ChannelServer(const ChannelServer&) = delete;
  ChannelServer& operator=(const ChannelServer&) = delete;

  /// Stops accepting, removes the socket file (if it is still the one this server bound)
  /// and closes every channel it accepted, admitted or not (reason "server closed").
  void close();

  /// The bound TCP endpoint (with the actual port), when listening on TCP.
  std::optional<boost::asio::ip::tcp::endpoint> tcp_endpoint() const;
  const std::optional<std::filesystem::path>& unix_path() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace wanlab::protocol
