#include "wanlab/api/handler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>

#include "wanlab/api/metrics.hpp"
#include "wanlab/common/printable.hpp"

namespace wanlab::api {
namespace {

// The messages escape what they quote from the request (printable()); one that still is not
// UTF-8 (a controller's message quoting raw bytes) is escaped whole, so that the answer's
// JSON can always be written.
Response error(int status, const std::string& code, const std::string& message, const std::string& field = {}) {
  nlohmann::json e = {{"code", code}, {"message", valid_utf8(message) ? message : printable(message)}};
  if (!field.empty()) e["field"] = valid_utf8(field) ? field : printable(field);
  return {status, {{"error", e}}};
}

std::vector<std::string> split_path(const std::string& target) {
  std::vector<std::string> parts;
  std::string cur;
  for (char c : target.substr(0, target.find('?'))) {
    if (c == '/') {
      if (!cur.empty()) parts.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) parts.push_back(std::move(cur));
  return parts;
}

template <class T>
std::optional<T> field(const nlohmann::json& j, const char* name, Parsed<T> (*parse)(std::string_view)) {
  if (!j.contains(name)) return std::nullopt;
  const auto& v = j.at(name);
  if (!v.is_string())
    throw ApiError(400, "bad_request", fmt::format("{}: expected a string with a unit, got {}", name, printable(v.dump(), 80)),
                   name);
  auto p = parse(v.get<std::string>());
  if (!p) throw ApiError(400, "bad_request", fmt::format("{}: {}", name, p.error), name);
  return p.value;
}

nlohmann::json parse_body(const std::string& body) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(body);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e999
    // nlohmann quotes the bytes it last read, which need not be UTF-8.
    throw ApiError(400, "bad_json", fmt::format("body is not JSON: {}", printable(e.what(), 300)));
  }
  if (!j.is_object()) throw ApiError(400, "bad_request", "body must be a JSON object");
  return j;
}

std::string string_field(const nlohmann::json& j, const char* name) {
  const auto& v = j.at(name);
  if (!v.is_string())
    throw ApiError(400, "bad_request", fmt::format("{}: expected a string, got {}", name, printable(v.dump(), 80)), name);
  return v.get<std::string>();
}

}  // namespace

nlohmann::json Controller::set_rails(const std::string&, const RailsChange&) {
  throw ApiError(501, "not_implemented", "this controller switches no rails");
}
nlohmann::json Controller::start_replay(const ReplayRequest&) {
  throw ApiError(501, "not_implemented", "this controller does not replay traces");
}
nlohmann::json Controller::replays() { throw ApiError(501, "not_implemented", "this controller does not replay traces"); }
nlohmann::json Controller::stop_replays(const std::optional<std::pair<std::string, std::string>>&) {
  throw ApiError(501, "not_implemented", "this controller does not replay traces");
}

nlohmann::json Controller::start_run(const RunRequest&) {
  throw ApiError(501, "not_implemented", "this controller does not run scenarios");
}
nlohmann::json Controller::runs() { throw ApiError(501, "not_implemented", "this controller does not run scenarios"); }
nlohmann::json Controller::run_status(const std::string&) {
  throw ApiError(501, "not_implemented", "this controller does not run scenarios");
}
nlohmann::json Controller::abort_run(const std::string&) {
  throw ApiError(501, "not_implemented", "this controller does not run scenarios");
}

nlohmann::json Controller::windows(double) {
  throw ApiError(501, "not_implemented", "this controller does not run scenarios");
}
std::string Controller::metrics() { throw ApiError(501, "not_implemented", "this controller has no metrics"); }

RunRequest parse_run_request(const std::string& body) {
  const auto j = parse_body(body);
  static const std::vector<std::string> known = {"scenario", "out", "connections", "policy"};
  for (const auto& [k, _] : j.items())
    if (std::find(known.begin(), known.end(), k) == known.end())
      throw ApiError(400, "bad_request",
                     fmt::format("unknown field '{}'; known: scenario, out, connections, policy", printable(k, 80)),
                     printable(k, 80));
  RunRequest r;
  for (const char* name : {"scenario", "out"}) {
    if (!j.contains(name))
      throw ApiError(400, "bad_request", fmt::format("{}: missing; give an absolute path", name), name);
    const auto v = string_field(j, name);
    if (v.empty() || !std::filesystem::path(v).is_absolute())
      throw ApiError(400, "bad_request",
                     fmt::format("{}: '{}' is not an absolute path (the controller does not share your working "
                                 "folder)",
                                 name, printable(v, 200)),
                     name);
    (std::string_view(name) == "scenario" ? r.scenario : r.out) = v;
  }
  if (j.contains("connections")) {
    const auto& c = j.at("connections");
    // Range-checked as 64 bits: get<int>() would wrap 4294967297 to 1 and accept it.
    const std::int64_t n = c.is_number_integer() ? c.get<std::int64_t>() : 0;
    if (!c.is_number_integer() || (c.is_number_unsigned() && c.get<std::uint64_t>() > 64) || n < 1 || n > 64)
      throw ApiError(400, "bad_request",
                     fmt::format("connections: {}: expected an integer in 1..64", printable(c.dump(), 80)),
                     "connections");
    r.connections = static_cast<int>(n);
  }
  if (j.contains("policy")) r.policy = string_field(j, "policy");
  return r;
}

