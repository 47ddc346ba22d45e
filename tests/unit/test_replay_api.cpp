// Trace replay through the control API: pure handlers against a fake controller, the
// status JSON of a replay, and how an outage (rate 0) maps onto the kernel backend.
#include <catch2/catch.hpp>

#include "wanlab/api/handler.hpp"
#include "wanlab/api/lab_controller.hpp"
#include "wanlab/lab/wan_tc.hpp"
#include "wanlab/netlink/netlink.hpp"

using namespace wanlab;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

struct ReplayFake final : api::Controller {
  std::vector<std::string> calls;
  api::ReplayRequest last;
  nlohmann::json status() override { return {}; }
  nlohmann::json set_link(const std::string&, const std::string&, const api::LinkChange&) override { return {}; }
  nlohmann::json shutdown() override { return {}; }
  nlohmann::json start_replay(const api::ReplayRequest& r) override {
    calls.push_back("start " + r.src + "->" + r.dst);
    if (r.src == "nope") throw api::ApiError(404, "unknown_dc", "no DC named 'nope'", "src");
    last = r;
    return {{"link", r.src + ":" + r.dst}, {"state", "running"}};
  }
  nlohmann::json replays() override {
    calls.push_back("list");
    return {{"replays", nlohmann::json::array()}};
  }
  nlohmann::json stop_replays(const std::optional<std::pair<std::string, std::string>>& link) override {
    calls.push_back(link ? "stop " + link->first + "->" + link->second : "stop all");
    return {{"stopped", nlohmann::json::array()}};
  }
};

// A controller that does not replay: the defaults answer 501.
struct PlainFake final : api::Controller {
  nlohmann::json status() override { return {}; }
  nlohmann::json set_link(const std::string&, const std::string&, const api::LinkChange&) override { return {}; }
  nlohmann::json shutdown() override { return {}; }
};

api::Response post(ReplayFake& c, const std::string& body) {
  return api::handle({"POST", "/v1/replays", body}, c);
}

}  // namespace

TEST_CASE("replay API: start, list, stop", "[unit][api][replay]") {
  ReplayFake c;
  SECTION("start with every field") {
    auto r = post(c, R"({"link": "use:euw", "trace": "/tmp/t.csv", "mode": "loop"})");
    CHECK(r.status == 200);
    CHECK(r.body["state"] == "running");
    CHECK(c.calls.back() == "start use->euw");
    CHECK(c.last.trace == "/tmp/t.csv");
    CHECK(c.last.mode == replay::EndMode::loop);
    CHECK(c.last.format == "csv");
    r = post(c, R"({"link": "euw:use", "trace": "/tmp/t.mahi", "format": "mahimahi", "window": "50ms"})");
    CHECK(r.status == 200);
    CHECK(c.last.format == "mahimahi");
    CHECK(c.last.window == 50ms);
    CHECK_FALSE(c.last.mode);
  }
  SECTION("list and stop") {
    CHECK(api::handle({"GET", "/v1/replays", ""}, c).body.contains("replays"));
    CHECK(api::handle({"DELETE", "/v1/replays", ""}, c).status == 200);
    CHECK(c.calls.back() == "stop all");
    CHECK(api::handle({"DELETE", "/v1/replays/use/euw", ""}, c).status == 200);
    CHECK(c.calls.back() == "stop use->euw");
  }
  SECTION("bad requests name the field") {
    auto field_of = [&](const std::string& body) {
      auto r = post(c, body);
      CHECK(r.status == 400);
      return r.body["error"].value("field", "");
    };
    CHECK(field_of(R"({"trace": "/t.csv"})") == "link");
    CHECK(field_of(R"({"link": "use-euw", "trace": "/t.csv"})") == "link");
    CHECK(field_of(R"({"link": "use:", "trace": "/t.csv"})") == "link");
    CHECK(field_of(R"({"link": "a:b:c", "trace": "/t.csv"})") == "link");
    CHECK(field_of(R"({"link": 5, "trace": "/t.csv"})") == "link");
    CHECK(field_of(R"({"link": "use:euw"})") == "trace");
    CHECK(field_of(R"({"link": "use:euw", "trace": "traces/t.csv"})") == "trace");
    CHECK(field_of(R"({"link": "use:euw", "trace": "/t.csv", "mode": "forever"})") == "mode");
    CHECK(field_of(R"({"link": "use:euw", "trace": "/t.csv", "format": "pcap"})") == "format");
    CHECK(field_of(R"({"link": "use:euw", "trace": "/t.csv", "window": "50ms"})") == "window");
    CHECK(field_of(R"({"link": "use:euw", "trace": "/t.mahi", "format": "mahimahi", "window": "1.5ms"})") == "window");
    CHECK(field_of(R"({"link": "use:euw", "trace": "/t.csv", "speed": 2})") == "speed");
    auto r = post(c, R"({"link": "use:euw", "trace": "relative.csv"})");
    CHECK_THAT(r.body["error"]["message"].get<std::string>(), Contains("not an absolute path"));
    CHECK(post(c, "{not json").body["error"]["code"] == "bad_json");
    CHECK(post(c, "[1]").status == 400);
    CHECK(c.calls.empty());  // nothing bad reached the controller
  }
  SECTION("methods, paths, controller errors") {
    CHECK(api::handle({"PUT", "/v1/replays", ""}, c).status == 405);
    CHECK(api::handle({"POST", "/v1/replays/use/euw", ""}, c).status == 405);
    CHECK(api::handle({"DELETE", "/v1/replays/use", ""}, c).status == 404);
    auto r = post(c, R"({"link": "nope:euw", "trace": "/t.csv"})");
    CHECK(r.status == 404);
    CHECK(r.body["error"]["field"] == "src");
  }
  SECTION("a controller that does not replay answers 501") {
    PlainFake p;
    CHECK(api::handle({"GET", "/v1/replays", ""}, p).status == 501);
    CHECK(api::handle({"POST", "/v1/replays", R"({"link": "a:b", "trace": "/t.csv"})"}, p).status == 501);
    CHECK(api::handle({"DELETE", "/v1/replays", ""}, p).status == 501);
  }
}

