// link_change: latency of one in-place change of a WAN link, in-process versus a tc process.
//
// Builds --topology (default topologies/two-dc.json) in-process under its own lab name,
// then changes one directed link's rate, alternating between its configured rate and half
// of it, and times each change:
//   set_link   --changes times api::LabController::set_link (what `wanlab link set` and the
//              control API run): validation, KernelShaper::apply (netlink change of the HTB
//              class, then of the leaf: netem, or pfifo where the kernel has no netem), the
//              state file rewrite (fsync) and a log line;
//   write_state  up to 200 rewrites of the lab's state file alone (part of set_link);
//   shaper     --changes times shaping::KernelShaper::apply alone, on its own socket in the
//              router namespace: the two netlink changes, nothing else;
//   tc-netns   --tc-runs times a process, the way Mininet-style tools reconfigure: fork/exec
//              of `ip netns exec <router ns> tc class change dev <if> parent 1: classid 1:<n>
//              htb rate ... ceil ... burst ... cburst ... quantum ...`, waiting for it to exit;
//   tc-direct  --tc-runs times fork, setns into the router namespace, exec of the same `tc`
//              alone (the cheapest a process can be: no `ip netns exec` in front).
// Note the process variants change only the class; the in-process paths change the class
// and the leaf. Reports p50/p90/p99/max in microseconds and the ratios.
//
// Needs root. Usage:
//   link_change [--changes 2000] [--tc-runs 200] [--topology topologies/two-dc.json] [--json]
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
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
#include "wanlab/lab/wan_tc.hpp"
#include "wanlab/netlink/netlink.hpp"
#include "wanlab/shaping/kernel_shaper.hpp"

namespace {

using namespace wanlab;
using Clock = std::chrono::steady_clock;

struct Summary {
  std::size_t n = 0;
  double p50 = 0, p90 = 0, p99 = 0, max = 0, min = 0, mean = 0;
};

// Nearest-rank percentiles.
Summary summarize(std::vector<double> us) {
  Summary s;
  if (us.empty()) return s;
  std::sort(us.begin(), us.end());
  auto pct = [&](double p) {
    const auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(us.size())));
    return us[std::clamp<std::size_t>(rank, 1, us.size()) - 1];
  };
  s.n = us.size();
  s.p50 = pct(50);
  s.p90 = pct(90);
  s.p99 = pct(99);
  s.min = us.front();
  s.max = us.back();
  double sum = 0;
  for (double v : us) sum += v;
  s.mean = sum / static_cast<double>(us.size());
  return s;
}

nlohmann::json to_json(const Summary& s) {
  return {{"n", s.n},        {"p50_us", s.p50}, {"p90_us", s.p90},  {"p99_us", s.p99},
          {"max_us", s.max}, {"min_us", s.min}, {"mean_us", s.mean}};
}

// Times `count` calls of fn(i) after `warmup` untimed ones; microseconds each.
std::vector<double> time_calls(int warmup, int count, const std::function<void(int)>& fn) {
  for (int i = 0; i < warmup && !bench::g_stop; ++i) fn(i);
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count && !bench::g_stop; ++i) {
    const auto t0 = Clock::now();
    fn(warmup + i);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return us;
}

std::string find_tool(const std::string& name) {
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("PATH")) {
    std::string p = path;
    std::size_t start = 0;
    while (start <= p.size()) {
      const auto end = p.find(':', start);
      dirs.push_back(p.substr(start, end == std::string::npos ? std::string::npos : end - start));
      if (end == std::string::npos) break;
      start = end + 1;
    }
  }
  for (const char* d : {"/usr/sbin", "/sbin", "/usr/bin", "/bin"}) dirs.emplace_back(d);
  for (const auto& d : dirs) {
    const auto candidate = std::filesystem::path(d) / name;
    if (!d.empty() && ::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  throw std::runtime_error(fmt::format("'{}' not found (iproute2)", name));
}

// fork, optionally setns(netns_fd), exec argv with stdout to /dev/null; waits. Throws on
// a non-zero exit (stderr is the benchmark's, so tc's message shows).
void run_process(const std::vector<std::string>& argv, int netns_fd) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    if (netns_fd >= 0 && ::setns(netns_fd, CLONE_NEWNET) != 0) ::_exit(126);
    const int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) ::dup2(devnull, STDOUT_FILENO);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error(fmt::format("waitpid: {}", std::strerror(errno)));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string cmd;
    for (const auto& a : argv) cmd += a + " ";
    throw std::runtime_error(fmt::format("`{}` failed (status {:#x})", cmd, status));
  }
}

