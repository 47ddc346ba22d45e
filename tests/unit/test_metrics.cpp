// /metrics: the Prometheus text the controller writes (names, units, escaping, histograms),
// the handler's route, and the TCP listener of `up --metrics` (loopback, token, paths).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "wanlab/api/handler.hpp"
#include "wanlab/api/metrics.hpp"
#include "wanlab/api/server.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/shaping/engine.hpp"

using namespace wanlab;
using namespace std::chrono_literals;

namespace {

core::Topology three_dc() { return core::load_topology(std::string(WANLAB_SOURCE_DIR) + "/topologies/three-dc.json"); }

// What UserspaceShaper::stats() reports, with a few releases in some buckets.
std::vector<std::pair<std::string, std::uint64_t>> engine_stats() {
  std::vector<std::pair<std::string, std::uint64_t>> s = {
      {"rx_frames", 100}, {"forwarded", 90}, {"not_for_wan", 10}, {"releases", 90},
      {"release_late_ns_total", 900'000}, {"release_late_ns_max", 60'000}, {"rx_ring_dropped", 2},
      {"cpu_us", 1'500'000}, {"sleeps", 7}};
  for (std::size_t i = 0; i < shaping::kReleaseLateBoundsNs.size(); ++i)
    s.emplace_back(i + 1 < shaping::kReleaseLateBoundsNs.size()
                       ? "release_late_le_" + std::to_string(shaping::kReleaseLateBoundsNs[i]) + "ns"
                       : std::string("release_late_le_inf"),
                   i == 0 ? 80 : i == 4 ? 10 : 0);
  return s;
}

std::string lab_text(const core::Topology& topo, const std::string& backend) {
  std::vector<shaping::LinkCounters> counters(topo.links.size());
  for (std::size_t i = 0; i < counters.size(); ++i) {
    counters[i].bytes = 1000 * (i + 1);
    counters[i].packets = 10 * (i + 1);
    counters[i].payload_bytes = 900 * (i + 1);
    counters[i].dropped_queue = 3;
    counters[i].dropped_loss = 4;
    counters[i].drops = 7;
    counters[i].queued_packets = 5;
  }
  api::MetricsText out;
  api::write_link_metrics(out, topo, counters, backend, 0.5);
  api::write_engine_metrics(out, engine_stats());
  return out.take();
}

struct MetricsController : api::Controller {
  std::string text = "# HELP x_total X.\n# TYPE x_total counter\nx_total 1\n";
  nlohmann::json status() override { return {{"lab", "m"}}; }
  nlohmann::json set_link(const std::string&, const std::string&, const api::LinkChange&) override { return {}; }
  nlohmann::json shutdown() override { return {}; }
  std::string metrics() override { return text; }
};
struct PlainController : api::Controller {
  nlohmann::json status() override { return {}; }
  nlohmann::json set_link(const std::string&, const std::string&, const api::LinkChange&) override { return {}; }
  nlohmann::json shutdown() override { return {}; }
};

}  // namespace

TEST_CASE("metrics text: escaping, values and histograms read back", "[unit][metrics]") {
  api::MetricsText m;
  m.family("t_total", "counter", "A test.");
  m.sample({{"a", "quote\" back\\slash\nnewline"}}, 3);
  m.sample({{"a", "big"}}, 1e20);
  m.family("t_seconds", "histogram", "Times.");
  m.histogram({{"k", "v"}}, {0.001, 0.01, HUGE_VAL}, {2, 3, 1}, 0.05);
  const auto p = api::parse_metrics_text(m.text());
  CHECK(p.types.at("t_total") == "counter");
  CHECK(p.types.at("t_seconds") == "histogram");
  REQUIRE(p.find("t_total", {{"a", "quote\" back\\slash\nnewline"}}));
  CHECK(p.find("t_total", {{"a", "quote\" back\\slash\nnewline"}})->value == 3);
  CHECK(p.find("t_total", {{"a", "big"}})->value == 1e20);
  // Buckets are cumulative; the last is +Inf and equals the count.
  CHECK(p.find("t_seconds_bucket", {{"le", "0.001"}})->value == 2);
  CHECK(p.find("t_seconds_bucket", {{"le", "0.01"}})->value == 5);
  CHECK(p.find("t_seconds_bucket", {{"le", "+Inf"}})->value == 6);
  CHECK(p.find("t_seconds_count")->value == 6);
  CHECK(p.find("t_seconds_sum")->value == Approx(0.05));
  CHECK(m.text().find("le=\"+Inf\"") != std::string::npos);
}

