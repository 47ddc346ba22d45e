// Scenario runs through the control API: parse_run_request's checks (every error names its
// field), and the /v1/runs routes of api::handle against a fake controller and against one
// that does not run scenarios (the defaults: 501).
#include <catch2/catch.hpp>

#include <stdexcept>

#include "wanlab/api/handler.hpp"

using namespace wanlab;
using nlohmann::json;

namespace {

struct RunFake final : api::Controller {
  std::vector<std::string> calls;
  api::RunRequest last;
  json status() override { return {}; }
  json set_link(const std::string&, const std::string&, const api::LinkChange&) override { return {}; }
  json shutdown() override { return {}; }
  json start_run(const api::RunRequest& r) override {
    calls.push_back("start " + r.scenario);
    if (r.scenario == "/busy.json") throw api::ApiError(409, "busy", "a run is in progress");
    if (r.scenario == "/boom.json") throw std::runtime_error("disk on fire");
    last = r;
    return {{"run", "r1"}, {"phase", "waiting_for_agents"}};
  }
  json runs() override {
    calls.push_back("list");
    return {{"runs", json::array({{{"run", "r1"}}})}};
  }
  json run_status(const std::string& id) override {
    calls.push_back("status " + id);
    if (id != "r1") throw api::ApiError(404, "unknown_run", "no run " + id);
    return {{"run", id}, {"phase", "running"}};
  }
  json abort_run(const std::string& id) override {
    calls.push_back("abort " + id);
    if (id != "r1") throw api::ApiError(404, "unknown_run", "no run " + id);
    return {{"run", id}, {"phase", "failed"}};
  }
};

// A controller that does not run scenarios: the defaults answer 501.
struct PlainFake final : api::Controller {
  json status() override { return {}; }
  json set_link(const std::string&, const std::string&, const api::LinkChange&) override { return {}; }
  json shutdown() override { return {}; }
};

// The ApiError parse_run_request throws for `body` (fails the test when it throws none).
api::ApiError parse_error(const std::string& body) {
  try {
    (void)api::parse_run_request(body);
  } catch (const api::ApiError& e) {
    return e;
  }
  FAIL("expected an ApiError for " << body);
  return api::ApiError(0, "", "");
}

}  // namespace

TEST_CASE("run request: valid bodies", "[unit][api][run]") {
  SECTION("the two required fields") {
    const auto r = api::parse_run_request(R"({"scenario": "/s/t.json", "out": "/runs/one"})");
    CHECK(r.scenario == "/s/t.json");
    CHECK(r.out == "/runs/one");
    CHECK_FALSE(r.connections);
    CHECK_FALSE(r.policy);
  }
  SECTION("every field") {
    const auto r =
        api::parse_run_request(R"({"scenario": "/s/t.json", "out": "/o", "connections": 8, "policy": "fair"})");
    CHECK(r.scenario == "/s/t.json");
    CHECK(r.out == "/o");
    CHECK(r.connections == 8);
    CHECK(r.policy == std::optional<std::string>("fair"));
  }
  SECTION("connections at both ends of 1..64") {
    CHECK(api::parse_run_request(R"({"scenario": "/s", "out": "/o", "connections": 1})").connections == 1);
    CHECK(api::parse_run_request(R"({"scenario": "/s", "out": "/o", "connections": 64})").connections == 64);
  }
}

