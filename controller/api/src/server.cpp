#include "wanlab/api/server.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "wanlab/common/printable.hpp"

namespace wanlab::api {
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using Proto = net::local::stream_protocol;
using Stream = beast::basic_stream<Proto>;

namespace {

constexpr std::chrono::milliseconds kAcceptRetry{100};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Proto::socket sock, Controller& controller, std::chrono::milliseconds timeout)
      : stream_(std::move(sock)), controller_(controller), timeout_(timeout) {}

  void start() {
    parser_.emplace();
    parser_->body_limit(kMaxBodyBytes);
    parser_->header_limit(16 * 1024);
    stream_.expires_after(timeout_);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

 private:
  void on_read(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == beast::error::timeout) return;
    Response r;
    std::string body;
    // Nothing may escape into the daemon's event loop: a request that breaks the handler
    // gets a 500 and the next one is served as usual.
    try {
      if (ec == http::error::body_limit) {
        r = {413, {{"error", {{"code", "too_large"}, {"message", fmt::format("body over {} bytes", kMaxBodyBytes)}}}}};
      } else if (ec) {
        r = {400, {{"error", {{"code", "bad_request"}, {"message", ec.message()}}}}};
      } else {
        const auto& req = parser_->get();
        r = handle({std::string(req.method_string()), std::string(req.target()), req.body()}, controller_);
      }
      // The handler escapes what it echoes; should a message still carry bytes that are not
      // UTF-8, they become U+FFFD rather than an exception.
      body = r.body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    } catch (const std::exception& e) {
      spdlog::error("API: a request failed in the server: {}", printable(e.what(), 400));
      r.status = 500;
      body = R"({"error":{"code":"internal","message":"the request failed in the server; see the controller's log"}})"
             "\n";
    }
    res_.version(11);
    res_.result(static_cast<http::status>(r.status));
    res_.set(http::field::content_type, "application/json");
    res_.set(http::field::server, "wanlab");
    res_.keep_alive(false);
    res_.body() = std::move(body);
    res_.prepare_payload();
    stream_.expires_after(timeout_);
    http::async_write(stream_, res_, [self = shared_from_this()](beast::error_code, std::size_t) {
      beast::error_code ignored;
      self->stream_.socket().shutdown(Proto::socket::shutdown_both, ignored);
    });
  }

  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> res_;
  Controller& controller_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

struct Server::Impl : std::enable_shared_from_this<Server::Impl> {
  Impl(net::io_context& ioc, std::filesystem::path p, Controller& c, std::chrono::milliseconds t)
      : acceptor(ioc), retry(ioc), path(std::move(p)), controller(c), timeout(t) {}
  Proto::acceptor acceptor;
  net::steady_timer retry;  // after a failed accept
  std::filesystem::path path;
  Controller& controller;
  std::chrono::milliseconds timeout;

  void accept() {
    acceptor.async_accept([self = shared_from_this()](beast::error_code ec, Proto::socket sock) {
      if (ec == net::error::operation_aborted || !self->acceptor.is_open()) return;
      if (ec) {
        // Out of descriptors (EMFILE), say: the error repeats until one is freed, so wait a
        // little rather than spin on the control thread.
        spdlog::warn("API: accept failed: {}; retrying in {} ms", ec.message(), kAcceptRetry.count());
        self->retry.expires_after(kAcceptRetry);
        self->retry.async_wait([self](const beast::error_code& wait_ec) {
          if (!wait_ec && self->acceptor.is_open()) self->accept();
        });
        return;
      }
      try {
        std::make_shared<Session>(std::move(sock), self->controller, self->timeout)->start();
      } catch (const std::exception& e) {
        spdlog::error("API: cannot serve a connection: {}", e.what());
      }
      self->accept();
    });
  }
};

Server::Server(net::io_context& ioc, std::filesystem::path socket_path, Controller& controller,
               std::chrono::milliseconds io_timeout)
    : impl_(std::make_shared<Impl>(ioc, std::move(socket_path), controller, io_timeout)) {
  std::error_code ec;
  std::filesystem::remove(impl_->path, ec);
  Proto::endpoint ep(impl_->path.string());
  impl_->acceptor.open(ep.protocol());
  // Only the controller's user may connect (it changes links, starts runs as root, shuts
  // the lab down), whatever the umask: Linux gives the file the socket's mode at bind.
  if (::fchmod(impl_->acceptor.native_handle(), 0600) != 0)
    throw std::runtime_error(fmt::format("{}: fchmod: {}", impl_->path.string(), std::strerror(errno)));
  impl_->acceptor.bind(ep);
  impl_->acceptor.listen();
  impl_->accept();
}

Server::~Server() { close(); }

void Server::close() {
  if (!impl_ || !impl_->acceptor.is_open()) return;
  beast::error_code ec;
  impl_->acceptor.close(ec);
  impl_->retry.cancel();
  std::error_code fec;
  std::filesystem::remove(impl_->path, fec);
}

Response call(const std::filesystem::path& socket_path, const std::string& method, const std::string& target,
              const std::string& body, std::chrono::milliseconds timeout) {
  net::io_context ioc;
  Stream stream(ioc);
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, "wanlab");
  req.set(http::field::content_type, "application/json");
  req.body() = body;
  req.prepare_payload();
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(16 * 1024 * 1024);
  beast::error_code failure;
  std::string stage = "connect to";

  stream.expires_after(timeout);
  stream.async_connect(Proto::endpoint(socket_path.string()), [&](beast::error_code ec) {
    if (ec) return void(failure = ec);
    stage = "send to";
    http::async_write(stream, req, [&](beast::error_code ec2, std::size_t) {
      // A server may answer before it has read the whole request and close (413 for a body
      // over its limit): the rest of the write then fails, and its answer is there to read.
      stage = "read the answer of";
      http::async_read(stream, buffer, parser, [&, ec2](beast::error_code ec3, std::size_t) {
        failure = ec3;
        if (ec3 && ec2) {  // no answer either: the write's error is the one to report
          failure = ec2;
          stage = "send to";
        }
      });
    });
  });
  ioc.run();
  if (failure)
    throw std::runtime_error(fmt::format("cannot {} the controller at {}: {}", stage, socket_path.string(),
                                         failure.message()));
  Response r;
  r.status = static_cast<int>(parser.get().result_int());
  try {
    r.body = nlohmann::json::parse(parser.get().body());
  } catch (const std::exception&) {
    r.body = {{"error", {{"code", "bad_reply"}, {"message", "the controller's answer is not JSON"}}}};
  }
  return r;
}

}  // namespace wanlab::api
