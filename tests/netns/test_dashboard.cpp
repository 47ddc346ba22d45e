// The dashboard in a real browser: `wanlab dashboard` on a lab with iperf3 traffic, loaded in
// headless Chromium (Debian's chromium); the page must show the lab's DCs and links and its
// throughput chart must fill. Skipped, saying so, where chromium is not installed.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "process.hpp"

using namespace wanlab;
using namespace std::chrono_literals;
using test::run;

namespace {

std::string chromium() {
  for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"})
    if (::access(c, X_OK) == 0) return c;
  return {};
}

// The number in attribute `attr` of the element with id `id` in `dom` (-1: not found).
double attribute(const std::string& dom, const std::string& id, const std::string& attr) {
  const std::regex re("id=\"" + id + "\"[^>]*" + attr + "=\"([0-9.eE+-]+)\"");
  std::smatch m;
  if (!std::regex_search(dom, m, re)) return -1;
  return std::stod(m[1].str());
}

}  // namespace

TEST_CASE("dashboard: headless Chromium sees the lab and its throughput chart fill under iperf3",
          "[netns][dashboard]") {
  const auto browser = chromium();
  if (browser.empty()) {
    WARN("SKIPPED: chromium is not installed (Debian package chromium; scripts/setup.sh installs it)");
    return;
  }
  const std::string lab = "wlm-dash";
  const auto file = std::filesystem::temp_directory_path() / (lab + ".json");
  std::ofstream(file) << nlohmann::json{{"name", lab},
                                        {"dcs", {{{"name", "use"}, {"nodes", 1}}, {{"name", "euw"}, {"nodes", 1}}}},
                                        {"wan", {{{"between", {"use", "euw"}}, {"rtt", "20ms"}, {"rate", "50Mbit"}}}}}
                             .dump();
  run(test::wanlab() + " down " + lab);
  auto up = run(test::wanlab() + " up " + file.string() + " --backend userspace");
  INFO(up.out);
  REQUIRE(up.code == 0);
  struct Down {
    std::string lab;
    pid_t dashboard = -1;
    ~Down() {
      if (dashboard > 0) {
        ::kill(dashboard, SIGTERM);
        ::waitpid(dashboard, nullptr, 0);
      }
      run(test::wanlab() + " down " + lab);
    }
  } down{lab};

  const std::string port = "47463";
  const auto log = std::filesystem::temp_directory_path() / (lab + "-dashboard.log");
  down.dashboard = ::fork();
  if (down.dashboard == 0) {
    std::freopen(log.c_str(), "w", stdout);
    std::freopen(log.c_str(), "a", stderr);
    ::execl(test::wanlab().c_str(), "wanlab", "dashboard", "--lab", lab.c_str(), "--listen",
            ("127.0.0.1:" + port).c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const auto profile = std::filesystem::temp_directory_path() / (lab + "-chromium");
  const std::string flags = " --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir=" +
                            profile.string() + " --window-size=1400,1600 ";
  // A first start of Chromium on a fresh machine builds its profile and font cache, which can
  // take longer than any fixed traffic span: do that before the traffic.
  run(browser + flags + "--dump-dom about:blank >/dev/null 2>&1");

  // Traffic for the whole page load: iperf3 at the link's rate from before the page opens
  // until after both page loads, stopped then (SIGTERM to `wanlab exec`, which is iperf3).
  REQUIRE(run(test::wanlab() + " exec --lab " + lab + " euw-0 -- iperf3 -s -D -1 -p 5311").code == 0);
  for (int i = 0; i < 50; ++i) {
    if (run(test::wanlab() + " exec --lab " + lab + " euw-0 -- ss -Hltn 'sport = :5311'").out.find("5311") !=
        std::string::npos)
      break;
    std::this_thread::sleep_for(100ms);
  }
  const auto client_log = std::filesystem::temp_directory_path() / (lab + "-iperf3.log");
  struct Client {
    pid_t pid = -1;
    void stop() {
      if (pid > 0) {
        ::kill(pid, SIGTERM);
        ::waitpid(pid, nullptr, 0);
        pid = -1;
      }
    }
    ~Client() { stop(); }
  } client;
  client.pid = ::fork();
  if (client.pid == 0) {
    std::freopen(client_log.c_str(), "w", stdout);
    std::freopen(client_log.c_str(), "a", stderr);
    ::execl(test::wanlab().c_str(), "wanlab", "exec", "--lab", lab.c_str(), "use-0", "--", "iperf3", "-c",
            "198.18.4.2", "-p", "5311", "-t", "120", "-i", "1", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  std::this_thread::sleep_for(2s);
  // The page holds its load event 6 s (?hold=6): --dump-dom then writes the DOM after six
  // ticks of events.
  const std::string url = "'http://127.0.0.1:" + port + "/?hold=6'";
  const auto dom = run(browser + flags + "--dump-dom " + url + " 2>/dev/null");
  const auto shot = std::filesystem::temp_directory_path() / (lab + "-dashboard.png");
  const auto screenshot = run(browser + flags + "--screenshot=" + shot.string() + " " + url);
  client.stop();
  INFO("iperf3 client: " << test::run("tail -c 2000 " + client_log.string()).out);
  INFO("dashboard log: " << test::run("cat " + log.string()).out);
  // The elements the checks read, as the page left them.
  std::string seen;
  for (const char* id : {"status", "ticks", "map", "throughput"}) {
    const auto at = dom.out.find(std::string("id=\"") + id + "\"");
    seen += "\n  " + (at == std::string::npos ? std::string(id) + ": missing" : dom.out.substr(at, 160));
  }
  INFO("page elements:" << seen);
  REQUIRE(dom.code == 0);
  CHECK(attribute(dom.out, "map", "data-dcs") == 2);
  CHECK(attribute(dom.out, "map", "data-links") == 2);
  CHECK(attribute(dom.out, "ticks", "data-ticks") >= 3);
  // The chart is not empty: samples above zero, and the peak near the link's 50 Mbit/s.
  CHECK(attribute(dom.out, "throughput", "data-points") >= 2);
  CHECK(attribute(dom.out, "throughput", "data-max") > 10);
  CHECK(attribute(dom.out, "throughput", "data-max") < 80);
  CHECK_THAT(dom.out, Catch::Contains("use → euw") || Catch::Contains("use \xE2\x86\x92 euw"));
  // The screenshot is kept for whoever looks at a failure.
  CHECK(screenshot.code == 0);
  CHECK(std::filesystem::exists(shot));
  std::error_code ec;
  std::filesystem::remove_all(profile, ec);
}
