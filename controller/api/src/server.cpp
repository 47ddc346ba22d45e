#include "wanlab/api/server.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <string_view>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "wanlab/common/channel_address.hpp"
#include "wanlab/common/printable.hpp"
#include <fmt/ranges.h>

namespace wanlab::api {
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using Proto = net::local::stream_protocol;
using Stream = beast::basic_stream<Proto>;
using Tcp = net::ip::tcp;

namespace {

constexpr std::chrono::milliseconds kAcceptRetry{100};

// What a connection may ask for: the Unix socket everything (its file mode keeps others
// out), TCP only the paths given, with the bearer token where one is set; TCP with
// `control` everything, with the token (never empty there).
struct Access {
  bool tcp = false;
  std::string token;                // TCP: required as "Authorization: Bearer TOKEN" unless empty
  std::vector<std::string> paths;   // TCP: the only paths served ("/metrics")
  bool control = false;             // TCP: the whole control API (`up --api`)
};

// Constant time in the token's length: how much of a guess is right does not show.
bool token_matches(std::string_view given, std::string_view token) {
  unsigned diff = given.size() == token.size() ? 0u : 1u;
  for (std::size_t i = 0; i < token.size(); ++i)
    diff |= static_cast<unsigned>(static_cast<unsigned char>(i < given.size() ? given[i] : 0) ^
                                  static_cast<unsigned char>(token[i]));
  return diff == 0;
}

template <class Protocol>
class Session : public std::enable_shared_from_this<Session<Protocol>> {
 public:
  Session(typename Protocol::socket sock, Controller& controller, std::chrono::milliseconds timeout,
          const Access& access)
      : stream_(std::move(sock)), controller_(controller), timeout_(timeout), access_(access) {}

  void start() {
    parser_.emplace();
    parser_->body_limit(kMaxBodyBytes);
    parser_->header_limit(16 * 1024);
    stream_.expires_after(timeout_);
    http::async_read(stream_, buffer_, *parser_,
                     [self = this->shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

 private:
  // TCP: the answer to a request it may not make, or nullopt.
  std::optional<Response> refused(const http::request<http::string_body>& req) const {
    if (!access_.tcp) return std::nullopt;
    const std::string target(req.target());
    const auto path = target.substr(0, target.find('?'));
    if (!access_.control && std::find(access_.paths.begin(), access_.paths.end(), path) == access_.paths.end())
      return Response{404, {{"error", {{"code", "not_found"},
                                       {"message", fmt::format("this TCP port serves only {}", fmt::join(access_.paths, ", "))}}}}};
    if (!access_.token.empty()) {
      const std::string auth(req[http::field::authorization]);
      constexpr std::string_view kBearer = "Bearer ";
      if (auth.size() <= kBearer.size() || std::string_view(auth).substr(0, kBearer.size()) != kBearer ||
          !token_matches(std::string_view(auth).substr(kBearer.size()), access_.token))
        return Response{401, {{"error", {{"code", "unauthorized"},
                                         {"message", "send the controller's token: Authorization: Bearer TOKEN"}}}}};
    }
    return std::nullopt;
  }

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
        if (auto no = refused(req))
          r = std::move(*no);
        else
          r = handle({std::string(req.method_string()), std::string(req.target()), req.body()}, controller_);
      }
      // The handler escapes what it echoes; should a message still carry bytes that are not
      // UTF-8, they become U+FFFD rather than an exception.
      if (r.content_type.empty())
        body = r.body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
      else
        body = std::move(r.text);
    } catch (const std::exception& e) {
      spdlog::error("API: a request failed in the server: {}", printable(e.what(), 400));
      r.status = 500;
      r.content_type.clear();
      body = R"({"error":{"code":"internal","message":"the request failed in the server; see the controller's log"}})"
             "\n";
    }
    res_.version(11);
    res_.result(static_cast<http::status>(r.status));
    res_.set(http::field::content_type, r.content_type.empty() ? std::string("application/json") : r.content_type);
    res_.set(http::field::server, "wanlab");
    if (r.status == 401) res_.set(http::field::www_authenticate, "Bearer");
    res_.keep_alive(false);
    res_.body() = std::move(body);
    res_.prepare_payload();
    stream_.expires_after(timeout_);
    http::async_write(stream_, res_, [self = this->shared_from_this()](beast::error_code, std::size_t) {
      beast::error_code ignored;
      self->stream_.socket().shutdown(Protocol::socket::shutdown_both, ignored);
    });
  }

  beast::basic_stream<Protocol> stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> res_;
  Controller& controller_;
  std::chrono::milliseconds timeout_;
  Access access_;
};

template <class Protocol>
struct Acceptor : std::enable_shared_from_this<Acceptor<Protocol>> {
  Acceptor(net::io_context& ioc, Controller& c, std::chrono::milliseconds t, Access a)
      : acceptor(ioc), retry(ioc), controller(c), timeout(t), access(std::move(a)) {}
  typename Protocol::acceptor acceptor;
  net::steady_timer retry;  // after a failed accept
  Controller& controller;
  std::chrono::milliseconds timeout;
  Access access;

