#pragma once
// The agent's end of the control channel: connects to the controller, says `hello`, and
// whenever the connection fails or ends, tries again with exponential backoff (100 ms
// doubling to 2 s by default) until stopped, or until `give_up_after` has passed without a
// connection (then on_gave_up runs and the client stops). The backoff starts over once the
// controller sends anything but an error.
//
// Threading: the client runs on its own strand over the io_context; every callback
// (on_connected, on_message, on_disconnected) runs on it, one at a time. send(), channel()
// and set_hello() may be called from any thread. stop() and the destructor must run on a
// thread running the io_context, or while it is not running: no callback runs after that.
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "wanlab/common/channel.hpp"
#include "wanlab/common/channel_address.hpp"

namespace wanlab::protocol {

struct ChannelClientOptions {
  /// "unix:/path/to.sock" or "tcp:HOST:PORT" (channel_address.hpp).
  std::string address;
  /// The complete `hello` (protocol::message("hello", {...})); sent first on every
  /// connection, with "token" added when `token` is set.
  nlohmann::json hello;
  std::string token;
  /// For every connection; `side` is set to the agent. read_timeout also bounds a connect.
  ChannelOptions channel;
  std::chrono::milliseconds initial_backoff{100};
  std::chrono::milliseconds max_backoff{2000};
  /// Stop retrying once this long has passed without a connection (since the last one was
  /// lost, or since the start): on_gave_up runs and the client stops. 0: retry until stopped.
  std::chrono::milliseconds give_up_after{0};
};

struct ChannelClientHandlers {
  /// A connection is up and the hello queued; the channel is already started (send on it,
  /// or through ChannelClient::send).
  std::function<void(std::shared_ptr<Channel> channel)> on_connected;
  /// Every message from the controller (validated; never ping/pong).
  Channel::MessageHandler on_message;
  /// A connection attempt failed, or an established connection closed; the client retries
  /// after its backoff.
  std::function<void(const std::string& reason)> on_disconnected;
  /// give_up_after passed without a connection (after the last on_disconnected): the client
  /// has stopped.
  std::function<void(const std::string& reason)> on_gave_up;
};

class ChannelClient {
 public:
  /// Starts connecting. Throws std::invalid_argument for an unreadable address or a hello
  /// that is not a valid `hello` message (naming the field).
  ChannelClient(boost::asio::io_context& ioc, ChannelClientOptions options, ChannelClientHandlers handlers);
  /// stop().
  ~ChannelClient();
  ChannelClient(const ChannelClient&) = delete;
  ChannelClient& operator=(const ChannelClient&) = delete;

  /// The hello for the next connections (the current one is not affected), e.g. with the
  /// run this agent is in, so a restarted controller learns it. Throws like the constructor.
  void set_hello(nlohmann::json hello);
  /// Sends on the current connection; false when there is none or the channel refuses.
  bool send(const nlohmann::json& message);
  /// The current connection, or nullptr.
  std::shared_ptr<Channel> channel() const;
  /// Closes the connection ("client stopped") and stops retrying. No callback runs after.
  void stop();

  const Address& address() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace wanlab::protocol
