#include "wanlab/common/channel.hpp"
#include "wanlab/common/logger.hpp"

#include <algorithm>
#include <atomic>
#include <deque>
#include <iterator>

#include <fmt/format.h>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "channel_log.hpp"

namespace wanlab::protocol {
namespace net = boost::asio;

namespace detail {

spdlog::logger& channel_log() {
  static spdlog::logger& logger = named_logger("channel");
  return logger;
}

}  // namespace detail

namespace {

using Clock = std::chrono::steady_clock;
using detail::channel_log;

std::string read_error_reason(const boost::system::error_code& ec) {
  if (ec == net::error::eof) return "peer closed the connection";
  if (ec == net::error::connection_reset) return "connection reset by peer";
  return "read failed: " + ec.message();
}

// The side a message from the peer comes from, when this end knows its own.
std::optional<Sender> peer_side(std::optional<Sender> side) {
  if (side == Sender::agent) return Sender::controller;
  if (side == Sender::controller) return Sender::agent;
  return std::nullopt;
}

std::string_view type_of(const nlohmann::json& m) {
  if (!m.is_object()) return {};
  auto it = m.find("type");
  return it != m.end() && it->is_string() ? std::string_view(it->get_ref<const std::string&>()) : std::string_view();
}

const std::string& ping_frame() {
  static const std::string frame = encode(message("ping"));
  return frame;
}

const std::string& pong_frame() {
  static const std::string frame = encode(message("pong"));
  return frame;
}

class ChannelImpl final : public Channel, public std::enable_shared_from_this<ChannelImpl> {
 public:
  ChannelImpl(std::unique_ptr<detail::ByteStream> stream, ChannelOptions options, std::string peer)
      : stream_(std::move(stream)),
        options_(std::move(options)),
        from_peer_(peer_side(options_.side)),
        peer_(std::move(peer)),
        ping_timer_(stream_->executor()),
        deadline_timer_(stream_->executor()),
        decoder_(std::min(options_.max_message_bytes,
                          options_.max_first_message_bytes.value_or(options_.max_message_bytes))),
        read_buf_(16 * 1024) {}

  void start(MessageHandler on_message, CloseHandler on_close) override {
    net::dispatch(stream_->executor(),
                  [self = shared_from_this(), m = std::move(on_message), c = std::move(on_close)]() mutable {
                    self->do_start(std::move(m), std::move(c));
                  });
  }

  void pause() override {
    net::dispatch(stream_->executor(), [self = shared_from_this()] { self->paused_ = true; });
  }

  bool send(const nlohmann::json& m) override {
    if (auto err = validate(m, options_.side)) {
      channel_log().error("{}: not sending an invalid \"{}\" message: {}", peer_, type_of(m), err->message);
      return false;
    }
    std::string frame = encode(m);
    if (frame.size() - kHeaderBytes > options_.max_message_bytes) {
      channel_log().error("{}: not sending a \"{}\" message of {} bytes (the limit is {})", peer_, type_of(m),
                          frame.size() - kHeaderBytes, options_.max_message_bytes);
      return false;
    }
    if (!open_) return false;
    net::dispatch(stream_->executor(),
                  [self = shared_from_this(), f = std::move(frame)]() mutable { self->enqueue(std::move(f)); });
    return true;
  }

  void close(std::string reason) override {
    open_ = false;
    net::dispatch(stream_->executor(),
                  [self = shared_from_this(), r = std::move(reason)]() mutable { self->do_close(std::move(r)); });
  }

  bool is_open() const override { return open_; }
  const std::string& peer() const override { return peer_; }
  net::any_io_executor executor() const override { return stream_->executor(); }

 private:
  // Everything below runs on the strand.

  void do_start(MessageHandler on_message, CloseHandler on_close) {
    on_message_ = on_message ? std::make_shared<const MessageHandler>(std::move(on_message)) : nullptr;
    on_close_ = std::move(on_close);
    if (closed_) {
      notify_closed();
      return;
    }
    if (paused_ || !reading_) last_recv_ = Clock::now();  // the read timeout was suspended
    paused_ = false;
    arm_timers();
    if (!delivering_) deliver();
  }

