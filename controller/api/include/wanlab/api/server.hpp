#pragma once
// The control API's transport: HTTP/1.1 over a Unix socket (Boost.Beast), one request
// per connection, a timeout on every read and write, bodies capped at kMaxBodyBytes.
// Requests go to the pure api::handle().
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

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

/// One request to a controller. Throws std::runtime_error if it cannot be reached or does
/// not answer within `timeout`; API errors come back as a Response with status >= 400.
Response call(const std::filesystem::path& socket_path, const std::string& method, const std::string& target,
              const std::string& body = {}, std::chrono::milliseconds timeout = std::chrono::seconds(30));

}  // namespace wanlab::api
