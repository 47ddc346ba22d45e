#pragma once
// The control API's request handling, as a pure function over a Controller: no sockets,
// no Asio. Messages are HTTP/1.1 with JSON bodies, versioned by path (/v1/...):
//   GET  /v1/status                    -> the lab's status document
//   POST /v1/links/{src}/{dst}         body {"delay"?, "jitter"?, "loss"?, "rate"?, "queue"?}
//                                      -> the link's new parameters
//   POST /v1/shutdown                  -> tears the lab down (answers what it removed), then
//                                         the controller exits
// Errors: {"error": {"code": "...", "message": "...", "field": "..."?}} with 4xx/5xx.
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "wanlab/common/units.hpp"

namespace wanlab::api {

inline constexpr std::size_t kMaxBodyBytes = 64 * 1024;

struct Request {
  std::string method;  // "GET", "POST"
  std::string target;  // "/v1/status"
  std::string body;
};

struct Response {
  int status = 200;
  nlohmann::json body;
};

/// A link change: only the fields given change.
struct LinkChange {
  std::optional<Duration> delay;
  std::optional<Duration> jitter;
  std::optional<Probability> loss;
  std::optional<Rate> rate;
  std::optional<QueueLimit> queue;
  bool empty() const { return !delay && !jitter && !loss && !rate && !queue; }
};

/// An error the API reports as such (bad request, unknown link...).
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string code, std::string message, std::string field = {})
      : std::runtime_error(message), status_(status), code_(std::move(code)), field_(std::move(field)) {}
  int status() const { return status_; }
  const std::string& code() const { return code_; }
  const std::string& field() const { return field_; }

 private:
  int status_;
  std::string code_;
  std::string field_;
};

/// What the handlers act on; the daemon's LabController implements it, tests fake it.
class Controller {
 public:
  virtual ~Controller() = default;
  virtual nlohmann::json status() = 0;
  /// Returns the link's parameters after the change. Throws ApiError for unknown DCs or
  /// links and for values that are invalid together (jitter above delay).
  virtual nlohmann::json set_link(const std::string& src, const std::string& dst, const LinkChange& change) = 0;
  /// Tears the lab down and arranges for the controller to exit; returns what was removed.
  virtual nlohmann::json shutdown() = 0;
};

/// Parses a link-change body; throws ApiError naming the offending field.
LinkChange parse_link_change(const std::string& body);

Response handle(const Request& request, Controller& controller);

}  // namespace wanlab::api
