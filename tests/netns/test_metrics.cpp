// /metrics on a real lab: `up --metrics` serves the Prometheus text over TCP, its link byte
// counter grows while iperf3 crosses the WAN, and the Unix socket's GET /metrics agrees.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "process.hpp"
#include "wanlab/api/metrics.hpp"
#include "wanlab/api/server.hpp"
#include "wanlab/lab/state.hpp"

using namespace wanlab;
using namespace std::chrono_literals;
using test::run;

namespace {

std::string write_topology(const std::string& lab) {
  const auto path = std::filesystem::temp_directory_path() / (lab + ".json");
  nlohmann::json doc = {{"name", lab},
                        {"dcs", {{{"name", "use"}, {"nodes", 1}}, {{"name", "euw"}, {"nodes", 1}}}},
                        {"wan", {{{"between", {"use", "euw"}}, {"rtt", "20ms"}, {"rate", "100Mbit"}}}}};
  std::ofstream(path) << doc.dump(2);
  return path.string();
}

std::string exec(const std::string& lab, const std::string& node, const std::string& cmd) {
  return test::wanlab() + " exec --lab " + lab + " " + node + " -- " + cmd;
}

double link_bytes(const api::ParsedMetrics& m, const char* src, const char* dst) {
  const auto* s = m.find("wanlab_link_bytes_total", {{"src", src}, {"dst", dst}});
  REQUIRE(s);
  return s->value;
}

}  // namespace

TEST_CASE("up --metrics: the link byte counter grows under iperf3; the token guards other addresses",
          "[netns][metrics]") {
  const std::string lab = "wlm-metrics";
  const auto file = write_topology(lab);
  const std::string at = "127.0.0.1:47461";
  run(test::wanlab() + " down " + lab);

  // Not loopback without a token: refused before anything is built.
  const auto refused = run(test::wanlab() + " up " + file + " --metrics 0.0.0.0:47461");
  CHECK(refused.code == 2);
  CHECK_THAT(refused.out, Catch::Contains("not a loopback address") && Catch::Contains("--token"));

  auto up = run(test::wanlab() + " up " + file + " --backend userspace --metrics " + at);
  INFO(up.out);
  REQUIRE(up.code == 0);
  struct Down {
    std::string lab;
    ~Down() { run(test::wanlab() + " down " + lab); }
  } down{lab};

  const auto before_reply = api::http_get(at, "/metrics");
  REQUIRE(before_reply.status == 200);
  CHECK(before_reply.content_type == api::kMetricsContentType);
  const auto before = api::parse_metrics_text(before_reply.body);
  CHECK(before.types.at("wanlab_link_bytes_total") == "counter");
  CHECK(before.find("wanlab_link_rate_bytes_per_second", {{"src", "use"}, {"dst", "euw"}})->value == 12'500'000);
  CHECK(before.find("wanlab_link_delay_seconds", {{"src", "use"}, {"dst", "euw"}})->value == Approx(0.01));
  CHECK(before.find("wanlab_engine_release_lateness_seconds_count"));
  CHECK(before.find("wanlab_run_active")->value == 0);
  // The control API stays on the Unix socket.
  CHECK(api::http_get(at, "/v1/status").status == 404);

  REQUIRE(run(exec(lab, "euw-0", "iperf3 -s -D -1 -p 5301")).code == 0);
  std::this_thread::sleep_for(300ms);
  const auto iperf = run(exec(lab, "use-0", "iperf3 -c 198.18.4.2 -p 5301 -t 2 -J"));
  INFO(iperf.out.substr(0, 2000));
  REQUIRE(iperf.code == 0);
  const auto after = api::parse_metrics_text(api::http_get(at, "/metrics").body);
  const double sent = link_bytes(after, "use", "euw") - link_bytes(before, "use", "euw");
  const auto iperf_json = nlohmann::json::parse(iperf.out.substr(iperf.out.find('{')));
  const double payload = iperf_json["end"]["sum_sent"]["bytes"].get<double>();
  INFO("link bytes " << sent << ", iperf3 sent " << payload);
  // Every payload byte crossed the link, with its headers: at least as many bytes.
  CHECK(sent >= 0.95 * payload);
  CHECK(sent > 1e6);
  // ACKs went back the other way.
  CHECK(link_bytes(after, "euw", "use") > link_bytes(before, "euw", "use"));
  CHECK(after.find("wanlab_engine_release_lateness_seconds_count")->value >
        before.find("wanlab_engine_release_lateness_seconds_count")->value);

  // The same text on the control socket.
  const auto unix_reply = api::call(lab::socket_path(lab), "GET", "/metrics");
  CHECK(unix_reply.status == 200);
  CHECK(unix_reply.content_type == api::kMetricsContentType);
  CHECK(api::parse_metrics_text(unix_reply.text).find("wanlab_link_bytes_total", {{"src", "use"}, {"dst", "euw"}}));
}