std::string capture(const std::string& cmd) {
  std::string out;
  if (FILE* f = ::popen(cmd.c_str(), "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof buf, f)) out += buf;
    ::pclose(f);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

struct Options {
  int changes = 2000, tc_runs = 200, warmup = 50;
  std::string topology_arg = "topologies/two-dc.json";
  std::string lab_name = "wlbench-link";
  std::string src_dc, dst_dc;
  bool json = false, verbose = false;
};

// The topology (under the lab name asked for) and the link it changes.
struct Target {
  std::filesystem::path topo_path;
  core::Topology topo;
  std::string src_dc, dst_dc;
  std::size_t s = 0, d = 0;  // DC indices
};

Target load_target(const Options& o) {
  if (::geteuid() != 0) throw std::runtime_error("needs root (network namespaces, netlink)");
  Target t;
  t.topo_path = bench::resolve_topology(o.topology_arg);
  t.topo = core::load_topology(t.topo_path);
  auto& topo = t.topo;
  if (!o.lab_name.empty()) topo.name = o.lab_name;
  if (topo.links.empty()) throw std::runtime_error("the topology has no WAN link");
  t.src_dc = o.src_dc.empty() ? topo.dcs[topo.links.front().src].name : o.src_dc;
  t.dst_dc = o.dst_dc.empty() ? topo.dcs[topo.links.front().dst].name : o.dst_dc;
  const auto s = topo.dc_index(t.src_dc), d = topo.dc_index(t.dst_dc);
  if (!s || !d || !topo.find_link(*s, *d))
    throw std::runtime_error(fmt::format("no WAN link {}->{} in {}", t.src_dc, t.dst_dc, t.topo_path.string()));
  t.s = *s;
  t.d = *d;
  return t;
}

// The link of the lab that is up, as the variants change it: its two rates and where its class is.
struct Link {
  Link(const Target& t, const core::Topology& up, bool with_netem)
      : live(up),
        base(*up.find_link(t.s, t.d)),
        rate_hi(base.params.rate),
        rate_lo{rate_hi.bps / 2},
        router_ns(lab::ns_router(t.topo.name)),
        ifname(lab::if_router_to(t.dst_dc)),
        classid(lab::wan_link_tc(up, base).classid.to_string()),
        netem(with_netem) {}

  Rate rate_for(int i) const { return i % 2 ? rate_lo : rate_hi; }

  const core::Topology& live;
  const core::WanLink base;
  const Rate rate_hi;
  const Rate rate_lo;
  const std::string router_ns, ifname, classid;
  const bool netem;
};

// What each variant measured, in microseconds per change.
struct Timings {
  std::vector<double> set_link, shaper, write_state, tc_netns, tc_direct;
  std::string verify_after_set_link;  // tc's view of the class after the set_link run
};

// 1. The full API path; 2. KernelShaper::apply alone; and the state file rewrite alone.
void time_in_process(api::LabController& ctl, const Target& t, const Link& link, const Options& o,
                     const std::string& verify_cmd, std::ostream& out, Timings& r) {
  r.set_link = time_calls(o.warmup, o.changes, [&](int i) {
    api::LinkChange change;
    change.rate = link.rate_for(i);
    ctl.set_link(t.src_dc, t.dst_dc, change);
  });
  r.verify_after_set_link = capture(verify_cmd);
  out << fmt::format("  after set_link to {}: {}\n",
                     to_string(link.rate_for(o.warmup + static_cast<int>(r.set_link.size()) - 1)),
                     r.verify_after_set_link);

  // 2. KernelShaper::apply alone, on a socket of its own (closed before teardown).
  {
    auto router = netlink::Netns::open(link.router_ns);
    if (!router) throw std::runtime_error(fmt::format("namespace {} vanished", link.router_ns));
    shaping::KernelShaper shaper(netlink::Socket::open_in(*router), link.netem);
    core::Topology copy = link.live;
    core::WanLink* changed = copy.find_link(t.s, t.d);
    r.shaper = time_calls(o.warmup, o.changes, [&](int i) {
      changed->params.rate = link.rate_for(i);
      shaper.apply(copy, *changed);
    });
  }

  // The part of set_link that is neither netlink nor validation: rewriting the state file
  // (temporary file, fsync, rename) under WANLAB_STATE_DIR (default /run/wanlab).
  if (const auto state = lab::read_state(t.topo.name)) {
    r.write_state =
        time_calls(std::min(o.warmup, 5), std::min(o.changes, 200), [&](int) { lab::write_state(*state); });
  }
}

// 3 and 4. Processes: `ip netns exec .. tc`, and tc alone after setns.
void time_processes(const Target& t, const Link& link, const Options& o, const std::string& ip_path,
                    const std::string& tc_path, Timings& r) {
  core::Topology scratch = link.live;
  core::WanLink* scratch_link = scratch.find_link(t.s, t.d);
  const auto& ifname = link.ifname;
  auto tc_args = [&](int i) {
    scratch_link->params.rate = link.rate_for(i);
    const auto tc = lab::wan_link_tc(scratch, *scratch_link);
    return std::vector<std::string>{tc_path,
                                    "class",
                                    "change",
                                    "dev",
                                    ifname,
                                    "parent",
                                    lab::kWanRootQdisc.to_string(),
                                    "classid",
                                    tc.classid.to_string(),
                                    "htb",
                                    "rate",
                                    fmt::format("{}bit", tc.htb.rate.bps),
                                    "ceil",
                                    fmt::format("{}bit", tc.htb.ceil.bps),
                                    "burst",
                                    std::to_string(tc.htb.burst.value),
                                    "cburst",
                                    std::to_string(tc.htb.cburst.value),
                                    "quantum",
                                    std::to_string(tc.htb.quantum)};
  };
  const int proc_warmup = std::min(o.warmup, 5);
  r.tc_netns = time_calls(proc_warmup, o.tc_runs, [&](int i) {
    auto args = tc_args(i);
    args.insert(args.begin(), {ip_path, "netns", "exec", link.router_ns});
    run_process(args, -1);
  });
  auto router = netlink::Netns::open(link.router_ns);
  if (!router) throw std::runtime_error(fmt::format("namespace {} vanished", link.router_ns));
  r.tc_direct = time_calls(proc_warmup, o.tc_runs, [&](int i) { run_process(tc_args(i), router->fd()); });
}

struct Summaries {
  Summary set_link, shaper, tc_netns, tc_direct, write_state;
};

void print_table(std::ostream& out, const Summaries& x, double down_ms) {
  const auto &a = x.set_link, &b = x.shaper, &c = x.tc_netns, &e = x.tc_direct, &w = x.write_state;
  out << fmt::format("\n  {:<34} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9}\n", "path (us per change)", "n", "p50", "p90",
                     "p99", "max", "mean");
  auto row = [&](const char* name, const Summary& v) {
    out << fmt::format("  {:<34} {:>6} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f}\n", name, v.n, v.p50, v.p90,
                       v.p99, v.max, v.mean);
  };
  row("set_link (API path)", a);
  row("  lab::write_state alone", w);
  row("KernelShaper::apply (netlink)", b);
  row("process: ip netns exec .. tc", c);
  row("process: setns + tc", e);
  out << fmt::format(
      "\n  p50 ratio tc-netns / set_link = {:.1f}x, tc-netns / shaper = {:.0f}x, tc-direct / shaper = "
      "{:.0f}x\n",
      c.p50 / a.p50, c.p50 / b.p50, e.p50 / b.p50);
  out << fmt::format("  p99 ratio tc-netns / set_link = {:.1f}x, tc-netns / shaper = {:.0f}x\n", c.p99 / a.p99,
                     c.p99 / b.p99);
  out << fmt::format("  target p99 < 200 us in-process: set_link p99 {:.1f} us, shaper p99 {:.1f} us\n", a.p99,
                     b.p99);
  out << fmt::format("  state files under {} (WANLAB_STATE_DIR); lab teardown {:.1f} ms\n",
                     lab::state_root().string(), down_ms);
}

void print_json(const Target& t, const Link& link, const Summaries& x, const Timings& r, double up_ms,
                double down_ms) {
  const auto &a = x.set_link, &b = x.shaper, &c = x.tc_netns, &e = x.tc_direct, &w = x.write_state;
  const bool netem = link.netem;
  nlohmann::json doc = {{"tool", "wanlab"},
                        {"topology", t.topo_path.string()},
                        {"lab", t.topo.name},
                        {"link", fmt::format("{}->{}", t.src_dc, t.dst_dc)},
                        {"class", link.classid},
                        {"interface", fmt::format("{}:{}", link.router_ns, link.ifname)},
                        {"netem", netem},
                        {"leaf", netem ? "netem" : "pfifo"},
                        {"rates", {to_string(link.rate_hi), to_string(link.rate_lo)}},
                        {"bringup_ms", up_ms},
                        {"teardown_ms", down_ms},
                        {"set_link", to_json(a)},
                        {"shaper", to_json(b)},
                        {"write_state", to_json(w)},
                        {"state_dir", lab::state_root().string()},
                        {"tc_netns_exec", to_json(c)},
                        {"tc_setns", to_json(e)},
                        {"ratio",
                         {{"p50_tc_netns_over_set_link", c.p50 / a.p50},
                          {"p99_tc_netns_over_set_link", c.p99 / a.p99},
                          {"p50_tc_netns_over_shaper", c.p50 / b.p50},
                          {"p99_tc_netns_over_shaper", c.p99 / b.p99},
                          {"p50_tc_setns_over_shaper", e.p50 / b.p50}}},
                        {"verify", {{"after_set_link", r.verify_after_set_link}}}};
  std::cout << doc.dump(2) << "\n";
}

int run(const Options& o, std::ostream& out) {
  const auto t = load_target(o);
  const bool netem = netlink::netem_available();
  const auto ip_path = find_tool("ip");
  const auto tc_path = find_tool("tc");
  bench::clear_lab(t.topo.name);

  bench::LabGuard guard{nullptr, t.topo.name};
  const auto t_up = Clock::now();
  guard.ctl = std::make_unique<api::LabController>(t.topo, api::UpOptions{.backend = "kernel", .netem = netem});
  const double up_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_up).count();
  const Link link(t, guard.ctl->topology(), netem);
  out << fmt::format(
      "wanlab link change: lab '{}' from {} up in {:.1f} ms; link {}->{} = class {} on {}:{}, leaf "
      "{}\n",
      t.topo.name, t.topo_path.string(), up_ms, t.src_dc, t.dst_dc, link.classid, link.router_ns, link.ifname,
      netem ? "netem" : "pfifo (no netem on this kernel)");
  out << fmt::format(
      "  rate alternates {} <-> {}; {} timed changes per in-process variant, {} per process variant, "
      "{} warm-up\n",
      to_string(link.rate_hi), to_string(link.rate_lo), o.changes, o.tc_runs, o.warmup);

  Timings r;
  const std::string verify_cmd = fmt::format("{} netns exec {} {} class show dev {} classid {}", ip_path,
                                             link.router_ns, tc_path, link.ifname, link.classid);
  time_in_process(*guard.ctl, t, link, o, verify_cmd, out, r);
  time_processes(t, link, o, ip_path, tc_path, r);
  out << fmt::format("  after tc: {}\n", capture(verify_cmd));

  const auto t_down = Clock::now();
  guard.ctl->teardown();
  const double down_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_down).count();
  guard.ctl.reset();
  lab::remove_lab_dir(t.topo.name);

  if (bench::g_stop) {
    out << "interrupted (the lab was torn down)\n";
    return 130;
  }
  const Summaries x{summarize(r.set_link), summarize(r.shaper), summarize(r.tc_netns), summarize(r.tc_direct),
                    summarize(r.write_state)};
  print_table(out, x, down_ms);
  if (o.json) print_json(t, link, x, r, up_ms, down_ms);
  return bench::g_stop ? 130 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times in-place WAN link changes: in-process netlink versus a tc process (needs root)"};
  Options o;
  app.add_option("--changes", o.changes, "in-process changes timed (per in-process variant)")
      ->check(CLI::PositiveNumber);
  app.add_option("--tc-runs", o.tc_runs, "tc processes timed (per process variant)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "untimed changes before each variant")->check(CLI::NonNegativeNumber);
  app.add_option("--topology", o.topology_arg, "topology file");
  app.add_option("--lab", o.lab_name, "lab name to use instead of the topology's");
  app.add_option("--src", o.src_dc, "source DC of the link changed (default: the first link's)");
  app.add_option("--dst", o.dst_dc, "destination DC of the link changed");
  app.add_flag("--json", o.json, "print the results as JSON on stdout (the text goes to stderr)");
  app.add_flag("-v,--verbose", o.verbose, "keep wanlab's info logging (one line per set_link)");
  CLI11_PARSE(app, argc, argv);

  spdlog::set_level(o.verbose ? spdlog::level::info : spdlog::level::warn);
  std::ostream& out = o.json ? std::cerr : std::cout;

  bench::install_stop_handlers();
  try {
    return run(o, out);
  } catch (const std::exception& e) {
    std::cerr << "link_change: " << e.what() << "\n";
    return 1;
  }
}