  void accept() {
    acceptor.async_accept([self = this->shared_from_this()](beast::error_code ec, typename Protocol::socket sock) {
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
        std::make_shared<Session<Protocol>>(std::move(sock), self->controller, self->timeout, self->access)->start();
      } catch (const std::exception& e) {
        spdlog::error("API: cannot serve a connection: {}", e.what());
      }
      self->accept();
    });
  }

  void close() {
    beast::error_code ec;
    acceptor.close(ec);
    retry.cancel();
  }
};

}  // namespace

struct Server::Impl : Acceptor<Proto> {
  Impl(net::io_context& ioc, std::filesystem::path p, Controller& c, std::chrono::milliseconds t)
      : Acceptor<Proto>(ioc, c, t, Access{}), path(std::move(p)) {}
  std::filesystem::path path;
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
  impl_->Acceptor<Proto>::close();
  std::error_code fec;
  std::filesystem::remove(impl_->path, fec);
}

std::pair<std::string, std::uint16_t> parse_host_port(const std::string& text) {
  const auto colon = text.rfind(':');
  auto bad = [&](const std::string& why) {
    return std::invalid_argument(fmt::format("'{}': {} (expected HOST:PORT, e.g. 127.0.0.1:9464)", printable(text, 80), why));
  };
  if (colon == std::string::npos || colon == 0) throw bad("no HOST:PORT");
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const auto port_text = text.substr(colon + 1);
  unsigned port = 0;
  const auto r = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || r.ec != std::errc{} || r.ptr != port_text.data() + port_text.size() || port > 65535)
    throw bad(fmt::format("port '{}' is not a number from 0 to 65535", printable(port_text, 20)));
  return {host, static_cast<std::uint16_t>(port)};
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost") return true;
  beast::error_code ec;
  const auto a = net::ip::make_address(host, ec);
  return !ec && a.is_loopback();
}

struct TcpServer::Impl : Acceptor<Tcp> {
  using Acceptor<Tcp>::Acceptor;
};

TcpServer::TcpServer(net::io_context& ioc, const std::string& host_port, Controller& controller, std::string token,
                     std::vector<std::string> paths, std::chrono::milliseconds io_timeout) {
  listen(ioc, host_port, controller, std::move(token), std::move(paths), false, io_timeout);
}

std::unique_ptr<TcpServer> TcpServer::control_api(net::io_context& ioc, const std::string& host_port,
                                                  Controller& controller, std::string token,
                                                  std::chrono::milliseconds io_timeout) {
  std::unique_ptr<TcpServer> s(new TcpServer());
  s->listen(ioc, host_port, controller, std::move(token), {}, true, io_timeout);
  return s;
}

void TcpServer::listen(net::io_context& ioc, const std::string& host_port, Controller& controller, std::string token,
                       std::vector<std::string> paths, bool control, std::chrono::milliseconds io_timeout) {
  const auto [host, port] = parse_host_port(host_port);
  struct {
    std::string host;
    std::uint16_t port;
  } a{host, port};
  if (control && token.empty())
    throw std::invalid_argument(fmt::format("{}: the control API over TCP needs a token (--token, --token-file or "
                                            "$WANLAB_TOKEN), on loopback too: it can do what root can in the lab",
                                            host_port));
  if (!control && !is_loopback_host(a.host) && token.empty())
    throw std::invalid_argument(fmt::format("{}: not a loopback address: serving metrics there needs a token "
                                            "(--token or $WANLAB_TOKEN)",
                                            host_port));
  beast::error_code ec;
  const auto addr = a.host == "localhost" ? net::ip::make_address("127.0.0.1") : net::ip::make_address(a.host, ec);
  if (ec) throw std::invalid_argument(fmt::format("{}: '{}' is not an IP address", host_port, a.host));
  impl_ = std::make_shared<Impl>(ioc, controller, io_timeout, Access{true, std::move(token), std::move(paths), control});
  const Tcp::endpoint ep(addr, a.port);
  impl_->acceptor.open(ep.protocol());
  impl_->acceptor.set_option(net::socket_base::reuse_address(true));
  impl_->acceptor.bind(ep, ec);
  if (ec) throw std::runtime_error(fmt::format("cannot listen on {}: {}", host_port, ec.message()));
  impl_->acceptor.listen();
  impl_->accept();
}

TcpServer::~TcpServer() { close(); }

void TcpServer::close() {
  if (impl_ && impl_->acceptor.is_open()) impl_->close();
}