  // Delivers the messages decoded so far, then reads for more. Re-entered neither from
  // start() nor send() inside a handler: they only change the state this loop reads.
  void deliver() {
    delivering_ = true;
    while (!closing_ && !paused_ && on_message_) {
      auto d = decoder_.next();
      if (!d) break;
      if (!d->ok()) {
        enqueue(encode(error_message(*d->error)));
        if (decoder_.broken()) {
          channel_log().warn("{}: {}; closing", peer_, d->error->message);
          do_close("protocol error: " + d->error->message);
        } else {
          channel_log().warn("{}: {}", peer_, d->error->message);
        }
        continue;
      }
      const auto type = type_of(d->message);
      if (auto err = validate(d->message, from_peer_)) {
        channel_log().warn("{}: invalid \"{}\" message: {}", peer_, type, err->message);
        // An invalid error message is not answered: two peers must not trade errors forever.
        if (type != "error") enqueue(encode(error_message(*err)));
        continue;
      }
      if (type == "ping") {
        enqueue(pong_frame());
        continue;
      }
      if (type == "pong") continue;
      if (!first_delivered_) {  // the peer's first message: the full limit from now on
        first_delivered_ = true;
        decoder_.set_max_message_bytes(options_.max_message_bytes);
      }
      auto handler = on_message_;  // the handler may replace itself
      try {
        (*handler)(d->message);
      } catch (const std::exception& e) {
        channel_log().error("{}: the \"{}\" handler failed: {}", peer_, type, e.what());
        do_close(fmt::format("the \"{}\" handler failed: {}", type, e.what()));
      } catch (...) {
        channel_log().error("{}: the \"{}\" handler failed", peer_, type);
        do_close(fmt::format("the \"{}\" handler failed", type));
      }
    }
    delivering_ = false;
    if (!closing_ && !paused_ && on_message_) read();
  }

  void read() {
    if (reading_) return;
    reading_ = true;
    stream_->async_read_some(
        net::buffer(read_buf_),
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) { self->on_read(ec, n); });
  }

  void on_read(const boost::system::error_code& ec, std::size_t n) {
    reading_ = false;
    if (closed_) return;
    if (ec) {
      finish(closing_ ? close_reason_ : read_error_reason(ec));
      return;
    }
    last_recv_ = Clock::now();
    decoder_.feed(std::string_view(read_buf_.data(), n));
    if (!closing_ && !delivering_) deliver();
  }

  void enqueue(std::string frame) {
    if (closing_) return;
    queue_.push_back(std::move(frame));
    last_send_ = Clock::now();
    arm_timers();
    if (!writing_) write();
  }

  void write() {
    in_flight_.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
    queue_.clear();
    std::vector<net::const_buffer> buffers;
    buffers.reserve(in_flight_.size());
    for (const auto& f : in_flight_) buffers.push_back(net::buffer(f));
    writing_ = true;
    write_started_ = Clock::now();
    stream_->async_write(std::move(buffers), [self = shared_from_this()](const boost::system::error_code& ec,
                                                                         std::size_t) { self->on_write(ec); });
  }

  void on_write(const boost::system::error_code& ec) {
    writing_ = false;
    in_flight_.clear();
    if (closed_) return;
    if (ec) {
      finish(closing_ ? close_reason_ : "write failed: " + ec.message());
    } else if (!queue_.empty()) {
      write();
    } else if (closing_) {
      finish(close_reason_);
    }
  }

  void do_close(std::string reason) {
    open_ = false;
    if (closing_) return;
    // Queued messages go out first (an error reply before a protocol close, say), bounded
    // by the write stall timeout.
    closing_ = true;
    close_reason_ = std::move(reason);
    if (!writing_) finish(close_reason_);
  }

