// Strings from a bench folder in gnuplot scripts (cli/gnuplot_text.hpp): data, never script.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gnuplot_text.hpp"

using namespace wanlab::cli;
namespace fs = std::filesystem;

namespace {

// Runs gnuplot on `script` in `dir` (no shell); its exit status, or -1 without gnuplot.
int gnuplot(const fs::path& dir, const std::string& script) {
  std::string binary;
  for (const char* p : {"/usr/bin/gnuplot", "/usr/local/bin/gnuplot"})
    if (::access(p, X_OK) == 0) binary = p;
  if (binary.empty()) return -1;
  std::ofstream(dir / "t.gp") << script;
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::chdir(dir.c_str()) != 0) ::_exit(126);
    const int null_fd = ::open("/dev/null", O_WRONLY);
    ::dup2(null_fd, 1);
    ::dup2(null_fd, 2);
    ::execl(binary.c_str(), binary.c_str(), "t.gp", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

}  // namespace

TEST_CASE("gnuplot strings: single-quoted, quotes and lines joined in", "[unit][bench][security]") {
  CHECK(gnuplot_string("fair-k1: 1.234 s") == "'fair-k1: 1.234 s'");
  CHECK(gnuplot_string("it's") == R"('it' . "'" . 's')");
  CHECK(gnuplot_string("a\nb") == R"('a' . "\n" . 'b')");
  CHECK(gnuplot_string("`touch x`") == R"("'" . 'touch x' . "'")");
  CHECK(gnuplot_string("\n") == R"("\n")");
  CHECK(gnuplot_string("\x1b[2J\xff") == "'\\x1b[2J\\xff'");
  CHECK(gnuplot_string("") == "''");
}

TEST_CASE("gnuplot file names: no path, no quote", "[unit][bench][security]") {
  CHECK(gnuplot_file_part("fair-k1") == "fair-k1");
  CHECK(gnuplot_file_part("atlas_k4.v2") == "atlas_k4.v2");
  CHECK(gnuplot_file_part("../../etc/x") == "_._.._etc_x");
  CHECK(gnuplot_file_part("a' . system('id') . '") == "a__._system__id___.__");
  CHECK(gnuplot_file_part("") == "_");
}

TEST_CASE("gnuplot strings: a malicious title runs nothing in the real gnuplot", "[unit][bench][security]") {
  std::string tmpl = (fs::temp_directory_path() / "wanlab-gp-XXXXXX").string();
  REQUIRE(::mkdtemp(tmpl.data()));
  const fs::path dir = tmpl;
  const auto marker = dir / "pwned";
  // What a bench.json from elsewhere may hold as its scenario or a variant's name.
  const std::string hostile[] = {
      "'`touch " + marker.string() + "`'",
      "x`touch " + marker.string() + "`",
      "x\" . system(\"touch " + marker.string() + "\") . \"",
      "x' . system('touch " + marker.string() + "') . '",
      "line one\n`touch " + marker.string() + "`",
  };
  for (const auto& h : hostile) {
    INFO(h);
    const std::string script = "set terminal dumb\nset title " + gnuplot_string(h) + "\nset multiplot layout 1,1 title " +
                               gnuplot_string(h) + "\nset ytics (" + gnuplot_string(h) + " 0)\nprint " +
                               gnuplot_string(h) + "\nunset multiplot\n";
    const int rc = gnuplot(dir, script);
    if (rc == -1) {
      WARN("gnuplot is not installed: the script is not run");
      break;
    }
    CHECK(rc == 0);
    CHECK_FALSE(fs::exists(marker));
  }
  // The check can fail: the old quoting (double quotes, backslash escapes) ran the command.
  if (gnuplot(dir, "print \"x`touch " + marker.string() + "`\"\n") != -1) CHECK(fs::exists(marker));
  fs::remove_all(dir);
}

namespace {
// Runs the wanlab binary with `args` (no shell), its output to `log`; the exit status.
// In `cwd` when given (else this process's folder).
int run_wanlab(const std::vector<std::string>& args, const fs::path& log, const fs::path& cwd = {}) {
  std::vector<char*> argv;
  std::string binary = WANLAB_BINARY;
  argv.push_back(binary.data());
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(126);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execv(binary.c_str(), argv.data());
    ::_exit(127);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}
}  // namespace

TEST_CASE("bench --plots-only: a hostile bench folder runs nothing and is still drawn", "[unit][bench][security]") {
  if (!fs::exists(WANLAB_BINARY)) {
    WARN("no wanlab binary at " WANLAB_BINARY " (build the wanlab target): not run");
    return;
  }
  std::string tmpl = (fs::temp_directory_path() / "wanlab-plots-XXXXXX").string();
  REQUIRE(::mkdtemp(tmpl.data()));
  const fs::path dir = tmpl;
  const auto bench = dir / "bench";
  // A real bench folder, from the simulator (no lab, no root, under a second).
  REQUIRE(run_wanlab({"bench", std::string(WANLAB_SOURCE_DIR) + "/bench/scenarios/three-dc-smoke.json", "--mode",
                  "simulate", "--policies", "fair", "--connections", "1", "--no-placement-baseline", "--quiet",
                  "--out", bench.string()},
                 dir / "simulate.log") == 0);
  // What someone may put in a folder they hand over: commands for gnuplot to run (in
  // plots/, where the scripts run).
  nlohmann::json b = nlohmann::json::parse(std::ifstream(bench / "bench.json"));
  b["scenario"] = "smoke`touch PWNED-scenario`\n`touch PWNED-line`";
  REQUIRE(b["variants"].size() == 1);
  const std::string name = "fair-k1' . system('touch PWNED-name') . '\" . system(\"touch PWNED-dq\") . \"";
  b["variants"][0]["name"] = name;
  std::ofstream(bench / "bench.json") << b.dump();
  fs::remove_all(bench / "plots");

  const int rc = run_wanlab({"bench", "--plots-only", bench.string()}, dir / "plots.log");
  std::vector<std::string> pwned;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().filename().string().starts_with("PWNED")) pwned.push_back(e.path().string());
  CHECK(pwned.empty());
  CHECK(rc == 0);
  // The data files stay in plots/, named from the variant's name made safe.
  CHECK(fs::exists(bench / "plots" / ("timeline-" + gnuplot_file_part(name) + ".dat")));
  if (::access("/usr/bin/gnuplot", X_OK) == 0) CHECK(fs::exists(bench / "plots" / "timelines.svg"));
  fs::remove_all(dir);
}

TEST_CASE("bench --plots-only: a container's bench folder draws on the host; links.svg shades windows",
          "[unit][bench][metrics]") {
  if (!fs::exists(WANLAB_BINARY)) {
    WARN("no wanlab binary at " WANLAB_BINARY " (build the wanlab target): not run");
    return;
  }
  std::string tmpl = (fs::temp_directory_path() / "wanlab-plots-XXXXXX").string();
  REQUIRE(::mkdtemp(tmpl.data()));
  const fs::path dir = tmpl;
  const auto bench = dir / "bench";
  REQUIRE(run_wanlab({"bench", std::string(WANLAB_SOURCE_DIR) + "/bench/scenarios/three-dc-smoke.json", "--mode",
                      "simulate", "--policies", "fair,atlas", "--connections", "1", "--no-placement-baseline",
                      "--quiet", "--out", bench.string()},
                     dir / "simulate.log") == 0);
  // As written inside a container: every scenario names the container's topology path.
  const nlohmann::json b = nlohmann::json::parse(std::ifstream(bench / "bench.json"));
  REQUIRE(b["variants"].size() == 2);
  std::vector<fs::path> runs;
  for (const auto& v : b["variants"]) {
    const auto run = bench / v["folder"].get<std::string>();
    runs.push_back(run);
    auto s = nlohmann::json::parse(std::ifstream(run / "scenario.json"));
    s["topology"] = "/wanlab/topologies/three-dc.json";
    std::ofstream(run / "scenario.json") << s.dump(2);
    fs::remove(run / "topology.json");
  }
  fs::remove_all(bench / "plots");
  // Before runs kept their lab's topology: not found, and the message says where it looked
  // (run in `dir`, which has no topologies/ folder to fall back on).
  CHECK(run_wanlab({"bench", "--plots-only", bench.string()}, dir / "plots.log", dir) != 0);
  const auto log = [&] {
    std::ifstream f(dir / "plots.log");
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  CHECK_THAT(log(), Catch::Contains("topology file not found: /wanlab/topologies/three-dc.json") &&
                        Catch::Contains("topology.json"));
  // With the run folders' topology.json (what runs write now) the host draws them.
  for (const auto& run : runs)
    fs::copy_file(std::string(WANLAB_SOURCE_DIR) + "/topologies/three-dc.json", run / "topology.json");
  INFO(log());
  REQUIRE(run_wanlab({"bench", "--plots-only", bench.string()}, dir / "plots.log", dir) == 0);
  INFO(log());
  const auto plots = bench / "plots";
  REQUIRE(fs::exists(plots / "links.gp"));
  std::ifstream gp_file(plots / "links.gp");
  const std::string gp(std::istreambuf_iterator<char>(gp_file), {});
  // Every shade in the key: throughput, queue, and (atlas has windows) the windows.
  CHECK_THAT(gp, Catch::Contains("throughput sent (Mbit/s, left axis)"));
  CHECK_THAT(gp, Catch::Contains("queue (packets, right axis)"));
  CHECK_THAT(gp, Catch::Contains("shaded: an arbiter window open on the link"));
  CHECK_THAT(gp, Catch::Contains("every panel on one time axis"));
  // windows.svg's title explains its overlap shading; timelines share one time axis.
  std::ifstream wgp_file(plots / "windows.gp");
  const std::string wgp(std::istreambuf_iterator<char>(wgp_file), {});
  CHECK_THAT(wgp, Catch::Contains("a darker shade is two or more bars"));
  std::ifstream tgp_file(plots / "timelines.gp");
  const std::string tgp(std::istreambuf_iterator<char>(tgp_file), {});
  CHECK_THAT(tgp, Catch::Contains("every panel on one time axis"));
  if (::access("/usr/bin/gnuplot", X_OK) == 0) {
    CHECK(fs::exists(plots / "links.svg"));
    CHECK(fs::exists(plots / "timelines.svg"));
  }
  fs::remove_all(dir);
}