TEST_CASE("run request: every problem names its field", "[unit][api][run]") {
  SECTION("missing scenario or out") {
    auto e = parse_error(R"({"out": "/o"})");
    CHECK(e.status() == 400);
    CHECK(e.code() == "bad_request");
    CHECK(e.field() == "scenario");
    CHECK(std::string(e.what()) == "scenario: missing; give an absolute path");
    e = parse_error(R"({"scenario": "/s.json"})");
    CHECK(e.field() == "out");
    CHECK(std::string(e.what()) == "out: missing; give an absolute path");
    CHECK(parse_error("{}").field() == "scenario");
  }
  SECTION("relative and empty paths") {
    auto e = parse_error(R"({"scenario": "bench/s.json", "out": "/o"})");
    CHECK(e.status() == 400);
    CHECK(e.field() == "scenario");
    CHECK(std::string(e.what()) ==
          "scenario: 'bench/s.json' is not an absolute path (the controller does not share your working folder)");
    e = parse_error(R"({"scenario": "/s.json", "out": "runs/x"})");
    CHECK(e.field() == "out");
    CHECK_THAT(e.what(), Catch::Contains("'runs/x' is not an absolute path"));
    CHECK(parse_error(R"({"scenario": "", "out": "/o"})").field() == "scenario");
    CHECK(parse_error(R"({"scenario": "/s", "out": ""})").field() == "out");
    CHECK(parse_error(R"({"scenario": "./s.json", "out": "/o"})").field() == "scenario");
  }
  SECTION("paths that are not strings") {
    auto e = parse_error(R"({"scenario": 3, "out": "/o"})");
    CHECK(e.field() == "scenario");
    CHECK(std::string(e.what()) == "scenario: expected a string, got 3");
    CHECK(parse_error(R"({"scenario": "/s", "out": ["/o"]})").field() == "out");
    CHECK(parse_error(R"({"scenario": null, "out": "/o"})").field() == "scenario");
  }
  SECTION("unknown fields") {
    auto e = parse_error(R"({"scenario": "/s", "out": "/o", "conections": 4})");
    CHECK(e.status() == 400);
    CHECK(e.field() == "conections");
    CHECK(std::string(e.what()) == "unknown field 'conections'; known: scenario, out, connections, policy");
    // Unknown fields are reported before missing ones.
    CHECK(parse_error(R"({"scale": 2})").field() == "scale");
  }
  SECTION("connections out of range or of the wrong type") {
    for (const char* c : {"0", "65", "-1", "1000", "2.5", "4.0", "\"4\"", "true", "null", "[4]", "4294967297",
                          "-4294967295", "18446744073709551615", "9223372036854775807"}) {
      INFO("connections " << c);
      const auto e = parse_error(std::string(R"({"scenario": "/s", "out": "/o", "connections": )") + c + "}");
      CHECK(e.status() == 400);
      CHECK(e.code() == "bad_request");
      CHECK(e.field() == "connections");
      CHECK_THAT(e.what(), Catch::Contains("expected an integer in 1..64"));
    }
    CHECK(std::string(parse_error(R"({"scenario": "/s", "out": "/o", "connections": 65})").what()) ==
          "connections: 65: expected an integer in 1..64");
  }
  SECTION("policy must be a string") {
    auto e = parse_error(R"({"scenario": "/s", "out": "/o", "policy": 1})");
    CHECK(e.field() == "policy");
    CHECK(std::string(e.what()) == "policy: expected a string, got 1");
  }
  SECTION("bodies that are not JSON objects") {
    auto e = parse_error("{\"scenario\": ");
    CHECK(e.status() == 400);
    CHECK(e.code() == "bad_json");
    CHECK(e.field().empty());
    e = parse_error(R"(["/s", "/o"])");
    CHECK(e.code() == "bad_request");
    CHECK(std::string(e.what()) == "body must be a JSON object");
    CHECK(parse_error("").code() == "bad_json");
  }
}