  void finish(std::string reason) {
    if (closed_) return;
    closed_ = closing_ = true;
    open_ = false;
    close_reason_ = std::move(reason);
    ping_timer_.cancel();
    deadline_timer_.cancel();
    stream_->close();
    queue_.clear();
    channel_log().debug("{}: closed: {}", peer_, close_reason_);
    notify_closed();
  }

  // Posted, so that on_close never runs inside the close() or send() that caused it.
  void notify_closed() {
    on_message_.reset();
    if (!on_close_) return;  // not started yet: start() will tell
    net::post(stream_->executor(), [handler = std::move(on_close_), reason = close_reason_, peer = peer_] {
      try {
        handler(reason);
      } catch (const std::exception& e) {
        channel_log().error("{}: the close handler failed: {}", peer, e.what());
      } catch (...) {
        channel_log().error("{}: the close handler failed", peer);
      }
    });
    on_close_ = nullptr;
  }

  void arm_timers() {
    if (timers_armed_ || closed_) return;
    timers_armed_ = true;
    last_send_ = last_recv_ = Clock::now();
    wait_ping(options_.idle);
    wait_deadline(options_.read_timeout);
  }

  void wait_ping(Clock::duration after) {
    ping_timer_.expires_after(after);
    // Timers hold the channel weakly: one that nobody holds and nothing reads for goes away.
    ping_timer_.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
      if (auto self = weak.lock(); self && !ec) self->on_ping_timer();
    });
  }

  void on_ping_timer() {
    if (closing_) return;
    const auto since = Clock::now() - last_send_;
    if (since >= options_.idle) {
      enqueue(ping_frame());
      wait_ping(options_.idle);
    } else {
      wait_ping(options_.idle - since);
    }
  }

  void wait_deadline(Clock::duration after) {
    deadline_timer_.expires_after(std::max<Clock::duration>(after, std::chrono::milliseconds(1)));
    deadline_timer_.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
      if (auto self = weak.lock(); self && !ec) self->on_deadline();
    });
  }

  // One timer for both limits; it checks the recorded times rather than being re-armed on
  // every read and write.
  void on_deadline() {
    if (closed_) return;
    const auto now = Clock::now();
    const auto limit = options_.read_timeout;
    const bool awaiting_peer = reading_ && !paused_ && !closing_;
    if (writing_ && now - write_started_ >= limit)
      return finish(fmt::format("peer did not read for {}", describe(limit)));
    if (awaiting_peer && now - last_recv_ >= limit)
      return finish(fmt::format("no message from peer in {}", describe(limit)));
    Clock::duration next = limit;
    if (writing_) next = std::min(next, write_started_ + limit - now);
    if (awaiting_peer) next = std::min(next, last_recv_ + limit - now);
    wait_deadline(next);
  }

  const std::unique_ptr<detail::ByteStream> stream_;
  const ChannelOptions options_;
  const std::optional<Sender> from_peer_;
  const std::string peer_;
  std::atomic<bool> open_{true};  // read off the strand by send() and is_open()

  net::steady_timer ping_timer_;
  net::steady_timer deadline_timer_;
  FrameDecoder decoder_;
  bool first_delivered_ = false;  // a message has gone to on_message (max_first_message_bytes)
  std::vector<char> read_buf_;
  std::shared_ptr<const MessageHandler> on_message_;
  CloseHandler on_close_;
  std::deque<std::string> queue_;
  std::vector<std::string> in_flight_;  // the frames of the write in progress

  bool paused_ = false;
  bool reading_ = false;
  bool writing_ = false;
  bool delivering_ = false;
  bool timers_armed_ = false;
  bool closing_ = false;  // close requested: no more reads or deliveries, flushing writes
  bool closed_ = false;   // the stream is closed
  std::string close_reason_;
  Clock::time_point last_send_, last_recv_, write_started_;
};

}  // namespace

std::shared_ptr<Channel> detail::make_channel(std::unique_ptr<ByteStream> stream, ChannelOptions options,
                                              std::string peer) {
  return std::make_shared<ChannelImpl>(std::move(stream), std::move(options), std::move(peer));
}

}  // namespace wanlab::protocol
