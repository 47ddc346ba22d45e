// bringup: how long wanlab takes to build a lab and to tear it down.
//
// For each of --runs runs: builds the lab of --topology in-process (api::LabController's
// constructor: state file, plan, every netlink operation), then tears it down
// (LabController::teardown(): unmount every namespace), and reports both times. It also
// reports how long after teardown() the kernel had actually destroyed the namespaces'
// interfaces ("freed"): a canary veth pair joins the host namespace to the lab namespace
// that is removed last; the kernel deletes the pair when it cleans that namespace up, and
// the kernel's namespace cleanup runs in order, so the canary's disappearance means every
// namespace of the lab has had its devices removed. The next run starts only after that.
//
// --profile adds one untimed-by-the-summary run that applies the plan through a Kernel
// wrapper timing each operation, and prints the time per operation type.
//
// Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN). Usage:
//   bringup [--runs 5] [--topology topologies/bringup-96.json] [--lab NAME] [--json] [--profile]
#include <net/if.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "support.hpp"
#include "wanlab/api/lab_controller.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/lab/apply.hpp"
#include "wanlab/lab/naming.hpp"
#include "wanlab/lab/plan.hpp"
#include "wanlab/lab/state.hpp"
#include "wanlab/lab/teardown.hpp"
#include "wanlab/netlink/netlink.hpp"

namespace {

using namespace wanlab;
using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The canary: a veth pair whose host end we watch and whose other end sits in a lab
// namespace. Removing that namespace makes the kernel delete the pair.
class Canary {
 public:
  Canary(const std::string& lab_ns, int run) : name_(fmt::format("wlbc{}r{}", ::getpid() % 100000, run)) {
    auto target = netlink::Netns::open(lab_ns);
    if (!target) throw std::runtime_error(fmt::format("namespace {} vanished", lab_ns));
    auto host = netlink::Socket::open();
    host.add_veth(name_, name_ + "p", *target, 1500);
    if (!present()) throw std::runtime_error(fmt::format("canary interface {} not visible after creation", name_));
  }
  ~Canary() {
    // Normally already gone with the namespace; if not (error paths), delete it.
    if (present() && std::system(fmt::format("ip link del {} 2>/dev/null", name_).c_str()) != 0)
      spdlog::warn("could not delete the canary interface {}", name_);
  }
  Canary(const Canary&) = delete;
  Canary& operator=(const Canary&) = delete;
  bool present() const { return ::if_nametoindex(name_.c_str()) != 0; }
  // Polls until the kernel has deleted the pair; nullopt on timeout.
  std::optional<Clock::time_point> wait_gone(std::chrono::seconds timeout) const {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      if (!present()) return Clock::now();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return std::nullopt;
  }

 private:
  std::string name_;
};

struct RunResult {
  double bringup_ms = 0;
  double teardown_ms = 0;
  std::optional<double> freed_ms;  // after teardown() returned
  std::size_t namespaces = 0;
};

RunResult one_run(const core::Topology& topo, const api::UpOptions& options, int run, bool watch_freed) {
  RunResult r;
  bench::LabGuard guard{nullptr, topo.name};
  const auto t0 = Clock::now();
  guard.ctl = std::make_unique<api::LabController>(topo, options);
  const auto t1 = Clock::now();
  r.bringup_ms = ms_between(t0, t1);

  const auto present = lab::lab_namespaces(topo.name, {});  // sorted; teardown removes in this order
  r.namespaces = present.size();
  std::optional<Canary> canary;
  if (watch_freed && !present.empty()) canary.emplace(present.back(), run);

  const auto t2 = Clock::now();
  const auto report = guard.ctl->teardown();
  const auto t3 = Clock::now();
  r.teardown_ms = ms_between(t2, t3);
  if (report.removed.size() != present.size())
    spdlog::warn("run {}: teardown removed {} of {} namespaces", run, report.removed.size(), present.size());
  if (canary) {
    if (auto gone = canary->wait_gone(std::chrono::seconds(60)))
      r.freed_ms = ms_between(t3, *gone);
    else
      spdlog::warn("run {}: the kernel had not freed the lab's namespaces 60 s after teardown", run);
  }
  guard.ctl.reset();
  lab::remove_lab_dir(topo.name);
  return r;
}

// ---- profile: time per operation type --------------------------------------------------

// One name per lab::Op type (lab/plan.hpp sizes the table from the variant).
constexpr const auto& kOpNames = lab::kOpTypeNames;

class TimingKernel final : public lab::Kernel {
 public:
  explicit TimingKernel(lab::Kernel& inner) : inner_(inner) {}
  void execute(const lab::Op& op) override {
    const auto t0 = Clock::now();
    inner_.execute(op);
    const auto dt = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    count_[op.index()] += 1;
    total_us_[op.index()] += dt;
    max_us_[op.index()] = std::max(max_us_[op.index()], dt);
  }
  std::array<std::size_t, kOpNames.size()> count_{};
  std::array<double, kOpNames.size()> total_us_{};
  std::array<double, kOpNames.size()> max_us_{};

