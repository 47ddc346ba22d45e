// The dashboard's server without a browser: ticks computed from two scrapes, the page's
// files compiled in, and the HTTP routes against a controller answering on a Unix socket.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <filesystem>
#include <thread>

#include "wanlab/api/handler.hpp"
#include "wanlab/api/server.hpp"
#include "wanlab/dashboard/dashboard.hpp"

using namespace wanlab;
using namespace std::chrono_literals;

namespace {

std::string metrics_with(double bytes, double queue, bool run) {
  std::string t =
      "# HELP wanlab_link_bytes_total b\n# TYPE wanlab_link_bytes_total counter\n"
      "wanlab_link_bytes_total{src=\"use\",dst=\"euw\"} " + std::to_string(bytes) + "\n"
      "# HELP wanlab_link_queue_packets q\n# TYPE wanlab_link_queue_packets gauge\n"
      "wanlab_link_queue_packets{src=\"use\",dst=\"euw\"} " + std::to_string(queue) + "\n"
      "# HELP wanlab_link_rate_bytes_per_second r\n# TYPE wanlab_link_rate_bytes_per_second gauge\n"
      "wanlab_link_rate_bytes_per_second{src=\"use\",dst=\"euw\"} 12500000\n"
      "# HELP wanlab_link_rate_scale s\n# TYPE wanlab_link_rate_scale gauge\nwanlab_link_rate_scale 0.5\n";
  if (run)
    t += "# HELP wanlab_run_info i\n# TYPE wanlab_run_info gauge\n"
         "wanlab_run_info{run=\"r-1\",scenario=\"s\",phase=\"running\"} 1\n"
         "# HELP wanlab_run_iterations i\n# TYPE wanlab_run_iterations gauge\nwanlab_run_iterations{run=\"r-1\"} 5\n"
         "# HELP wanlab_run_worker_iteration w\n# TYPE wanlab_run_worker_iteration gauge\n"
         "wanlab_run_worker_iteration{run=\"r-1\",worker=\"0\",dc=\"use\",stage=\"0\"} 2\n"
         "wanlab_run_worker_iteration{run=\"r-1\",worker=\"1\",dc=\"euw\",stage=\"1\"} 1\n";
  return t;
}

struct FakeLab : api::Controller {
  double bytes = 0;
  nlohmann::json status() override {
    return {{"lab", "fake"},
            {"dcs", {{{"name", "use"}, {"nodes", nlohmann::json::array()}}, {{"name", "euw"}, {"nodes", nlohmann::json::array()}}}},
            {"links", {{{"src", "use"}, {"dst", "euw"}}}}};
  }
  nlohmann::json set_link(const std::string&, const std::string&, const api::LinkChange&) override { return {}; }
  nlohmann::json shutdown() override { return {}; }
  std::string metrics() override {
    bytes += 1.25e6;  // 10 Mbit per scrape
    return metrics_with(bytes, 7, false);
  }
  nlohmann::json windows(double) override {
    return {{"run", "r-1"},
            {"now_s", 12.5},
            {"windows",
             {{{"src", "use"}, {"dst", "euw"}, {"pipeline", 0}, {"kind", "activation"}, {"iteration", 1},
               {"start_s", 11.0}, {"end_s", nullptr}, {"revoked", false}}}}};
  }
};

}  // namespace

TEST_CASE("dashboard tick: Mbit/s from two scrapes, the run's workers, the windows", "[unit][dashboard]") {
  const auto t = dashboard::make_tick(metrics_with(1e6, 3, true), metrics_with(3.5e6, 9, true), 2.0,
                                      {{"now_s", 4.0}, {"windows", nlohmann::json::array({{{"src", "use"}}})}}, 100);
  REQUIRE(t["links"].size() == 1);
  const auto& l = t["links"][0];
  CHECK(l["src"] == "use");
  CHECK(l["mbit_s"].get<double>() == Approx(10.0));  // 2.5 MB in 2 s
  CHECK(l["queue_packets"].get<double>() == 9);
  CHECK(l["rate_mbit_s"].get<double>() == Approx(50.0));  // 100 Mbit/s at scale 0.5
  CHECK(t["windows_now_s"] == 4.0);
  CHECK(t["windows"].size() == 1);
  REQUIRE(t["run"].is_object());
  CHECK(t["run"]["id"] == "r-1");
  CHECK(t["run"]["phase"] == "running");
  CHECK(t["run"]["iterations"] == 5);
  CHECK(t["run"]["workers"].size() == 2);
  CHECK(t["run"]["workers"][1]["dc"] == "euw");
  // The first tick has nothing to take a rate from.
  CHECK(dashboard::make_tick("", metrics_with(1e6, 3, false), 0, nlohmann::json::array(), 1)["links"][0]["mbit_s"] == 0);
  CHECK(dashboard::make_tick("", metrics_with(1e6, 3, false), 0, nlohmann::json::array(), 1)["run"].is_null());
}

TEST_CASE("dashboard: the page is compiled in and served; the lab and ticks come from the controller",
          "[unit][dashboard]") {
  REQUIRE(dashboard::asset("/"));
  CHECK(dashboard::asset("/")->first == "text/html");
  CHECK(dashboard::asset("/")->second.find("dashboard.js") != std::string::npos);
  REQUIRE(dashboard::asset("/dashboard.js"));
  CHECK(dashboard::asset("/dashboard.js")->second.find("EventSource") != std::string::npos);
  CHECK_FALSE(dashboard::asset("/nope"));

  const auto dir = std::filesystem::temp_directory_path() / ("wanlab-dash-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  FakeLab lab;
  boost::asio::io_context ioc;
  api::Server api_server(ioc, dir / "c.sock", lab, 2s);
  boost::asio::io_context dio;
  dashboard::DashboardOptions o;
  o.controller_socket = dir / "c.sock";
  o.listen = "127.0.0.1:0";
  o.interval = 100ms;
  std::thread api_thread([&] { ioc.run_for(8s); });
  CHECK_THROWS_WITH(dashboard::Dashboard(dio, {o.controller_socket, "0.0.0.0:0", "", 100ms}),
                    Catch::Contains("not a loopback address"));
  dashboard::Dashboard board(dio, o);
  std::thread dash_thread([&] { dio.run_for(6s); });
  const auto at = "127.0.0.1:" + std::to_string(board.port());
  const auto page = api::http_get(at, "/");
  CHECK(page.status == 200);
  CHECK(page.content_type == "text/html; charset=utf-8");
  const auto lab_doc = api::http_get(at, "/api/lab");
  CHECK(lab_doc.status == 200);
  CHECK(nlohmann::json::parse(lab_doc.body)["lab"] == "fake");
  std::this_thread::sleep_for(400ms);
  const auto tick = nlohmann::json::parse(api::http_get(at, "/api/tick").body);
  REQUIRE(tick["links"].size() == 1);
  CHECK(tick["links"][0]["mbit_s"].get<double>() > 0);
  CHECK(tick["windows"].size() == 1);
  CHECK(api::http_get(at, "/v1/shutdown").status == 404);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(api::http_get(at, "/api/wait?s=0.3").status == 200);
  CHECK(std::chrono::steady_clock::now() - t0 >= 250ms);
  board.close();
  api_server.close();
  dio.stop();
  ioc.stop();
  dash_thread.join();
  api_thread.join();
  std::filesystem::remove_all(dir);
}