std::pair<std::string, std::string> parse_link_ref(const std::string& text, const std::string& field) {
  const auto colon = text.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size() ||
      text.find(':', colon + 1) != std::string::npos)
    throw ApiError(400, "bad_request",
                   fmt::format("{}: '{}': name a directed link as SRC:DST, e.g. \"use:euw\"", field, printable(text, 80)),
                   field);
  return {text.substr(0, colon), text.substr(colon + 1)};
}

ReplayRequest parse_replay_request(const std::string& body) {
  const auto j = parse_body(body);
  static const std::vector<std::string> known = {"link", "trace", "mode", "format", "window"};
  for (const auto& [k, _] : j.items())
    if (std::find(known.begin(), known.end(), k) == known.end())
      throw ApiError(400, "bad_request",
                     fmt::format("unknown field '{}'; known: link, trace, mode, format, window", printable(k, 80)),
                     printable(k, 80));
  ReplayRequest r;
  if (!j.contains("link")) throw ApiError(400, "bad_request", "link: missing; e.g. \"use:euw\"", "link");
  std::tie(r.src, r.dst) = parse_link_ref(string_field(j, "link"), "link");
  if (!j.contains("trace")) throw ApiError(400, "bad_request", "trace: missing; give the trace file's absolute path", "trace");
  r.trace = string_field(j, "trace");
  if (r.trace.empty() || !std::filesystem::path(r.trace).is_absolute())
    throw ApiError(400, "bad_request",
                   fmt::format("trace: '{}' is not an absolute path (the controller does not share your working "
                               "folder)",
                               printable(r.trace, 200)),
                   "trace");
  if (j.contains("mode")) {
    const auto m = replay::parse_end_mode(string_field(j, "mode"));
    if (!m) throw ApiError(400, "bad_request", "mode: use \"loop\" or \"hold\"", "mode");
    r.mode = m;
  }
  if (j.contains("format")) {
    r.format = string_field(j, "format");
    if (r.format != "csv" && r.format != "mahimahi")
      throw ApiError(400, "bad_request", fmt::format("format: '{}': use \"csv\" or \"mahimahi\"", printable(r.format, 80)),
                     "format");
  }
  r.window = field(j, "window", &parse_duration);
  if (r.window && r.format != "mahimahi")
    throw ApiError(400, "bad_request", "window: only for format \"mahimahi\"", "window");
  if (r.window && (r.window->count() <= 0 || *r.window % replay::kGranularity != Duration{0}))
    throw ApiError(400, "bad_request", "window: must be a positive whole number of milliseconds", "window");
  return r;
}

LinkChange parse_link_change(const std::string& body) {
  const auto j = parse_body(body);
  static const std::vector<std::string> known = {"delay", "jitter", "loss", "loss_burst", "rate", "queue"};
  for (const auto& [k, _] : j.items())
    if (std::find(known.begin(), known.end(), k) == known.end())
      throw ApiError(400, "bad_request",
                     fmt::format("unknown field '{}'; known: delay, jitter, loss, loss_burst, rate, queue",
                                 printable(k, 80)),
                     printable(k, 80));
  LinkChange c;
  c.delay = field(j, "delay", &parse_duration);
  c.jitter = field(j, "jitter", &parse_duration);
  c.loss = field(j, "loss", &parse_percent);
  if (j.contains("loss_burst")) {
    if (j["loss_burst"].is_string() && j["loss_burst"].get<std::string>() == "off")
      c.loss_burst = std::optional<LossBurst>{};
    else
      c.loss_burst = field(j, "loss_burst", &parse_loss_burst);
  }
  c.rate = field(j, "rate", &parse_rate);
  c.queue = field(j, "queue", &parse_queue_limit);
  if (c.rate && c.rate->bps == 0) throw ApiError(400, "bad_request", "rate: must be positive", "rate");
  if (c.empty())
    throw ApiError(400, "bad_request", "nothing to change: give delay, jitter, loss, loss_burst, rate or queue");
  return c;
}