std::uint16_t TcpServer::port() const {
  beast::error_code ec;
  return impl_->acceptor.local_endpoint(ec).port();
}

HttpReply http_get(const std::string& host_port, const std::string& target, const std::string& token,
                   std::chrono::milliseconds timeout) {
  const auto [host, port] = parse_host_port(host_port);
  struct {
    std::string host;
    std::uint16_t port;
  } a{host, port};
  net::io_context ioc;
  beast::basic_stream<Tcp> stream(ioc);
  http::request<http::string_body> req{http::verb::get, target, 11};
  req.set(http::field::host, a.host);
  if (!token.empty()) req.set(http::field::authorization, "Bearer " + token);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 * 1024 * 1024);
  beast::error_code failure;
  std::string stage = "connect to";
  Tcp::resolver resolver(ioc);
  const auto eps = resolver.resolve(a.host, std::to_string(a.port), failure);
  if (failure) throw std::runtime_error(fmt::format("cannot resolve {}: {}", a.host, failure.message()));
  stream.expires_after(timeout);
  stream.async_connect(eps, [&](beast::error_code ec, const Tcp::endpoint&) {
    if (ec) return void(failure = ec);
    stage = "send to";
    http::async_write(stream, req, [&](beast::error_code ec2, std::size_t) {
      if (ec2) return void(failure = ec2);
      stage = "read the answer of";
      http::async_read(stream, buffer, parser, [&](beast::error_code ec3, std::size_t) { failure = ec3; });
    });
  });
  ioc.run();
  if (failure) throw std::runtime_error(fmt::format("cannot {} {}: {}", stage, host_port, failure.message()));
  HttpReply r;
  r.status = static_cast<int>(parser.get().result_int());
  r.content_type = std::string(parser.get()[http::field::content_type]);
  r.body = parser.get().body();
  return r;
}

namespace {

// One request on `stream`, connected by `connect(stream, handler)`; `where` names the
// controller in errors.
template <class Stream, class Connect>
Response call_on(Stream& stream, net::io_context& ioc, Connect connect, const std::string& where,
                 const std::string& token, const std::string& method, const std::string& target,
                 const std::string& body, std::chrono::milliseconds timeout) {
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, "wanlab");
  req.set(http::field::content_type, "application/json");
  if (!token.empty()) req.set(http::field::authorization, "Bearer " + token);
  req.body() = body;
  req.prepare_payload();
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(16 * 1024 * 1024);
  beast::error_code failure;
  std::string stage = "connect to";

  stream.expires_after(timeout);
  connect(stream, [&](beast::error_code ec) {
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
  if (failure) throw std::runtime_error(fmt::format("cannot {} {}: {}", stage, where, failure.message()));
  Response r;
  r.status = static_cast<int>(parser.get().result_int());
  if (const auto type = parser.get()[http::field::content_type]; !type.empty() && !type.starts_with("application/json")) {
    r.content_type = std::string(type);
    r.text = parser.get().body();
    return r;
  }
  try {
    r.body = nlohmann::json::parse(parser.get().body());
  } catch (const std::exception&) {
    r.body = {{"error", {{"code", "bad_reply"}, {"message", "the controller's answer is not JSON"}}}};
  }
  return r;
}

}  // namespace

std::string Endpoint::describe() const {
  return tcp.empty() ? fmt::format("the controller at {}", socket.string())
                     : fmt::format("the controller's API at {}", tcp);
}

Response call(const std::filesystem::path& socket_path, const std::string& method, const std::string& target,
              const std::string& body, std::chrono::milliseconds timeout) {
  net::io_context ioc;
  Stream stream(ioc);
  const Proto::endpoint ep(socket_path.string());
  return call_on(
      stream, ioc, [&](Stream& s, auto handler) { s.async_connect(ep, handler); },
      fmt::format("the controller at {}", socket_path.string()), {}, method, target, body, timeout);
}

Response call(const Endpoint& endpoint, const std::string& method, const std::string& target, const std::string& body,
              std::chrono::milliseconds timeout) {
  if (endpoint.tcp.empty()) return call(endpoint.socket, method, target, body, timeout);
  const auto [host, port] = parse_host_port(endpoint.tcp);
  net::io_context ioc;
  beast::basic_stream<Tcp> stream(ioc);
  beast::error_code ec;
  Tcp::resolver resolver(ioc);
  const auto eps = resolver.resolve(host, std::to_string(port), ec);
  if (ec) throw std::runtime_error(fmt::format("cannot resolve {} ({}): {}", host, endpoint.tcp, ec.message()));
  return call_on(
      stream, ioc,
      [&](beast::basic_stream<Tcp>& s, auto handler) {
        s.async_connect(eps, [handler](beast::error_code e, const Tcp::endpoint&) { handler(e); });
      },
      endpoint.describe(), endpoint.token, method, target, body, timeout);
}

}  // namespace wanlab::api
