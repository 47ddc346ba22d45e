#pragma once
// The control API's request handling, as a pure function over a Controller: no sockets,
// no Asio. Messages are HTTP/1.1 with JSON bodies, versioned by path (/v1/...):
//   GET  /v1/status                    -> the lab's status document
//   POST /v1/links/{src}/{dst}         body {"delay"?, "jitter"?, "loss"?, "rate"?, "queue"?}
//                                      -> the link's new parameters
//   POST /v1/shutdown                  -> tears the lab down (answers what it removed), then
//                                         the controller exits
//   GET  /v1/replays                   -> {"replays": [...]}: every trace replay, its position
//                                         and step lateness
//   POST /v1/replays                   body {"link": "use:euw", "trace": "/abs/path.csv",
//                                         "mode"?: "loop"|"hold", "format"?: "csv"|"mahimahi",
//                                         "window"?: "100ms"} -> the replay (replaces one
//                                         running on that link)
//   DELETE /v1/replays[/{src}/{dst}]   -> {"stopped": [...]}: stops every replay, or one
//   POST /v1/runs                      body {"scenario": "/abs/scenario.json", "out": "/abs/run-dir",
//                                         "connections"?: k, "policy"?: name} -> 202 {"run": id, ...}:
//                                         runs the scenario on this lab (one run at a time)
//   GET  /v1/runs[/{id}]               -> every run, or one: phase, progress, error, summary
//   DELETE /v1/runs/{id}               -> aborts a run
//   GET  /v1/windows                   -> the running run's arbiter windows of the last minute
//                                         (open ones with "end_s": null), for the dashboard
//   GET  /metrics                      -> the Prometheus text format (api/metrics.hpp,
//                                         docs/metrics.md), not JSON
// Errors: {"error": {"code": "...", "message": "...", "field": "..."?}} with 4xx/5xx.
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "wanlab/common/units.hpp"
#include "wanlab/replay/trace.hpp"

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
  // A body that is not JSON (/metrics): sent as is when content_type is set.
  std::string content_type{};
  std::string text{};
};

/// A link change: only the fields given change.
struct LinkChange {
  std::optional<Duration> delay;
  std::optional<Duration> jitter;
  std::optional<Probability> loss;
  // Bursty loss to set (a value) or turn off (nullopt inside); absent: unchanged.
  std::optional<std::optional<LossBurst>> loss_burst;
  std::optional<Rate> rate;
  std::optional<QueueLimit> queue;
  bool empty() const { return !delay && !jitter && !loss && !loss_burst && !rate && !queue; }
};

/// A change of a DC's rails in place (POST /v1/rails/{dc}).
struct RailsChange {
  std::optional<Duration> reconfiguration;  // OCS rails: how long a change of circuits takes
};

/// A trace replay to start on a directed link.
struct ReplayRequest {
  std::string src, dst;
  std::string trace;                    // absolute path: the controller reads it
  std::optional<replay::EndMode> mode;  // overrides the file's #@ mode
  std::string format = "csv";           // csv | mahimahi (imported into rate steps)
  std::optional<Duration> window;       // mahimahi only: the binning window
};

/// A scenario run to start on the lab.
struct RunRequest {
  std::string scenario;  // absolute path: the controller reads it
  std::string out;       // absolute path of the run folder to write
  std::optional<int> connections;  // overrides the scenario's TCP connections per WAN peer
  std::optional<std::string> policy;
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

  // Trace replay. The defaults answer 501, for controllers that do not replay.
  /// Starts (or restarts) a replay; returns its status. Throws ApiError for unknown links
  /// and invalid traces (400, the message listing every problem with line and column).
  /// Changes DC `dc`'s rails in place (the lab's rail switch); answers the DC's fabric.
  virtual nlohmann::json set_rails(const std::string& dc, const RailsChange& change);
  virtual nlohmann::json start_replay(const ReplayRequest& request);
  /// {"replays": [...]}.
  virtual nlohmann::json replays();
  /// Stops the replay of one link (404 when there is none), or every replay when `link` is
  /// nullopt; returns {"stopped": [...]}, each replay's final status.
  virtual nlohmann::json stop_replays(const std::optional<std::pair<std::string, std::string>>& link);

  // Scenario runs. The defaults answer 501, for controllers that do not run scenarios.
  virtual nlohmann::json start_run(const RunRequest& request);
  virtual nlohmann::json runs();
  virtual nlohmann::json run_status(const std::string& id);
  virtual nlohmann::json abort_run(const std::string& id);

  /// The Prometheus text of everything this controller measures (GET /metrics). The
  /// default answers 501.
  virtual std::string metrics();
  /// {"run": id|null, "now_s": s since the run's start, "windows": [{src, dst, pipeline, kind,
  /// iteration, start_s, end_s|null, revoked}]}: windows open now or ended within the last
  /// `horizon_s`. The default answers 501.
  virtual nlohmann::json windows(double horizon_s);
};

/// Parses a link-change body; throws ApiError naming the offending field.
LinkChange parse_link_change(const std::string& body);
/// Parses a replay body; throws ApiError naming the offending field.
ReplayRequest parse_replay_request(const std::string& body);
/// Parses a run body; throws ApiError naming the offending field.
RunRequest parse_run_request(const std::string& body);
/// "use:euw" -> {"use", "euw"}; throws ApiError naming `field`.
std::pair<std::string, std::string> parse_link_ref(const std::string& text, const std::string& field);

Response handle(const Request& request, Controller& controller);

}  // namespace wanlab::api
