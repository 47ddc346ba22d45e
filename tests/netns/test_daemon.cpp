// The controller daemon as a local user sees it: its token is in no process's argv, its
// state folder and sockets are its own whatever the umask, and a run whose controller is
// SIGKILLed ends with an error.txt, no agent left and nothing of the lab left after `down`.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "lab_namespaces.hpp"
#include "process.hpp"
#include "wanlab/lab/naming.hpp"
#include "wanlab/netlink/netlink.hpp"

using namespace wanlab;
using namespace std::chrono_literals;
using test::namespaces_of;
using test::run;
namespace fs = std::filesystem;

namespace {

fs::path tmp(const std::string& name) { return fs::temp_directory_path() / name; }

std::string write_topology(const std::string& lab, int gpus = 1) {
  const auto path = tmp(lab + ".json");
  nlohmann::json doc = {
      {"name", lab},
      {"dcs",
       {{{"name", "use"}, {"nodes", 1}, {"gpus_per_node", gpus}}, {{"name", "euw"}, {"nodes", 1}, {"gpus_per_node", gpus}}}},
      {"wan", {{{"between", {"use", "euw"}}, {"rtt", "20ms"}, {"rate", "200Mbit"}}}}};
  std::ofstream(path) << doc.dump(2);
  return path.string();
}

// Also for /proc/PID files of a process that exits meanwhile (empty then).
std::string read_file(const fs::path& p) {
  std::string text;
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return text;
}

// pid: command line (NULs as blanks) of every process whose command line contains `needle`.
std::vector<std::string> processes_with(const std::string& needle) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const auto pid = e.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos || pid == std::to_string(::getpid())) continue;
    auto cmd = read_file(e.path() / "cmdline");
    if (cmd.find(needle) == std::string::npos) continue;
    for (auto& c : cmd)
      if (c == '\0') c = ' ';
    found.push_back(pid + ": " + cmd);
  }
  return found;
}

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) return 07777;
  return st.st_mode & 07777;
}

}  // namespace

TEST_CASE("up under umask 000 with --token: the token in no argv, the lab's folder and sockets its own",
          "[netns][daemon]") {
  const std::string lab = "wld-perm";
  const auto file = write_topology(lab);
  const std::string token = "wld-t0ken-" + std::to_string(::getpid());
  run(test::wanlab() + " down " + lab);
  auto up = run("umask 000; " + test::wanlab() + " up " + file + " --agents-tcp 127.0.0.1:47391 --token " + token);
  INFO(up.out);
  REQUIRE(up.code == 0);
  CHECK_THAT(up.out, Catch::Contains("$WANLAB_TOKEN or --token-file"));
  struct Down {
    std::string lab;
    ~Down() { run(test::wanlab() + " down " + lab); }
  } down{lab};

  // The daemon was forked from `up --token T` without exec: its argv was that command line.
  CHECK(processes_with(token).empty());
  const auto daemons = processes_with(lab + ".json");
  REQUIRE(daemons.size() == 1);
  CHECK_THAT(daemons[0], Catch::Contains("--token ***"));

  const fs::path dir = "/run/wanlab/" + lab;
  CHECK(mode_of(dir) == 0755);
  CHECK(mode_of(dir / "controller.sock") == 0600);
  CHECK(mode_of(dir / "agents.sock") == 0600);
  CHECK(mode_of(dir / "state.json") == 0644);
  CHECK(mode_of(dir / "controller.log") == 0644);
  CHECK(mode_of(dir / "lock") == 0644);
  // Another local user can neither connect to the API nor write anything there.
  const std::string nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
  auto c = run(nobody + "python3 -c \"import socket; socket.socket(socket.AF_UNIX).connect('" +
               (dir / "controller.sock").string() + "')\"");
  CHECK(c.code != 0);
  CHECK_THAT(c.out, Catch::Contains("Permission denied"));
  CHECK(run(nobody + "touch " + (dir / "state.json").string()).code != 0);
  CHECK(run(nobody + "touch " + (dir / "planted").string()).code != 0);

  // The same with the token in a file, and with --token-file and --token together refused.
  run(test::wanlab() + " down " + lab);
  const auto token_file = tmp(lab + ".token");
  std::ofstream(token_file) << token << "\n";
  fs::permissions(token_file, fs::perms::owner_read | fs::perms::owner_write);
  up = run(test::wanlab() + " up " + file + " --agents-tcp 127.0.0.1:47391 --token-file " + token_file.string());
  INFO(up.out);
  REQUIRE(up.code == 0);
  CHECK_THAT(up.out, !Catch::Contains("--token-file"));
  CHECK(processes_with(token).empty());
  auto both = run(test::wanlab() + " up " + file + " --token x --token-file " + token_file.string());
  CHECK(both.code == 2);
  CHECK_THAT(both.out, Catch::Contains("give the token once"));
  fs::remove(token_file);
}