TEST_CASE("run API routes", "[unit][api][run]") {
  RunFake c;
  SECTION("POST starts a run: 202 with the controller's answer") {
    const auto r = api::handle({"POST", "/v1/runs", R"({"scenario": "/s/t.json", "out": "/o", "connections": 4})"}, c);
    CHECK(r.status == 202);
    CHECK(r.body == json{{"run", "r1"}, {"phase", "waiting_for_agents"}});
    CHECK(c.calls == std::vector<std::string>{"start /s/t.json"});
    CHECK(c.last.out == "/o");
    CHECK(c.last.connections == 4);
    CHECK_FALSE(c.last.policy);
  }
  SECTION("a bad body is a 400 naming the field, and the controller is not called") {
    const auto r = api::handle({"POST", "/v1/runs", R"({"scenario": "s.json", "out": "/o"})"}, c);
    CHECK(r.status == 400);
    CHECK(r.body["error"]["code"] == "bad_request");
    CHECK(r.body["error"]["field"] == "scenario");
    CHECK(c.calls.empty());
    const auto j = api::handle({"POST", "/v1/runs", "not json"}, c);
    CHECK(j.status == 400);
    CHECK(j.body["error"]["code"] == "bad_json");
    CHECK_FALSE(j.body["error"].contains("field"));
    CHECK(c.calls.empty());
  }
  SECTION("the controller's errors come back as they are") {
    auto r = api::handle({"POST", "/v1/runs", R"({"scenario": "/busy.json", "out": "/o"})"}, c);
    CHECK(r.status == 409);
    CHECK(r.body == json{{"error", {{"code", "busy"}, {"message", "a run is in progress"}}}});
    r = api::handle({"POST", "/v1/runs", R"({"scenario": "/boom.json", "out": "/o"})"}, c);
    CHECK(r.status == 500);
    CHECK(r.body == json{{"error", {{"code", "internal"}, {"message", "disk on fire"}}}});
  }
  SECTION("GET lists every run") {
    const auto r = api::handle({"GET", "/v1/runs", ""}, c);
    CHECK(r.status == 200);
    CHECK(r.body == json{{"runs", json::array({{{"run", "r1"}}})}});
    CHECK(c.calls == std::vector<std::string>{"list"});
    // A trailing slash and a query string name the same resource.
    CHECK(api::handle({"GET", "/v1/runs/", ""}, c).status == 200);
    CHECK(api::handle({"GET", "/v1/runs?all=1", ""}, c).status == 200);
    CHECK(c.calls == std::vector<std::string>{"list", "list", "list"});
  }
  SECTION("GET one run") {
    auto r = api::handle({"GET", "/v1/runs/r1", ""}, c);
    CHECK(r.status == 200);
    CHECK(r.body == json{{"run", "r1"}, {"phase", "running"}});
    r = api::handle({"GET", "/v1/runs/r9", ""}, c);
    CHECK(r.status == 404);
    CHECK(r.body["error"]["code"] == "unknown_run");
    CHECK(r.body["error"]["message"] == "no run r9");
    CHECK(c.calls == std::vector<std::string>{"status r1", "status r9"});
  }
  SECTION("DELETE aborts one run") {
    auto r = api::handle({"DELETE", "/v1/runs/r1", ""}, c);
    CHECK(r.status == 200);
    CHECK(r.body == json{{"run", "r1"}, {"phase", "failed"}});
    CHECK(api::handle({"DELETE", "/v1/runs/r2", ""}, c).status == 404);
    CHECK(c.calls == std::vector<std::string>{"abort r1", "abort r2"});
  }
  SECTION("wrong methods: 405 naming the allowed ones, nothing called") {
    for (const char* m : {"PUT", "DELETE", "PATCH"}) {
      INFO(m);
      const auto r = api::handle({m, "/v1/runs", "{}"}, c);
      CHECK(r.status == 405);
      CHECK(r.body == json{{"error", {{"code", "method_not_allowed"}, {"message", "use GET or POST for /v1/runs"}}}});
    }
    for (const char* m : {"POST", "PUT"}) {
      INFO(m);
      const auto r = api::handle({m, "/v1/runs/r1", "{}"}, c);
      CHECK(r.status == 405);
      CHECK(r.body["error"]["message"] == "use GET or DELETE for /v1/runs/{id}");
    }
    CHECK(c.calls.empty());
  }
  SECTION("deeper paths are unknown") {
    const auto r = api::handle({"GET", "/v1/runs/r1/summary", ""}, c);
    CHECK(r.status == 404);
    CHECK(r.body["error"]["code"] == "not_found");
    CHECK(r.body["error"]["message"] == "unknown path /v1/runs/r1/summary");
    CHECK(c.calls.empty());
  }
}

TEST_CASE("run API: a controller that does not run scenarios answers 501", "[unit][api][run]") {
  PlainFake c;
  const json not_implemented = {
      {"error", {{"code", "not_implemented"}, {"message", "this controller does not run scenarios"}}}};
  for (const api::Request& req :
       {api::Request{"GET", "/v1/runs", ""}, api::Request{"POST", "/v1/runs", R"({"scenario": "/s", "out": "/o"})"},
        api::Request{"GET", "/v1/runs/r1", ""}, api::Request{"DELETE", "/v1/runs/r1", ""}}) {
    INFO(req.method << " " << req.target);
    const auto r = api::handle(req, c);
    CHECK(r.status == 501);
    CHECK(r.body == not_implemented);
  }
  // The body is checked before the controller is asked.
  const auto r = api::handle({"POST", "/v1/runs", R"({"out": "/o"})"}, c);
  CHECK(r.status == 400);
  CHECK(r.body["error"]["field"] == "scenario");
}