TEST_CASE("replay status JSON: position, next step, lateness", "[unit][api][replay]") {
  const auto trace = replay::parse_trace("#@ mode=loop end=9s\ntime,rate\n0s,50Mbit\n3s,10Mbit\n6s,30Mbit\n", "t.csv");
  replay::ReplayProgress p;
  p.start = 100s;
  p.last = replay::Due{1, 2, 21s};
  p.next = replay::Due{2, 2, 24s};
  p.applied = 8;
  p.lateness = {8, 52us, 180us, 250us};
  p.apply_time = {8, 12us, 40us, 50us};
  p.wake_time = {8, 40us, 140us, 200us};
  const auto j = api::replay_status_json(p, trace, 100s + 22500ms);
  CHECK(j["state"] == "running");
  CHECK(j["mode"] == "loop");
  CHECK(j["step"] == 2);  // 1-based
  CHECK(j["steps"] == 3);
  CHECK(j["loops"] == 2);
  CHECK(j["line"] == 4);
  CHECK(j["elapsed_ms"].get<double>() == Approx(22500));
  CHECK(j["position_ms"].get<double>() == Approx(4500));
  CHECK(j["next_step_in_ms"].get<double>() == Approx(1500));
  CHECK(j["lateness_ms"]["p50"].get<double>() == Approx(0.052));
  CHECK(j["lateness_ms"]["p99"].get<double>() == Approx(0.18));
  CHECK(j["lateness_ms"]["max"].get<double>() == Approx(0.25));
  CHECK(j["apply_ms"]["p50"].get<double>() == Approx(0.012));
  CHECK(j["wake_ms"]["p50"].get<double>() == Approx(0.04));
  CHECK(j["wake_ms"]["max"].get<double>() == Approx(0.2));
  CHECK_FALSE(j.contains("last_error"));
  p.state = replay::ReplayState::finished;
  p.next.reset();
  p.last_error = "boom";
  const auto done = api::replay_status_json(p, trace, 200s);
  CHECK(done["next_step_in_ms"].is_null());
  CHECK_FALSE(done.contains("position_ms"));
  CHECK(done["last_error"] == "boom");
}

TEST_CASE("an outage (rate 0) on the kernel backend: the leaf drops everything", "[unit][replay]") {
  auto topo = core::parse_topology(nlohmann::json::parse(R"({
    "name": "t", "dcs": [{"name": "use", "nodes": 1}, {"name": "euw", "nodes": 1}],
    "wan": [{"between": ["use", "euw"], "rtt": "20ms", "rate": "50Mbit", "jitter": "1ms"}]})"),
                                   "t.json", ".");
  auto& link = topo.links[0];
  const auto normal = lab::wan_link_tc(topo, link);
  link.params.rate = Rate{0};
  const auto out = lab::wan_link_tc(topo, link);
  CHECK(out.htb.rate == lab::kOutageHtbRate);  // HTB needs a rate
  CHECK(out.htb.ceil == lab::kOutageHtbRate);
  CHECK(out.netem.loss == Probability{Probability::kOne});
  CHECK(out.netem.limit > 0);     // netem keeps its queue; loss drops what arrives
  CHECK(out.limit_packets == 0);  // a pfifo leaf (no netem) of limit 0 drops what arrives
  CHECK(out.netem.order_rate == Rate{});
  CHECK(out.classid.raw() == normal.classid.raw());
  CHECK(out.leaf.raw() == normal.leaf.raw());
  CHECK(lab::queue_limit_packets(topo, link) > 0);  // what status shows
  // The kernel messages build (HTB refuses rates below 8 bit/s).
  CHECK_NOTHROW(netlink::build_htb_class(3, lab::kWanRootQdisc, out.classid, out.htb, false));
  CHECK_NOTHROW(netlink::build_pfifo_qdisc(3, out.classid, out.leaf, out.limit_packets, false));
  // What was queued before the outage leaves within a millisecond.
  CHECK(serialization_time(Bytes{1514ULL * out.netem.limit}, lab::kOutageHtbRate) < 1ms);
}