TEST_CASE("a run whose controller is SIGKILLed ends with error.txt; its agents exit; down leaves nothing",
          "[netns][daemon]") {
  const std::string lab = "wld-kill";
  const auto topo = write_topology(lab, 2);
  const auto scen = tmp(lab + "-scenario.json");
  // Long enough to be killed in the middle: 400 iterations of a few tens of milliseconds.
  std::ofstream(scen) << nlohmann::json{{"name", "wld-kill"},
                                        {"topology", topo},
                                        {"model", {{"layers", 2}, {"hidden", 1024}, {"heads", 8}, {"seq_len", 512}, {"vocab", 32000}}},
                                        {"parallelism", {{"pp", 2}, {"dp", 1}, {"tp", 2}}},
                                        {"schedule", "1f1b"},
                                        {"micro_batches", 2},
                                        {"iterations", 400},
                                        {"warmup", 1},
                                        {"connections", 1},
                                        {"scale", 0.01}}
                             .dump(2);
  const auto out = tmp(lab + "-out");
  fs::remove_all(out);
  run(test::wanlab() + " down " + lab);
  auto up = run(test::wanlab() + " up " + topo);
  INFO(up.out);
  REQUIRE(up.code == 0);
  struct Down {
    std::string lab;
    ~Down() { run(test::wanlab() + " down " + lab); }
  } guard{lab};
  const fs::path state_file = "/run/wanlab/" + lab + "/state.json";
  const auto log = tmp(lab + "-run.log");
  run("(" + test::wanlab() + " run " + scen.string() + " --out " + out.string() + " --quiet > " + log.string() +
      " 2>&1 &)");

  // state.json names the run and its folder while it runs, with its progress.
  nlohmann::json state;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  for (;;) {
    try {
      state = nlohmann::json::parse(read_file(state_file));
    } catch (const std::exception&) {
      state = nlohmann::json::object();
    }
    if (state.contains("run") && state["run"].value("iterations_done", 0) >= 2) break;
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(100ms);
  }
  INFO(state.dump(2) << "\n" << read_file(log));
  REQUIRE(state.contains("run"));
  CHECK(state["run"]["out"] == out.string());
  CHECK(state["run"]["phase"] == "running");
  const std::string agents_sock = "/run/wanlab/" + lab + "/agents.sock";
  CHECK(processes_with(agents_sock).size() == 2);

  const int pid = state["controller_pid"].get<int>();
  REQUIRE(::kill(pid, SIGKILL) == 0);
  // The agents end with their controller, on their own, before anyone runs `down`.
  auto agents = processes_with(agents_sock);
  for (int i = 0; i < 100 && !agents.empty(); ++i) {
    std::this_thread::sleep_for(100ms);
    agents = processes_with(agents_sock);
  }
  CHECK(agents.empty());
  for (const auto& f : fs::directory_iterator(out / "agents")) {
    INFO(f.path().string() << ":\n" << read_file(f.path()));
    // Whichever comes first: the death signal, or the connection closing under the run.
    CHECK_THAT(read_file(f.path()),
               Catch::Contains("the controller that started this agent (pid " + std::to_string(pid) +
                               ") is gone: stopping") ||
                   Catch::Contains("aborted: lost the controller: peer closed the connection"));
  }

  auto d = run(test::wanlab() + " down " + lab);
  INFO(d.out);
  CHECK(d.code == 0);
  CHECK_THAT(d.out, Catch::Contains("its controller died during run wld-kill-1; the run is over: " +
                                    (out / "error.txt").string()));
  const auto error = read_file(out / "error.txt");
  INFO(error);
  CHECK_THAT(error, Catch::Contains("run wld-kill-1 (scenario wld-kill) ended without results: the controller of lab "
                                    "wld-kill (pid " + std::to_string(pid) + ") died during iteration"));
  CHECK_THAT(error, Catch::Contains("`wanlab down` found it gone at"));
  CHECK_THAT(error, Catch::Contains("Partial results are kept"));
  CHECK(fs::exists(out / "agents"));
  CHECK(processes_with(agents_sock).empty());
  CHECK(namespaces_of(lab).empty());
  CHECK_FALSE(fs::exists("/run/wanlab/" + lab));
  fs::remove(scen);
  fs::remove(log);
}