RailsChange parse_rails_change(const std::string& body) {
  const auto j = parse_body(body);
  for (const auto& [k, _] : j.items())
    if (k != "reconfiguration")
      throw ApiError(400, "bad_request", fmt::format("unknown field '{}'; known: reconfiguration", printable(k, 80)),
                     printable(k, 80));
  RailsChange c;
  c.reconfiguration = field(j, "reconfiguration", &parse_duration);
  if (!c.reconfiguration) throw ApiError(400, "bad_request", "nothing to change: give reconfiguration");
  return c;
}

Response handle(const Request& request, Controller& controller) {
  try {
    // Names in the path (DCs, run ids) go into answers and logs: refused here unless UTF-8.
    if (!valid_utf8(request.target))
      return error(400, "bad_request",
                   fmt::format("path {}: not valid UTF-8 (no DC or run name has such bytes)", printable(request.target, 200)),
                   "path");
    const auto parts = split_path(request.target);
    if (parts.size() == 1 && parts[0] == "metrics") {
      if (request.method != "GET") return error(405, "method_not_allowed", "use GET for /metrics");
      Response r;
      r.content_type = kMetricsContentType;
      r.text = controller.metrics();
      return r;
    }
    if (parts.empty() || parts[0] != "v1")
      return error(404, "not_found",
                   fmt::format("unknown path {} (this controller speaks /v1)", printable(request.target, 200)));
    if (parts.size() == 2 && parts[1] == "status") {
      if (request.method != "GET") return error(405, "method_not_allowed", "use GET for /v1/status");
      return {200, controller.status()};
    }
    if (parts.size() == 4 && parts[1] == "links") {
      if (request.method != "POST") return error(405, "method_not_allowed", "use POST for /v1/links/{src}/{dst}");
      return {200, controller.set_link(parts[2], parts[3], parse_link_change(request.body))};
    }
    if (parts.size() == 3 && parts[1] == "rails") {
      if (request.method != "POST") return error(405, "method_not_allowed", "use POST for /v1/rails/{dc}");
      return {200, controller.set_rails(parts[2], parse_rails_change(request.body))};
    }
    if (parts.size() >= 2 && parts[1] == "replays") {
      if (parts.size() == 2 && request.method == "GET") return {200, controller.replays()};
      if (parts.size() == 2 && request.method == "POST")
        return {200, controller.start_replay(parse_replay_request(request.body))};
      if ((parts.size() == 2 || parts.size() == 4) && request.method == "DELETE")
        return {200, controller.stop_replays(parts.size() == 4 ? std::optional(std::pair(parts[2], parts[3]))
                                                               : std::nullopt)};
      if (parts.size() == 2) return error(405, "method_not_allowed", "use GET, POST or DELETE for /v1/replays");
      if (parts.size() == 4) return error(405, "method_not_allowed", "use DELETE for /v1/replays/{src}/{dst}");
      return error(404, "not_found", fmt::format("unknown path {}", printable(request.target, 200)));
    }
    if (parts.size() >= 2 && parts[1] == "runs") {
      if (parts.size() == 2 && request.method == "GET") return {200, controller.runs()};
      if (parts.size() == 2 && request.method == "POST")
        return {202, controller.start_run(parse_run_request(request.body))};
      if (parts.size() == 3 && request.method == "GET") return {200, controller.run_status(parts[2])};
      if (parts.size() == 3 && request.method == "DELETE") return {200, controller.abort_run(parts[2])};
      if (parts.size() == 2) return error(405, "method_not_allowed", "use GET or POST for /v1/runs");
      if (parts.size() == 3) return error(405, "method_not_allowed", "use GET or DELETE for /v1/runs/{id}");
      return error(404, "not_found", fmt::format("unknown path {}", printable(request.target, 200)));
    }
    if (parts.size() == 2 && parts[1] == "windows") {
      if (request.method != "GET") return error(405, "method_not_allowed", "use GET for /v1/windows");
      return {200, controller.windows(60.0)};
    }
    if (parts.size() == 2 && parts[1] == "shutdown") {
      if (request.method != "POST") return error(405, "method_not_allowed", "use POST for /v1/shutdown");
      return {200, controller.shutdown()};
    }
    return error(404, "not_found", fmt::format("unknown path {}", printable(request.target, 200)));
  } catch (const ApiError& e) {
    return error(e.status(), e.code(), e.what(), e.field());
  } catch (const std::exception& e) {
    return error(500, "internal", e.what());
  } catch (...) {
    return error(500, "internal", "unknown exception");
  }
}

}  // namespace wanlab::api
