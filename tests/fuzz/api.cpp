// The control API's request handling (api::handle) against a fake controller that
// answers like the daemon's LabController does (unknown DCs, links, replays and runs
// named in its errors; the request's fields echoed in its results), then the response as
// the server writes it (Response::body.dump()). handle() must not throw; every response
// has a 2xx-5xx status and serializes.
// Input: "METHOD\nTARGET\nBODY" (the body is everything after the second newline).
// Seeds: tests/fuzz/seeds/api/*.http, a request per file.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "fuzz_support.hpp"
#include "wanlab/api/handler.hpp"

using namespace wanlab;

namespace {

class FakeLab : public api::Controller {
 public:
  nlohmann::json status() override { return {{"lab", "fuzz"}, {"dcs", {"use", "euw", "usw"}}}; }

  nlohmann::json set_link(const std::string& src, const std::string& dst, const api::LinkChange& c) override {
    check_link(src, dst);
    nlohmann::json j{{"src", src}, {"dst", dst}};
    if (c.delay) j["delay"] = to_string(*c.delay);
    if (c.jitter) j["jitter"] = to_string(*c.jitter);
    if (c.loss) j["loss"] = to_string(*c.loss);
    if (c.rate) j["rate"] = to_string(*c.rate);
    return j;
  }
  nlohmann::json shutdown() override { return {{"removed_namespaces", 3}}; }

  nlohmann::json start_replay(const api::ReplayRequest& r) override {
    check_link(r.src, r.dst);
    nlohmann::json j{{"link", r.src + "->" + r.dst}, {"trace", r.trace}, {"format", r.format}};
    if (r.mode) j["mode"] = replay::to_string(*r.mode);
    if (r.window) j["window"] = to_string(*r.window);
    return j;
  }
  nlohmann::json replays() override { return {{"replays", nlohmann::json::array()}}; }
  nlohmann::json stop_replays(const std::optional<std::pair<std::string, std::string>>& link) override {
    if (link) {
      check_link(link->first, link->second);
      throw api::ApiError(404, "no_replay", fmt::format("no trace is replaying on link {}->{}", link->first, link->second));
    }
    return {{"stopped", nlohmann::json::array()}};
  }

  nlohmann::json start_run(const api::RunRequest& r) override {
    nlohmann::json j{{"run", "run-1"}, {"scenario", r.scenario}, {"out", r.out}};
    if (r.connections) j["connections"] = *r.connections;
    if (r.policy) j["policy"] = *r.policy;
    return j;
  }
  nlohmann::json runs() override { return {{"runs", nlohmann::json::array()}}; }
  nlohmann::json run_status(const std::string& id) override { return run(id); }
  nlohmann::json abort_run(const std::string& id) override { return run(id); }

 private:
  static bool known_dc(const std::string& name) { return name == "use" || name == "euw" || name == "usw"; }
  static void check_link(const std::string& src, const std::string& dst) {
    if (!known_dc(src)) throw api::ApiError(404, "unknown_dc", fmt::format("no DC named '{}' in lab fuzz", src), "src");
    if (!known_dc(dst)) throw api::ApiError(404, "unknown_dc", fmt::format("no DC named '{}' in lab fuzz", dst), "dst");
    if (src == dst) throw api::ApiError(404, "unknown_link", fmt::format("lab fuzz has no WAN link {}->{}", src, dst));
  }
  static nlohmann::json run(const std::string& id) {
    if (id != "run-1") throw api::ApiError(404, "no_run", fmt::format("no run '{}'", id));
    return {{"run", id}, {"phase", "running"}};
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  api::Request request;
  const auto first = input.find('\n');
  request.method = std::string(input.substr(0, first));
  if (first != std::string_view::npos) {
    const auto rest = input.substr(first + 1);
    const auto second = rest.find('\n');
    request.target = std::string(rest.substr(0, second));
    if (second != std::string_view::npos) request.body = std::string(rest.substr(second + 1));
  }
  FakeLab lab;
  const api::Response response = api::handle(request, lab);
  WANLAB_FUZZ_CHECK(response.status >= 200 && response.status <= 599, std::to_string(response.status));
  std::string written;
  try {
    written = response.body.dump() + "\n";  // what the server writes (server.cpp)
  } catch (const nlohmann::json::exception& e) {
    fuzz::fail("the response body does not serialize as the server writes it", e.what());
  }
  WANLAB_FUZZ_CHECK(nlohmann::json::parse(written) == response.body, written);
  return 0;
}