 private:
  lab::Kernel& inner_;
};

nlohmann::json profile_run(const core::Topology& topo, bool netem, std::ostream& out) {
  const auto plan = lab::plan_lab(topo, {.netem = netem});
  lab::NetlinkKernel kernel;
  TimingKernel timing(kernel);
  const auto t0 = Clock::now();
  double apply_ms = 0;
  try {
    lab::apply(plan, timing);
    apply_ms = ms_between(t0, Clock::now());
  } catch (...) {
    kernel.release();
    lab::teardown(topo.name, plan.namespaces);
    throw;
  }
  kernel.release();
  const auto t1 = Clock::now();
  lab::teardown(topo.name, plan.namespaces);
  const double teardown_ms = ms_between(t1, Clock::now());

  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < kOpNames.size(); ++i)
    if (timing.count_[i]) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return timing.total_us_[a] > timing.total_us_[b]; });

  double sum_us = 0;
  for (auto i : order) sum_us += timing.total_us_[i];
  out << fmt::format("\nprofile: lab::apply of {} ops took {:.1f} ms (teardown {:.1f} ms); per operation type:\n",
                     plan.ops.size(), apply_ms, teardown_ms);
  out << fmt::format("  {:<15} {:>6} {:>10} {:>7} {:>9} {:>9}\n", "op", "count", "total ms", "share", "mean us",
                     "max us");
  nlohmann::json ops = nlohmann::json::array();
  for (auto i : order) {
    const double mean = timing.total_us_[i] / static_cast<double>(timing.count_[i]);
    out << fmt::format("  {:<15} {:>6} {:>10.1f} {:>6.1f}% {:>9.1f} {:>9.1f}\n", kOpNames[i], timing.count_[i],
                       timing.total_us_[i] / 1000, 100 * timing.total_us_[i] / sum_us, mean, timing.max_us_[i]);
    ops.push_back({{"op", kOpNames[i]},
                   {"count", timing.count_[i]},
                   {"total_ms", timing.total_us_[i] / 1000},
                   {"mean_us", mean},
                   {"max_us", timing.max_us_[i]}});
  }
  return {{"apply_ms", apply_ms}, {"teardown_ms", teardown_ms}, {"ops", ops}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times bring-up and teardown of a wanlab lab (needs root)"};
  int runs = 5;
  std::string topology_arg = "topologies/bringup-96.json";
  std::string lab_name = "wlbench-bringup";
  bool json = false, profile = false, no_freed = false, verbose = false;
  int pause_ms = 250;
  app.add_option("--runs", runs, "number of bring-up/teardown cycles")->check(CLI::PositiveNumber);
  app.add_option("--topology", topology_arg, "topology file");
  app.add_option("--lab", lab_name,
                 "lab name to use instead of the topology's (keeps a running lab of that name safe)");
  app.add_flag("--json", json, "print the results as JSON on stdout (the text goes to stderr)");
  app.add_flag("--profile", profile, "one more bring-up timing lab::apply per operation type");
  app.add_flag("--no-freed", no_freed, "do not wait for the kernel to free the namespaces between runs");
  app.add_option("--pause-ms", pause_ms, "pause between runs, after the kernel freed the previous lab");
  app.add_flag("-v,--verbose", verbose, "keep wanlab's info logging");
  CLI11_PARSE(app, argc, argv);

  spdlog::set_level(verbose ? spdlog::level::info : spdlog::level::warn);
  std::ostream& out = json ? std::cerr : std::cout;

  bench::install_stop_handlers();

  try {
    if (::geteuid() != 0) throw std::runtime_error("needs root (network namespaces, netlink)");
    const auto topo_path = bench::resolve_topology(topology_arg);
    auto topo = core::load_topology(topo_path);
    const std::string topo_name = topo.name;
    if (!lab_name.empty()) topo.name = lab_name;

    const bool netem = netlink::netem_available();
    const api::UpOptions options{.backend = "kernel", .netem = netem};
    const auto plan = lab::plan_lab(topo, {.netem = netem});

    out << fmt::format("wanlab bring-up: {} ({} DCs, {} nodes, {} directed WAN links) as lab '{}'\n",
                       topo_path.string(), topo.dcs.size(), topo.node_count(), topo.links.size(), topo.name);
    out << fmt::format("  {} namespaces, {} kernel operations; netem {} ({})\n", plan.namespaces.size(),
                       plan.ops.size(), netem ? "available" : "NOT available",
                       netem ? "WAN leaves are netem" : "WAN leaves are pfifo, no delay/jitter/loss");

    bench::clear_lab(topo.name);

    std::vector<RunResult> results;
    out << fmt::format("  {:>4} {:>12} {:>12} {:>12} {:>6}\n", "run", "bring-up ms", "teardown ms", "freed +ms",
                       "netns");
    for (int i = 1; i <= runs && !bench::g_stop; ++i) {
      auto r = one_run(topo, options, i, !no_freed);
      out << fmt::format("  {:>4} {:>12.1f} {:>12.1f} {:>12} {:>6}\n", i, r.bringup_ms, r.teardown_ms,
                         r.freed_ms ? fmt::format("{:.1f}", *r.freed_ms) : "-", r.namespaces);
      results.push_back(r);
      if (i < runs) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    }
    if (results.empty()) throw std::runtime_error("interrupted before the first run finished");

    std::vector<double> up, down, freed;
    for (const auto& r : results) {
      up.push_back(r.bringup_ms);
      down.push_back(r.teardown_ms);
      if (r.freed_ms) freed.push_back(*r.freed_ms);
    }
    const auto [up_min, up_max] = std::minmax_element(up.begin(), up.end());
    const auto [down_min, down_max] = std::minmax_element(down.begin(), down.end());
    out << fmt::format(
        "  median: bring-up {:.1f} ms (min {:.1f}, max {:.1f}), teardown {:.1f} ms (min {:.1f}, max "
        "{:.1f})",
        median(up), *up_min, *up_max, median(down), *down_min, *down_max);
    if (!freed.empty()) out << fmt::format(", kernel freed the namespaces {:.1f} ms after teardown", median(freed));
    out << "\n";

    nlohmann::json doc = {{"tool", "wanlab"},
                          {"topology", topo_path.string()},
                          {"topology_name", topo_name},
                          {"lab", topo.name},
                          {"dcs", topo.dcs.size()},
                          {"nodes", topo.node_count()},
                          {"wan_links", topo.links.size()},
                          {"namespaces", plan.namespaces.size()},
                          {"operations", plan.ops.size()},
                          {"netem", netem},
                          {"runs", nlohmann::json::array()},
                          {"median", {{"bringup_ms", median(up)}, {"teardown_ms", median(down)}}},
                          {"min", {{"bringup_ms", *up_min}, {"teardown_ms", *down_min}}},
                          {"max", {{"bringup_ms", *up_max}, {"teardown_ms", *down_max}}}};
    if (!freed.empty()) doc["median"]["freed_after_teardown_ms"] = median(freed);
    for (const auto& r : results) {
      nlohmann::json j = {{"bringup_ms", r.bringup_ms}, {"teardown_ms", r.teardown_ms}, {"namespaces", r.namespaces}};
      if (r.freed_ms) j["freed_after_teardown_ms"] = *r.freed_ms;
      doc["runs"].push_back(j);
    }
    if (profile && !bench::g_stop) {
      std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
      doc["profile"] = profile_run(topo, netem, out);
      lab::remove_lab_dir(topo.name);
    }
    if (json) std::cout << doc.dump(2) << "\n";
    return bench::g_stop ? 130 : 0;
  } catch (const std::exception& e) {
    std::cerr << "bringup: " << e.what() << "\n";
    return 1;
  }
}
