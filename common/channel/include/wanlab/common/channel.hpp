#pragma once
// A control channel: one persistent connection carrying protocol messages both ways, over
// any Asio byte stream (Unix socket, TCP socket, beast's in-memory test stream).
//
// What the channel does on its own, so the application only sees valid messages:
// - frames outgoing messages and decodes incoming ones (protocol.hpp);
// - answers a bad frame or an invalid message with an `error` message naming the problem
//   and goes on, except after a bad length prefix (the stream has lost its framing): then
//   it sends the error and closes;
// - sends `ping` after `idle` without sending anything, answers `ping` with `pong`, and
//   hides both from the application;
// - closes when nothing arrives for `read_timeout` ("no message from peer in 9 s"), or
//   when a write makes no progress for as long.
//
// Threading: every channel runs on its own strand over the stream's executor (executor()).
// on_message and on_close run on that strand, never concurrently with each other; start,
// pause, send and close may be called from any thread. Nothing throws out of the strand:
// an exception from on_message closes the channel with the exception's text as the reason.
// Lifetime: pending operations keep the channel alive; once closed it drops its handlers,
// so handlers may hold the channel's shared_ptr without leaking it.
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/system/error_code.hpp>
#include <nlohmann/json.hpp>

#include "wanlab/common/protocol.hpp"

namespace wanlab::protocol {

struct ChannelOptions {
  /// Largest JSON text accepted from the peer or queued for it.
  std::size_t max_message_bytes = kMaxMessageBytes;
  /// Largest first message accepted from the peer, when set and below max_message_bytes;
  /// later ones may be up to max_message_bytes. A server whose peers must first say a small
  /// `hello` sets it, so that a peer not yet admitted cannot make it buffer a large frame.
  std::optional<std::size_t> max_first_message_bytes;
  /// Send `ping` after this long without sending anything.
  std::chrono::milliseconds idle = std::chrono::seconds(3);
  /// Close after this long without receiving anything (the peer's pings count), and when a
  /// write stalls this long. A few times the peer's `idle`.
  std::chrono::milliseconds read_timeout = std::chrono::seconds(9);
  /// This end's side. When set, incoming messages that only this side may send are refused
  /// (`wrong_direction`), and so are outgoing ones that only the peer may send.
  std::optional<Sender> side;
};

class Channel {
 public:
  using MessageHandler = std::function<void(const nlohmann::json& message)>;
  using CloseHandler = std::function<void(const std::string& reason)>;

  virtual ~Channel() = default;

  /// Sets the handlers and delivers messages to on_message (validated; never ping/pong)
  /// until the channel closes, then calls on_close once with the reason. The first call
  /// starts reading and the keep-alive timers. A later call replaces the handlers (a
  /// hand-over: called from inside on_message, the next message goes to the new handler)
  /// and resumes after pause(). Called on a closed channel, it posts on_close at once.
  virtual void start(MessageHandler on_message, CloseHandler on_close) = 0;
  /// Stops delivering until the next start(): messages wait in the channel and reading
  /// stops, so the peer's writes back up; the read timeout is suspended meanwhile. Called
  /// from inside on_message, it takes effect for the next message.
  virtual void pause() = 0;
  /// Queues a message; writes go out in order, one at a time. The message is validated and
  /// encoded on the calling thread. Returns false (and logs why) when it is invalid, over
  /// max_message_bytes, or the channel is closing; true means queued, not delivered.
  virtual bool send(const nlohmann::json& message) = 0;
  /// Sends what is already queued, then closes; on_close gets `reason`. Idempotent.
  virtual void close(std::string reason = "closed by this side") = 0;

  /// False once close() was called or the connection ended.
  virtual bool is_open() const = 0;
  /// The peer, for logs: "unix:/run/wanlab.sock #3", "tcp:127.0.0.1:40112".
  virtual const std::string& peer() const = 0;
  /// The strand the handlers run on; post here to act in step with them.
  virtual boost::asio::any_io_executor executor() const = 0;
};

namespace detail {

/// A byte stream with its type erased, so that one channel implementation serves every
/// stream type. Completion handlers run on executor().
class ByteStream {
 public:
  using Strand = boost::asio::strand<boost::asio::any_io_executor>;
  using Handler = std::function<void(const boost::system::error_code&, std::size_t)>;
  virtual ~ByteStream() = default;
  virtual const Strand& executor() const = 0;
  virtual void async_read_some(boost::asio::mutable_buffer buffer, Handler handler) = 0;
  /// Writes all of `buffers` (they must outlive the operation).
  virtual void async_write(std::vector<boost::asio::const_buffer> buffers, Handler handler) = 0;
  virtual void close() noexcept = 0;
};

template <class Stream>
class StreamAdapter final : public ByteStream {
 public:
  explicit StreamAdapter(Stream stream)
      : stream_(std::move(stream)),
        strand_(boost::asio::make_strand(boost::asio::any_io_executor(stream_.get_executor()))) {}
  ~StreamAdapter() override { close(); }

  const Strand& executor() const override { return strand_; }
  void async_read_some(boost::asio::mutable_buffer buffer, Handler handler) override {
    stream_.async_read_some(buffer, on_strand(std::move(handler)));
  }
  void async_write(std::vector<boost::asio::const_buffer> buffers, Handler handler) override {
    boost::asio::async_write(stream_, std::move(buffers), on_strand(std::move(handler)));
  }
  void close() noexcept override {
    boost::system::error_code ec;
    if constexpr (requires(Stream & s, boost::system::error_code & e) { s.shutdown(Stream::shutdown_both, e); })
      stream_.shutdown(Stream::shutdown_both, ec);
    if constexpr (requires(Stream & s, boost::system::error_code & e) { s.close(e); })
      stream_.close(ec);
    else
      stream_.close();
  }

 private:
  // Hops onto the strand on completion rather than binding the handler to it: beast's test
  // stream (Boost 1.74) cannot track work on a bound any_io_executor strand. dispatch runs
  // the handler inline when the strand is free, so sockets pay no extra queueing.
  auto on_strand(Handler handler) {
    return [strand = strand_, h = std::move(handler)](const boost::system::error_code& ec, std::size_t n) mutable {
      boost::asio::dispatch(strand, [h = std::move(h), ec, n]() mutable { h(ec, n); });
    };
  }

  Stream stream_;
  Strand strand_;
};

std::shared_ptr<Channel> make_channel(std::unique_ptr<ByteStream> stream, ChannelOptions options, std::string peer);

}  // namespace detail

/// A channel over a connected stream (it takes the stream). Nothing happens before start(),
/// except that send() may queue.
template <class Stream>
std::shared_ptr<Channel> make_channel(Stream stream, ChannelOptions options = {}, std::string peer = "stream") {
  return detail::make_channel(std::make_unique<detail::StreamAdapter<Stream>>(std::move(stream)), std::move(options),
                              std::move(peer));
}

}  // namespace wanlab::protocol
