// replay_lateness: how late trace-replay steps land while heavy traffic crosses the link.
//
// For each backend asked for (default: kernel and userspace), builds a two-DC lab in-process
// (lab `wlbench-replay`, RTT 2 ms, link rate --link-rate), starts an iperf3 flow use-0 ->
// euw-0 (--streams parallel TCP connections) and, once it runs, replays a fast looping
// trace on use->euw through api::LabController::start_replay (the controller's path): a
// step every --step-ms, alternating between --rate-a and --rate-b, for --duration seconds.
// Then it reads the replay's lateness (actual apply time - scheduled time, over every step)
// and the traffic iperf3's receiver saw. With --idle it first runs the same replay with no
// traffic, for reference.
//
// Needs root and iperf3. Usage:
//   replay_lateness [--backends kernel,userspace] [--duration 20] [--step-ms 10]
//                   [--rate-a 1.2Gbit] [--rate-b 1Gbit] [--streams 4] [--priority 1] [--idle] [--json]
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "support.hpp"
#include "wanlab/api/lab_controller.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/lab/naming.hpp"
#include "wanlab/lab/state.hpp"
#include "wanlab/lab/teardown.hpp"
#include "wanlab/netlink/netlink.hpp"

extern char** environ;

namespace {

using namespace wanlab;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

// A process in a lab namespace (`ip netns exec NS argv...`, posix_spawn: this process has
// threads), stdout to a file. Killed (SIGTERM, by its pid) if still running at destruction.
class Proc {
 public:
  Proc(const std::string& ns, const std::vector<std::string>& argv, const fs::path& out) {
    std::vector<std::string> all{"ip", "netns", "exec", ns};
    all.insert(all.end(), argv.begin(), argv.end());
    std::vector<char*> args;
    for (auto& a : all) args.push_back(a.data());
    args.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    const int rc = ::posix_spawnp(&pid_, "ip", &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) throw std::runtime_error(fmt::format("posix_spawn ip netns exec {}: {}", ns, std::strerror(rc)));
  }
  ~Proc() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      wait();
    }
  }
  int wait() {
    int status = 0;
    while (pid_ > 0 && ::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Result {
  std::string backend, phase;
  nlohmann::json replay;   // the replay's status JSON when stopped
  double traffic_bps = 0;  // iperf3 receiver, over the whole flow
  int streams = 0;
};

core::Topology lab_topology(const std::string& lab, Rate rate) {
  const nlohmann::json doc = {{"name", lab},
                              {"dcs", {{{"name", "use"}, {"nodes", 1}}, {{"name", "euw"}, {"nodes", 1}}}},
                              {"wan", {{{"between", {"use", "euw"}}, {"rtt", "2ms"}, {"rate", to_string(rate)}}}}};
  return core::parse_topology(doc, "replay_lateness", ".");
}

struct Options {
  std::string backends = "kernel,userspace", lab_name = "wlbench-replay", rate_a = "1.2Gbit", rate_b = "1Gbit";
  int duration = 20, step_ms = 10, streams = 4, priority = 1;
  bool idle = false, json = false;
};

// One run of the benchmark: the looping trace, one lab per backend, and what each measured.
class ReplayBench {
 public:
  ReplayBench(const Options& o, std::ostream& out, Rate ra, Rate rb, bool netem, fs::path dir)
      : o_(o), out_(out), ra_(ra), rb_(rb), netem_(netem), dir_(std::move(dir)), trace_file_(dir_ / "fast.csv") {}

  // Writes the trace: a step every --step-ms, alternating the two rates, looping.
  void write_trace() const {
    std::ofstream(trace_file_) << fmt::format("#@ mode=loop end={}ms\ntime,rate\n0ms,{}\n{}ms,{}\n", 2 * o_.step_ms,
                                              to_string(ra_), o_.step_ms, to_string(rb_));
  }

  void run_backend(const std::string& backend) {
    bench::clear_lab(o_.lab_name);
    bench::LabGuard guard{nullptr, o_.lab_name};
    api::UpOptions opts{.backend = backend, .netem = netem_, .seed = 1, .replay_priority = o_.priority};
    guard.ctl = std::make_unique<api::LabController>(lab_topology(o_.lab_name, std::max(ra_, rb_)), opts);
    if (o_.idle) measure(*guard.ctl, backend, "idle", false);
    measure(*guard.ctl, backend, "traffic", true);
  }

  void print_json() const {
    nlohmann::json doc = nlohmann::json::array();
    for (const auto& r : results_)
      doc.push_back({{"backend", r.backend},
                     {"phase", r.phase},
                     {"step_ms", o_.step_ms},
                     {"duration_s", o_.duration},
                     {"rates", {to_string(ra_), to_string(rb_)}},
                     {"streams", r.streams},
                     {"traffic_mbit_s", r.traffic_bps / 1e6},
                     {"netem", netem_},
                     {"replay", r.replay}});
    std::cout << doc.dump(2) << "\n";
  }

 private:
  // The replay for --duration seconds, with iperf3's flow across the link when `traffic`.
  void measure(api::LabController& ctl, const std::string& backend, const std::string& phase, bool traffic) {
    if (bench::g_stop) return;
    const auto ns_use = lab::ns_node(o_.lab_name, "use-0"), ns_euw = lab::ns_node(o_.lab_name, "euw-0");
    std::unique_ptr<Proc> server, client;
    const auto client_out = dir_ / fmt::format("{}-{}-client.json", backend, phase);
    if (traffic) {
      server = std::make_unique<Proc>(ns_euw, std::vector<std::string>{"iperf3", "-s", "-1"}, dir_ / "server.txt");
      std::this_thread::sleep_for(500ms);
      client = std::make_unique<Proc>(
          ns_use,
          std::vector<std::string>{"iperf3", "-c", "198.18.4.2", "-J", "-P", std::to_string(o_.streams), "-t",
                                   std::to_string(o_.duration + 2), "-O", "1"},
          client_out);
      std::this_thread::sleep_for(1500ms);  // let the flows ramp up first
    }
    api::ReplayRequest req;
    req.src = "use";
    req.dst = "euw";
    req.trace = trace_file_.string();
    ctl.start_replay(req);
    for (int i = 0; i < o_.duration * 10 && !bench::g_stop; ++i) std::this_thread::sleep_for(100ms);
    const auto stopped = ctl.stop_replays(std::pair<std::string, std::string>{"use", "euw"});
    Result r{backend, phase, stopped["stopped"][0], 0, traffic ? o_.streams : 0};
    if (client) {
      client->wait();
      try {
        const auto j = nlohmann::json::parse(slurp(client_out));
        r.traffic_bps = j["end"]["sum_received"]["bits_per_second"].get<double>();
      } catch (const std::exception& e) {
        spdlog::warn("iperf3 output unreadable: {}", e.what());
      }
    }
    print(r);
    results_.push_back(std::move(r));
  }

  void print(Result& r) const {
    const auto& l = r.replay["lateness_ms"];
    const auto& a = r.replay["apply_ms"];
    out_ << fmt::format(
        "  {:<10} {:<8} steps {:>5} (skipped {}, failed {})  lateness p50/p99/max {:.3f}/{:.3f}/{:.3f} ms  "
        "(apply {:.3f}/{:.3f}/{:.3f})  traffic {:.0f} Mbit/s  [{}]\n",
        r.backend, r.phase, r.replay["applied"].get<std::uint64_t>(), r.replay["skipped"].get<std::uint64_t>(),
        r.replay["failed"].get<std::uint64_t>(), l["p50"].get<double>(), l["p99"].get<double>(),
        l["max"].get<double>(), a["p50"].get<double>(), a["p99"].get<double>(), a["max"].get<double>(),
        r.traffic_bps / 1e6, r.replay.value("scheduling", ""));
  }

  const Options& o_;
  std::ostream& out_;
  Rate ra_, rb_;
  bool netem_;
  fs::path dir_;
  fs::path trace_file_;
  std::vector<Result> results_;
};

std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> which;
  for (std::size_t start = 0; start <= list.size();) {
    const auto end = list.find(',', start);
    which.push_back(list.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return which;
}

int run(const Options& o, std::ostream& out) {
  if (::geteuid() != 0) throw std::runtime_error("needs root (network namespaces, netlink)");
  const auto ra = parse_rate(o.rate_a), rb = parse_rate(o.rate_b);
  if (!ra || !rb) throw std::runtime_error("--rate-a/--rate-b: " + ra.error + rb.error);
  const bool netem = netlink::netem_available();
  const auto dir = fs::temp_directory_path() / fmt::format("wanlab-replay-lateness-{}", ::getpid());
  fs::create_directories(dir);
  ReplayBench runner(o, out, ra.value, rb.value, netem, dir);
  runner.write_trace();

  const auto which = split_commas(o.backends);
  out << fmt::format(
      "replay lateness: a step every {} ms alternating {} / {} on use->euw for {} s; traffic: iperf3 use-0 -> euw-0, "
      "{} TCP streams; replay thread priority {}; netem {}\n",
      o.step_ms, to_string(ra.value), to_string(rb.value), o.duration, o.streams,
      o.priority > 0 ? fmt::format("SCHED_FIFO {}", o.priority) : "normal", netem ? "present" : "absent");
  for (const auto& backend : which) {
    if (bench::g_stop) break;
    runner.run_backend(backend);
  }
  fs::remove_all(dir);
  if (bench::g_stop) {
    out << "interrupted (labs torn down)\n";
    return 130;
  }
  if (o.json) runner.print_json();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Step lateness of trace replay while traffic flows, per shaping backend (needs root and iperf3)"};
  Options o;
  app.add_option("--backends", o.backends, "comma-separated: kernel, userspace");
  app.add_option("--duration", o.duration, "seconds of replay per run")->check(CLI::PositiveNumber);
  app.add_option("--step-ms", o.step_ms, "milliseconds between steps")->check(CLI::PositiveNumber);
  app.add_option("--rate-a", o.rate_a, "the trace alternates between --rate-a ...");
  app.add_option("--rate-b", o.rate_b, "... and --rate-b");
  app.add_option("--streams", o.streams, "parallel iperf3 TCP connections")->check(CLI::PositiveNumber);
  app.add_option("--priority", o.priority, "SCHED_FIFO priority of the replay thread (0: ordinary scheduling)");
  app.add_option("--lab", o.lab_name, "lab name");
  app.add_flag("--idle", o.idle, "also measure with no traffic, first");
  app.add_flag("--json", o.json, "results as JSON on stdout (the text goes to stderr)");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);
  std::ostream& out = o.json ? std::cerr : std::cout;

  bench::install_stop_handlers();
  try {
    return run(o, out);
  } catch (const std::exception& e) {
    std::cerr << "replay_lateness: " << e.what() << "\n";
    return 1;
  }
}
