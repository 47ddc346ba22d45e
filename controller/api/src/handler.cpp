#include "wanlab/api/handler.hpp"

#include <fmt/format.h>

namespace wanlab::api {
namespace {

Response error(int status, const std::string& code, const std::string& message, const std::string& field = {}) {
  nlohmann::json e = {{"code", code}, {"message", message}};
  if (!field.empty()) e["field"] = field;
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
    throw ApiError(400, "bad_request", fmt::format("{}: expected a string with a unit, got {}", name, v.dump()), name);
  auto p = parse(v.get<std::string>());
  if (!p) throw ApiError(400, "bad_request", fmt::format("{}: {}", name, p.error), name);
  return p.value;
}

}  // namespace

LinkChange parse_link_change(const std::string& body) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(body);
  } catch (const nlohmann::json::parse_error& e) {
    throw ApiError(400, "bad_json", fmt::format("body is not JSON: {}", e.what()));
  }
  if (!j.is_object()) throw ApiError(400, "bad_request", "body must be a JSON object");
  static const std::vector<std::string> known = {"delay", "jitter", "loss", "rate", "queue"};
  for (const auto& [k, _] : j.items())
    if (std::find(known.begin(), known.end(), k) == known.end())
      throw ApiError(400, "bad_request", fmt::format("unknown field '{}'; known: delay, jitter, loss, rate, queue", k), k);
  LinkChange c;
  c.delay = field(j, "delay", &parse_duration);
  c.jitter = field(j, "jitter", &parse_duration);
  c.loss = field(j, "loss", &parse_percent);
  c.rate = field(j, "rate", &parse_rate);
  c.queue = field(j, "queue", &parse_queue_limit);
  if (c.rate && c.rate->bps == 0) throw ApiError(400, "bad_request", "rate: must be positive", "rate");
  if (c.empty()) throw ApiError(400, "bad_request", "nothing to change: give delay, jitter, loss, rate or queue");
  return c;
}

Response handle(const Request& request, Controller& controller) {
  try {
    const auto parts = split_path(request.target);
    if (parts.empty() || parts[0] != "v1")
      return error(404, "not_found", fmt::format("unknown path {} (this controller speaks /v1)", request.target));
    if (parts.size() == 2 && parts[1] == "status") {
      if (request.method != "GET") return error(405, "method_not_allowed", "use GET for /v1/status");
      return {200, controller.status()};
    }
    if (parts.size() == 4 && parts[1] == "links") {
      if (request.method != "POST") return error(405, "method_not_allowed", "use POST for /v1/links/{src}/{dst}");
      return {200, controller.set_link(parts[2], parts[3], parse_link_change(request.body))};
    }
    if (parts.size() == 2 && parts[1] == "shutdown") {
      if (request.method != "POST") return error(405, "method_not_allowed", "use POST for /v1/shutdown");
      return {200, controller.shutdown()};
    }
    return error(404, "not_found", fmt::format("unknown path {}", request.target));
  } catch (const ApiError& e) {
    return error(e.status(), e.code(), e.what(), e.field());
  } catch (const std::exception& e) {
    return error(500, "internal", e.what());
  }
}

}  // namespace wanlab::api