TEST_CASE("metrics text: the parser names the line and the fault", "[unit][metrics]") {
  const std::string head = "# TYPE a gauge\n";
  auto error_of = [](const std::string& t) {
    try {
      api::parse_metrics_text(t);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error_of(head + "a{x=\"1} 2\n") == "metrics line 2: a: label x: value not terminated");
  CHECK(error_of(head + "a one\n") == "metrics line 2: a: 'one' is not a number");
  CHECK(error_of("b 1\n") == "metrics line 1: sample of b before its TYPE");
  CHECK(error_of(head + "a 1\na 2\n") == "metrics line 3: a: the same series twice");
  CHECK(error_of(head + head) == "metrics line 2: TYPE of a given twice");
  CHECK(error_of(head + "a 1") == "metrics line 2: the last line has no newline");
}

TEST_CASE("metrics: per-link and engine series follow Prometheus' conventions", "[unit][metrics]") {
  const auto topo = three_dc();
  const auto text = lab_text(topo, "userspace");
  const auto p = api::parse_metrics_text(text);
  // Every family has HELP and TYPE, the wanlab_ prefix, _total exactly on counters, and a
  // base unit where it has one (no ms, bits or percent).
  const std::regex name_re("^wanlab_[a-z_]+$");
  for (const auto& [name, type] : p.types) {
    INFO(name);
    CHECK(std::regex_match(name, name_re));
    CHECK(p.help.count(name));
    CHECK((type == "counter") == name.ends_with("_total"));
    for (const char* bad : {"_ms", "_bits", "_percent", "_milliseconds", "_kbytes"})
      CHECK(name.find(bad) == std::string::npos);
  }
  const auto& l0 = topo.links[0];
  const std::map<std::string, std::string> link0{{"src", topo.dcs[l0.src].name}, {"dst", topo.dcs[l0.dst].name}};
  REQUIRE(p.find("wanlab_link_bytes_total", link0));
  CHECK(p.find("wanlab_link_bytes_total", link0)->value == 1000);
  CHECK(p.find("wanlab_link_packets_total", link0)->value == 10);
  CHECK(p.find("wanlab_link_payload_bytes_total", link0)->value == 900);
  auto with = [](auto m, const char* k, const char* v) {
    m[k] = v;
    return m;
  };
  CHECK(p.find("wanlab_link_dropped_packets_total", with(link0, "reason", "queue"))->value == 3);
  CHECK(p.find("wanlab_link_dropped_packets_total", with(link0, "reason", "loss"))->value == 4);
  CHECK(p.find("wanlab_link_queue_packets", link0)->value == 5);
  CHECK(p.find("wanlab_link_rate_bytes_per_second", link0)->value == static_cast<double>(l0.params.rate.bps) / 8);
  CHECK(p.find("wanlab_link_delay_seconds", link0)->value ==
        Approx(std::chrono::duration<double>(l0.params.delay).count()));
  CHECK(p.find("wanlab_link_loss_ratio", link0)->value == Approx(l0.params.loss.fraction()));
  CHECK(p.find("wanlab_link_rate_scale")->value == 0.5);
  // One series per directed link.
  std::size_t bytes_series = 0;
  for (const auto& s : p.samples) bytes_series += s.name == "wanlab_link_bytes_total";
  CHECK(bytes_series == topo.links.size());
  // The engine's lateness histogram: 80 releases within 5 us, 10 more within 100 us.
  CHECK(p.types.at("wanlab_engine_release_lateness_seconds") == "histogram");
  CHECK(p.find("wanlab_engine_release_lateness_seconds_bucket", {{"le", "5e-06"}})->value == 80);
  CHECK(p.find("wanlab_engine_release_lateness_seconds_bucket", {{"le", "0.0001"}})->value == 90);
  CHECK(p.find("wanlab_engine_release_lateness_seconds_bucket", {{"le", "+Inf"}})->value == 90);
  CHECK(p.find("wanlab_engine_release_lateness_seconds_sum")->value == Approx(0.0009));
  CHECK(p.find("wanlab_engine_cpu_seconds_total")->value == 1.5);
  CHECK(p.find("wanlab_engine_ring_dropped_frames_total", {{"ring", "mtu"}})->value == 2);

  // The kernel backend cannot tell the two drop reasons apart, and has no engine.
  const auto k = api::parse_metrics_text(lab_text(topo, "kernel"));
  CHECK(k.find("wanlab_link_dropped_packets_total", with(link0, "reason", "queue_or_loss"))->value == 7);
  CHECK_FALSE(k.find("wanlab_link_dropped_packets_total", with(link0, "reason", "queue")));
}

TEST_CASE("metrics: promtool accepts the text", "[unit][metrics]") {
  if (::access("/usr/bin/promtool", X_OK) != 0) {
    WARN("SKIPPED: /usr/bin/promtool missing (Debian package prometheus; scripts/setup.sh installs it)");
    return;
  }
  const auto file = std::filesystem::temp_directory_path() / ("wanlab-metrics-" + std::to_string(::getpid()) + ".txt");
  std::ofstream(file) << lab_text(three_dc(), "userspace");
  const auto cmd = "/usr/bin/promtool check metrics < " + file.string() + " 2>&1";
  std::string out;
  if (FILE* f = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
    const int rc = ::pclose(f);
    INFO(out);
    CHECK(rc == 0);
  }
  std::filesystem::remove(file);
}

TEST_CASE("metrics: GET /metrics answers text, other methods and controllers refuse", "[unit][metrics][api]") {
  MetricsController c;
  auto r = api::handle({"GET", "/metrics", ""}, c);
  CHECK(r.status == 200);
  CHECK(r.content_type == api::kMetricsContentType);
  CHECK(r.text == c.text);
  CHECK(api::handle({"GET", "/metrics?name=x", ""}, c).status == 200);
  CHECK(api::handle({"POST", "/metrics", ""}, c).status == 405);
  PlainController plain;
  CHECK(api::handle({"GET", "/metrics", ""}, plain).status == 501);
}

TEST_CASE("metrics over TCP: loopback only without a token, /metrics only, bearer token", "[unit][metrics][api]") {
  MetricsController c;
  boost::asio::io_context ioc;
  // Not loopback and no token: refused before listening.
  CHECK_THROWS_WITH(api::TcpServer(ioc, "0.0.0.0:0", c, "", {"/metrics"}),
                    Catch::Contains("not a loopback address") && Catch::Contains("needs a token"));
  CHECK_THROWS_AS(api::TcpServer(ioc, "127.0.0.1", c, "", {"/metrics"}), std::invalid_argument);

  api::TcpServer open(ioc, "127.0.0.1:0", c, "", {"/metrics"});
  api::TcpServer locked(ioc, "127.0.0.1:0", c, "s3cret", {"/metrics"});
  std::thread t([&] { ioc.run_for(5s); });
  const auto at = [](const api::TcpServer& s) { return "127.0.0.1:" + std::to_string(s.port()); };
  const auto r = api::http_get(at(open), "/metrics");
  CHECK(r.status == 200);
  CHECK(r.content_type == api::kMetricsContentType);
  CHECK(r.body == c.text);
  // The control API never leaves the Unix socket.
  CHECK(api::http_get(at(open), "/v1/status").status == 404);
  CHECK(api::http_get(at(open), "/v1/shutdown").status == 404);
  CHECK(api::http_get(at(locked), "/metrics").status == 401);
  CHECK(api::http_get(at(locked), "/metrics", "wrong!").status == 401);
  CHECK(api::http_get(at(locked), "/metrics", "s3cre").status == 401);
  CHECK(api::http_get(at(locked), "/metrics", "s3cret").status == 200);
  open.close();
  locked.close();
  ioc.stop();
  t.join();
}

TEST_CASE("control API over TCP: the whole API, every request with the token, on loopback too", "[unit][api][security]") {
  struct Recording : MetricsController {
    std::vector<std::string> links;
    nlohmann::json set_link(const std::string& src, const std::string& dst, const api::LinkChange&) override {
      links.push_back(src + "->" + dst);
      return {{"src", src}, {"dst", dst}};
    }
  } c;
  boost::asio::io_context ioc;
  CHECK_THROWS_WITH(api::TcpServer::control_api(ioc, "127.0.0.1:0", c, ""),
                    Catch::Contains("needs a token") && Catch::Contains("on loopback too"));
  CHECK_THROWS_AS(api::TcpServer::control_api(ioc, "nowhere:1", c, "t"), std::invalid_argument);
  auto server = api::TcpServer::control_api(ioc, "127.0.0.1:0", c, "s3cret");
  api::TcpServer metrics(ioc, "127.0.0.1:0", c, "s3cret", {"/metrics"});
  std::thread t([&] { ioc.run_for(5s); });
  api::Endpoint at{{}, "127.0.0.1:" + std::to_string(server->port()), "s3cret"};
  const auto s = api::call(at, "GET", "/v1/status", {}, 5s);
  CHECK(s.status == 200);
  CHECK(s.body["lab"] == "m");
  const auto l = api::call(at, "POST", "/v1/links/use/euw", R"({"delay": "40ms"})", 5s);
  CHECK(l.status == 200);
  CHECK(c.links == std::vector<std::string>{"use->euw"});
  for (const std::string token : {"", "wrong!", "s3cre", "s3cret!"}) {
    api::Endpoint bad = at;
    bad.token = token;
    CHECK(api::call(bad, "GET", "/v1/status", {}, 5s).status == 401);
    CHECK(api::call(bad, "POST", "/v1/links/use/euw", R"({"delay": "1ms"})", 5s).status == 401);
  }
  CHECK(c.links.size() == 1);
  // The metrics server stays what it was: /metrics only.
  CHECK(api::call(api::Endpoint{{}, "127.0.0.1:" + std::to_string(metrics.port()), "s3cret"}, "GET", "/v1/status", {}, 5s)
            .status == 404);
  // Nothing listens: the error names the address.
  server->close();
  CHECK_THROWS_WITH(api::call(at, "GET", "/v1/status", {}, 2s), Catch::Contains("the controller's API at 127.0.0.1:"));
  metrics.close();
  ioc.stop();
  t.join();
}
