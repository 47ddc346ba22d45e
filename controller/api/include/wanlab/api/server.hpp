#pragma once
// The control API's transport: HTTP/1.1 over a Unix socket (Boost.Beast), one request
// per connection, a timeout on every read and write, bodies capped at kMaxBodyBytes.
// Requests go to the pure api::handle().
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "wanlab/api/handler.hpp"

namespace wanlab::api {

class Server {
 public:
  /// Binds (replacing a stale socket file) and starts accepting on `ioc`.
  Server(boost::asio::io_context& ioc, std::filesystem::path socket_path, Controller& controller,
         std::chrono::milliseconds io_timeout = std::chrono::seconds(10));
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  /// Stops accepting; sessions in flight finish.
  void close();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

/// HOST:PORT or [IPV6]:PORT, port 0-65535 (0: any free port). Throws std::invalid_argument
/// saying what is wrong.
std::pair<std::string, std::uint16_t> parse_host_port(const std::string& text);

/// Whether HOST names this machine's loopback ("localhost", 127.0.0.0/8, ::1).
bool is_loopback_host(const std::string& host);

/// HTTP over TCP for what may leave the machine: `wanlab up --metrics HOST:PORT`. Serves only
/// GET of `paths` ("/metrics"), never the control API. A non-loopback address needs a
/// token; with one, every request must carry "Authorization: Bearer TOKEN" (401 otherwise).
class TcpServer {
 public:
  /// Throws std::invalid_argument for a bad HOST:PORT or a non-loopback one without a token,
  /// std::runtime_error where it cannot listen. Port 0: any free port (see port()).
  TcpServer(boost::asio::io_context& ioc, const std::string& host_port, Controller& controller, std::string token,
            std::vector<std::string> paths, std::chrono::milliseconds io_timeout = std::chrono::seconds(10));
  /// The whole control API over TCP (`wanlab up --api HOST:PORT`: a lab driven from another
  /// host, e.g. a swarm lab's managers). Whoever has the token may do what root may through
  /// the Unix socket, so every request must carry it, on loopback too: an empty token throws
  /// std::invalid_argument, as a bad HOST:PORT does; std::runtime_error where it cannot listen.
  static std::unique_ptr<TcpServer> control_api(boost::asio::io_context& ioc, const std::string& host_port,
                                                Controller& controller, std::string token,
                                                std::chrono::milliseconds io_timeout = std::chrono::seconds(10));
  ~TcpServer();
  TcpServer(const TcpServer&) = delete;
  TcpServer& operator=(const TcpServer&) = delete;
  void close();
  std::uint16_t port() const;

 private:
  TcpServer() = default;
  void listen(boost::asio::io_context& ioc, const std::string& host_port, Controller& controller, std::string token,
              std::vector<std::string> paths, bool control, std::chrono::milliseconds io_timeout);
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

struct HttpReply {
  int status = 0;
  std::string content_type;
  std::string body;
};
/// GET http://HOST:PORT/target (with the bearer token, if any). Throws std::runtime_error
/// if the server cannot be reached or does not answer within `timeout`.
HttpReply http_get(const std::string& host_port, const std::string& target, const std::string& token = {},
                   std::chrono::milliseconds timeout = std::chrono::seconds(10));

/// Where a controller's control API answers: its Unix socket, or (tcp non-empty) HOST:PORT
/// of `wanlab up --api`, with the token every request there carries.
struct Endpoint {
  std::filesystem::path socket;
  std::string tcp;
  std::string token;
  /// "the controller at /run/wanlab/LAB/controller.sock" or "the controller's API at HOST:PORT".
  std::string describe() const;
};

/// One request to a controller over TCP (Endpoint::tcp). Throws std::runtime_error as
/// call() does.
Response call(const Endpoint& endpoint, const std::string& method, const std::string& target,
              const std::string& body = {}, std::chrono::milliseconds timeout = std::chrono::seconds(30));

/// One request to a controller. Throws std::runtime_error if it cannot be reached or does
/// not answer within `timeout`; API errors come back as a Response with status >= 400.
Response call(const std::filesystem::path& socket_path, const std::string& method, const std::string& target,
              const std::string& body = {}, std::chrono::milliseconds timeout = std::chrono::seconds(30));

}  // namespace wanlab::api
