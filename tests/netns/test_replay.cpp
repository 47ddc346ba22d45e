// Trace replay on whole labs, measured with real tools inside the lab: iperf3 (receiver-side
// 0.5 s intervals) follows rate steps, ping sees a delay step, a TCP flow survives an
// outage and recovers; and the replay CLI (start, status, link set, stop, errors).
//
// Timing: a replay starts inside the controller while the `wanlab replay` (or `up`) command
// runs, between t0 and t1 on the test's clock; the tool's own time 0 comes after the test
// launches it (t2) and after its start-up (iperf3: connection and parameter exchange, at
// most kToolStart). So the tool's time 0 lies in [t2 - t1, t2 - t0 + kToolStart] of replay
// time, and a measurement is checked against a step only when it lies wholly inside the
// step's window for every offset in that range. The controller's own start time of the
// replay (status "started_at") caps the upper end when the command was slow to return.
#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include "iperf.hpp"
#include "process.hpp"
#include "quiet_host.hpp"

using namespace wanlab;
using namespace std::chrono_literals;
using test::Iperf;
using test::parse_iperf;
using test::run;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kTraces = std::string(WANLAB_SOURCE_DIR) + "/traces/";
constexpr double kGoodputShare = 1448.0 / 1514.0;  // TCP payload per wire byte at MTU 1500
constexpr double kToolStart = 0.25;                // s, tool launch to its time 0, at most

std::string write_topology(const std::string& lab, const std::string& rtt, const std::string& rate,
                           const std::string& trace = {}, int use_nodes = 1) {
  const auto path = std::filesystem::temp_directory_path() / (lab + ".json");
  nlohmann::json use_euw = {{"from", "use"}, {"to", "euw"}, {"rtt", rtt}, {"rate", rate}};
  if (!trace.empty()) use_euw["trace"] = trace;
  nlohmann::json doc = {{"name", lab},
                        {"dcs", {{{"name", "use"}, {"nodes", use_nodes}}, {{"name", "euw"}, {"nodes", 1}}}},
                        {"wan", {use_euw, {{"from", "euw"}, {"to", "use"}, {"rtt", rtt}, {"rate", rate}}}}};
  std::ofstream(path) << doc.dump(2);
  return path.string();
}

// Brings a lab up for one test (timing the `up`) and always takes it down.
struct LabGuard {
  std::string lab;
  Clock::time_point up_start, up_end;
  LabGuard(std::string name, const std::string& file, const std::string& backend = "auto") : lab(std::move(name)) {
    run(test::wanlab() + " down " + lab);
    up_start = Clock::now();
    auto r = run(test::wanlab() + " up --backend " + backend + " " + file);
    up_end = Clock::now();
    INFO(r.out);
    REQUIRE(r.code == 0);
  }
  ~LabGuard() { run(test::wanlab() + " down " + lab); }
};

std::string exec(const std::string& lab, const std::string& node, const std::string& cmd) {
  return test::wanlab() + " exec --lab " + lab + " " + node + " -- " + cmd;
}

double secs(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Where the tool's time 0 lies in replay time.
struct Offset {
  double min = 0, max = 0;
};
Offset offset(Clock::time_point t0, Clock::time_point t1, Clock::time_point t2, double tool_start) {
  return {secs(t2 - t1), secs(t2 - t0) + tool_start};
}

// Seconds since the epoch of a controller timestamp ("2026-11-27T08:40:12.123Z").
std::optional<double> epoch_seconds(const std::string& utc) {
  std::tm tm{};
  const char* rest = ::strptime(utc.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (rest == nullptr) return std::nullopt;
  double frac = 0;
  if (*rest == '.') frac = std::strtod(rest, nullptr);
  return static_cast<double>(::timegm(&tm)) + frac;
}

double epoch_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A replay started through the CLI: [t0, t1] around the command, and the controller's own
// start time of it (status "started_at", to the millisecond).
struct ReplayStart {
  Clock::time_point t0, t1;
  std::optional<double> started_at;  // s since the epoch
};

// Where the tool's time 0 (launched at t2, epoch time t2_epoch) lies in replay time. The
// controller's start time narrows the upper end: a `wanlab replay` that was slow to return
// (e.g. waiting for the kernel's RTNL lock) no longer widens the range past judging.
Offset offset(const ReplayStart& r, Clock::time_point t2, double t2_epoch, double tool_start) {
  Offset o = offset(r.t0, r.t1, t2, tool_start);
  if (r.started_at) o.max = std::max(o.min, std::min(o.max, t2_epoch - *r.started_at + 0.001 + tool_start));
  return o;
}

std::string describe(const Offset& o) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "the tool's time 0 lies in [%.3f, %.3f] s of replay time", o.min, o.max);
  return buf;
}

nlohmann::json status_json(const std::string& lab) {
  auto r = run(test::wanlab() + " status " + lab + " --json");
  REQUIRE(r.code == 0);
  return nlohmann::json::parse(r.out);
}

// Starts a replay on use->euw through the CLI. Waits first for the kernel's RTNL lock (a
// link dump takes it), which the cleanup of a lab just torn down can hold for a while.
ReplayStart start_replay(const std::string& lab, const std::string& trace, const std::string& extra = {}) {
  run("ip -o link show >/dev/null");
  ReplayStart r;
  r.t0 = Clock::now();
  auto out = run(test::wanlab() + " replay " + trace + " --link use:euw --lab " + lab + " " + extra);
  r.t1 = Clock::now();
  INFO(out.out);
  REQUIRE(out.code == 0);
  const auto s = status_json(lab);
  for (const auto& rp : s["replays"])
    if (rp.contains("started_at") && rp["started_at"].is_string()) r.started_at = epoch_seconds(rp["started_at"]);
  return r;
}

void start_iperf_server(const std::string& lab, const std::string& node) {
  REQUIRE(run(exec(lab, node, "iperf3 -s -D -1 -J -i 0.5")).code == 0);
  std::this_thread::sleep_for(300ms);
}

Iperf iperf(const std::string& lab, int seconds) {
  return test::parse_iperf(
      run(exec(lab, "use-0", "iperf3 -J --get-server-output -i 0.5 -c 198.18.4.2 -t " + std::to_string(seconds))));
}

// Interval i (of `len` s) covers tool time [i*len, (i+1)*len]: the intervals that lie in
// [from, to] of replay time for every offset.
std::vector<std::size_t> intervals_within(const Offset& o, double len, std::size_t n, double from, double to) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < n; ++i)
    if (o.min + static_cast<double>(i) * len >= from && o.max + static_cast<double>(i + 1) * len <= to)
      out.push_back(i);
  return out;
}

// iperf3's receiver counts bytes when its process reads them: on a busy machine a stall of
// the receiving process (tens of milliseconds) moves bytes from one 0.5 s interval into the
// next, so one interval reads low and its neighbour high while the link delivered steadily.
// The goodput is therefore checked over 1 s (every two adjacent intervals of `idx`) within
// `tol`, and each single interval within twice that.
void check_goodput(test::Expect& e, const std::vector<double>& bps, const std::vector<std::size_t>& idx,
                   double expected, double tol) {
  auto at = [](double v) {
    std::ostringstream o;
    o << v / 1e6 << " Mbit/s";
    return o.str();
  };
  for (std::size_t k = 0; k < idx.size(); ++k) {
    const auto i = idx[k];
    e(std::abs(bps[i] - expected) / expected < 2 * tol, "interval " + std::to_string(i) + ": " + at(bps[i]) +
                                                            ", expected " + at(expected) + " within " +
                                                            std::to_string(static_cast<int>(200 * tol)) + " %");
    if (k + 1 < idx.size() && idx[k + 1] == i + 1) {
      const double pair = (bps[i] + bps[i + 1]) / 2;
      e(std::abs(pair - expected) / expected < tol, "intervals " + std::to_string(i) + "-" + std::to_string(i + 1) +
                                                        ": " + at(pair) + ", expected " + at(expected) + " within " +
                                                        std::to_string(static_cast<int>(100 * tol)) + " %");
    }
  }
}

std::string mbit(double bps) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", bps / 1e6);
  return buf;
}

}  // namespace

TEST_CASE("rate steps 50 -> 10 -> 30 Mbit/s: iperf3 follows each within 10% from 0.5 s after the step",
          "[netns][replay]") {
  const std::string backend = GENERATE(as<std::string>{}, "userspace", "kernel");
  const std::string lab = "wlr-steps-" + backend.substr(0, 4);
  test::measure_on_quiet_host("rate steps (" + backend + ")", [&] {
    // A short RTT, so TCP follows a step within a few round trips.
    LabGuard g(lab, write_topology(lab, "4ms", "50Mbit"), backend);
    start_iperf_server(lab, "euw-0");
    const auto rs = start_replay(lab, kTraces + "steps-50-10-30.csv");
    const auto t2 = Clock::now();
    const double t2_epoch = epoch_now();
    const auto r = iperf(lab, 9);
    INFO(r.error);
    REQUIRE(r.code == 0);
    test::Expect e;  // iperf3 reports fewer intervals when its process was kept off the CPU
    if (!e(r.interval_bps.size() >= 17, std::to_string(r.interval_bps.size()) + " intervals, expected 17")) return e;
    const auto o = offset(rs, t2, t2_epoch, kToolStart);


    struct StepWindow {
      double from, to, bps;
    };
    const std::vector<StepWindow> steps{{0.5, 3, 50e6}, {3.5, 6, 10e6}, {6.5, 9, 30e6}};
    std::string report = "replay rate steps (" + backend + "), Mbit/s goodput per 0.5 s interval:";
    for (const auto& s : steps) {
      const double expected = s.bps * kGoodputShare;
      const auto idx = intervals_within(o, 0.5, r.interval_bps.size(), s.from, s.to);
      INFO("step to " << s.bps / 1e6 << " Mbit/s, replay offset of iperf3 in [" << o.min << ", " << o.max << "] s");
      e(idx.size() >= 3, std::to_string(idx.size()) + " intervals within the step, expected 3: " + describe(o));
      report += "\n  " + mbit(s.bps) + " Mbit/s step (expected goodput " + mbit(expected) + "):";
      for (auto i : idx) report += " " + mbit(r.interval_bps[i]);
      check_goodput(e, r.interval_bps, idx, expected, 0.10);
    }
    std::fprintf(stderr, "%s\n", report.c_str());

    // The replay ran to its end: the link keeps 30 Mbit/s, and status says so.
    std::this_thread::sleep_for(200ms);
    const auto s = status_json(lab);
    REQUIRE(s["replays"].size() == 1);
    const auto& rp = s["replays"][0];
    CHECK(rp["state"] == "finished");
    CHECK(rp["step"] == 3);
    CHECK(rp["applied"] == 3);
    // Three steps are too few for a p99 (bench/replay_lateness measures it); the middle one
    // counts. A step's lateness is the replay thread's wake-up plus the change itself. The
    // wake-up is the replay's own timing: under 2 ms. The change is the backend's work: hot,
    // 15-20 us for the kernel's class and leaf (bench/link_change); after seconds idle on a
    // VM whose host is busy, the same netlink messages measured 7-10 ms (cold caches and page
    // faults on the host's side), and one can wait for the RTNL lock that the cleanup of a lab
    // just torn down holds, so its bound only catches a change gone wrong.
    const double wake = rp["wake_ms"]["p50"].get<double>(), apply = rp["apply_ms"]["p50"].get<double>();
    e(wake < 2.0, "step wake-up lateness p50 " + std::to_string(wake) + " ms, expected under 2");
    e(apply < 25.0, "step apply time p50 " + std::to_string(apply) + " ms, expected under 25");
    for (const auto& l : s["links"])
      if (l["src"] == "use") CHECK(l["rate"] == "30Mbit");
    std::fprintf(stderr, "  step lateness (%s): p50 %.3f ms, p99 %.3f ms, max %.3f ms; wake-up p50 %.3f ms, apply p50 %.3f ms\n",
                 backend.c_str(), rp["lateness_ms"]["p50"].get<double>(), rp["lateness_ms"]["p99"].get<double>(),
                 rp["lateness_ms"]["max"].get<double>(), wake, apply);
    return e;
  });
}

TEST_CASE("a delay step named by the topology shows in ping RTTs within 0.5 ms", "[netns][replay]") {
  const std::string lab = "wlr-delay";
  test::measure_on_quiet_host("delay step", [&] {
    // The trace on use->euw sets the one-way delay to 2 ms, then 12 ms from 2 s on; euw->use
    // keeps 2 ms. `up` starts the replay.
    // use-1 is for the host's own RTT on an unshaped path (the DC's LAN), measured after.
    LabGuard g(lab, write_topology(lab, "4ms", "50Mbit", kTraces + "delay-step.csv", 2));
    const auto s = status_json(lab);
    if (!s["delay_applied"].get<bool>()) {
      WARN("skipped: this lab's backend applies no delay (kernel without netem)");
      return test::Expect{};
    }
    REQUIRE(s["replays"].size() == 1);

    const auto t2 = Clock::now();
    // 0.05 s apart, 80 probes: 4 s. Each reply line: "icmp_seq=N ttl=.. time=X ms".
    auto p = run(exec(lab, "use-0", "ping -n -i 0.05 -c 80 -W 1 198.18.4.2"));
    INFO(p.out);
    REQUIRE(p.code == 0);
    const auto o = offset(g.up_start, g.up_end, t2, 0.05);
    const std::regex re(R"(icmp_seq=(\d+) .*time=([0-9.]+) ms)");
    std::vector<double> before, after;
    for (auto it = std::sregex_iterator(p.out.begin(), p.out.end(), re); it != std::sregex_iterator(); ++it) {
      const double sent = 0.05 * (std::stod((*it)[1]) - 1);  // tool time
      const double rtt = std::stod((*it)[2]);
      if (o.max + sent + 0.02 <= 2.0) before.push_back(rtt);  // the reply is back before the step too
      if (o.min + sent >= 2.5) after.push_back(rtt);
    }
    // The host's own RTT for a probe every 0.05 s on a path without the engine (use-0 to use-1
    // across the DC's LAN), for the report: hot, a ping there takes 0.03 ms; one every 0.05 s
    // measured 0.15-0.5 ms on a VM whose busy host leaves caches cold between probes. The WAN
    // probes pay that too, twice over (each way through the engine's rings): 0.45-0.9 ms above
    // the configured RTT, the same before and after the step.
    auto lan = run(exec(lab, "use-0", "ping -n -i 0.05 -c 40 -W 1 198.18.0.3"));
    INFO(lan.out);
    REQUIRE(lan.code == 0);
    std::vector<double> host;
    for (auto it = std::sregex_iterator(lan.out.begin(), lan.out.end(), re); it != std::sregex_iterator(); ++it)
      host.push_back(std::stod((*it)[2]));
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    auto share_within = [](const std::vector<double>& v, double target) {
      return static_cast<double>(
                 std::count_if(v.begin(), v.end(), [&](double x) { return std::abs(x - target) <= 0.5; })) /
             static_cast<double>(v.size());
    };
    test::Expect e;
    if (!e(before.size() >= 10, std::to_string(before.size()) + " replies before the step, expected 10")) return e;
    if (!e(after.size() >= 10, std::to_string(after.size()) + " replies after the step, expected 10")) return e;
    REQUIRE(!host.empty());
    const double m_before = median(before), m_after = median(after), step = m_after - m_before;
    const auto min_before = *std::min_element(before.begin(), before.end());
    const auto min_after = *std::min_element(after.begin(), after.end());
    std::fprintf(stderr,
                 "replay delay step: ping RTT median %.3f ms before (expected 4), %.3f ms after (expected 14), "
                 "step %.3f ms (expected 10); min %.3f / %.3f ms; within 0.5 ms of its median: %.0f%% / %.0f%% of "
                 "%zu / %zu probes; the host's own RTT on the LAN: median %.3f ms\n",
                 m_before, m_after, step, min_before, min_after, 100 * share_within(before, m_before),
                 100 * share_within(after, m_after), before.size(), after.size(), median(host));

    // The step is what the replay changed: 10 ms more RTT, within 0.5 ms.
    e(std::abs(step - 10.0) <= 0.5, "RTT step " + std::to_string(step) + " ms (median " + std::to_string(m_before) +
                                        " -> " + std::to_string(m_after) + " ms), expected 10 +- 0.5");
    // Every probe carries the delay: none comes back early, and what the host adds stays small.
    CHECK(min_before >= 3.5);
    CHECK(min_after >= 13.5);
    e(m_before <= 5.5, "median RTT before the step " + std::to_string(m_before) + " ms, expected 4 (+ at most 1.5)");
    // The link has no jitter: most probes within 0.5 ms of their median. On a loaded machine
    // some come back late (the engine thread or ping waiting for a CPU): allow 20 % of those.
    e(share_within(before, m_before) >= 0.8, "within 0.5 ms of the median before the step: " +
                                                 std::to_string(100 * share_within(before, m_before)) + " %, expected 80 %");
    e(share_within(after, m_after) >= 0.8, "within 0.5 ms of the median after the step: " +
                                               std::to_string(100 * share_within(after, m_after)) + " %, expected 80 %");
    return e;
  });
}

TEST_CASE("an outage (rate 0 for 2.5 s) stalls a TCP flow, which then recovers", "[netns][replay]") {
  const std::string backend = GENERATE(as<std::string>{}, "userspace", "kernel");
  const std::string lab = "wlr-out-" + backend.substr(0, 4);
  test::measure_on_quiet_host("outage (" + backend + ")", [&] {
    LabGuard g(lab, write_topology(lab, "4ms", "50Mbit"), backend);
    start_iperf_server(lab, "euw-0");
    const auto rs = start_replay(lab, kTraces + "outage.csv");
    const auto t2 = Clock::now();
    const double t2_epoch = epoch_now();
    const auto r = iperf(lab, 9);
    INFO(r.error);
    REQUIRE(r.code == 0);  // the connection survived the outage
    test::Expect e;
    if (!e(r.interval_bps.size() >= 17, std::to_string(r.interval_bps.size()) + " intervals, expected 17")) return e;
    const auto o = offset(rs, t2, t2_epoch, kToolStart);
    const double expected = 50e6 * kGoodputShare;


    const auto before = intervals_within(o, 0.5, r.interval_bps.size(), 0.5, 2.0);
    const auto during = intervals_within(o, 0.5, r.interval_bps.size(), 2.0, 4.5);
    if (!e(!before.empty(), "no interval before the outage: " + describe(o))) return e;
    if (!e(during.size() >= 3, std::to_string(during.size()) + " intervals during the outage, expected 3")) return e;
    std::string report = "replay outage (" + backend + "), Mbit/s per 0.5 s interval:";
    for (std::size_t i = 0; i < r.interval_bps.size(); ++i) report += " " + mbit(r.interval_bps[i]);
    check_goodput(e, r.interval_bps, before, expected, 0.10);
    // Nothing gets through during the outage (a few packets queued before it may).
    for (auto i : during)
      CHECK(r.interval_bps[i] < 0.05 * expected);  // the link's doing, not the host's
    // Recovery: the first interval back within 10% of the rate, and all after it.
    std::optional<double> recovered_at;  // replay time, latest possible
    std::optional<std::size_t> first_traffic, first_full;
    for (std::size_t i = 0; i < r.interval_bps.size(); ++i) {
      const double start = o.min + 0.5 * static_cast<double>(i);
      if (start < 4.5 - 0.5) continue;
      if (!first_traffic && r.interval_bps[i] > 0.05 * expected) first_traffic = i;
      if (std::abs(r.interval_bps[i] - expected) / expected < 0.10) {
        first_full = i;
        recovered_at = o.max + 0.5 * static_cast<double>(i + 1);
        std::vector<std::size_t> rest;
        for (std::size_t k = i; k < r.interval_bps.size(); ++k) rest.push_back(k);
        check_goodput(e, r.interval_bps, rest, expected, 0.10);
        break;
      }
    }
    if (!e(recovered_at.has_value(), "never back within 10 % of the rate after the outage")) return e;
    // The outage ends at 4.5 s; full rate again within 2 s (measured at 0.5 s resolution).
    auto span = [&](std::size_t i, double edge) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "[%.2f, %.2f] s", o.min + 0.5 * (static_cast<double>(i) + edge),
                    o.max + 0.5 * (static_cast<double>(i) + edge));
      return std::string(buf);
    };
    std::fprintf(stderr,
                 "%s\n  traffic again in the interval starting at replay time %s; within 10%% of %s Mbit/s in the "
                 "interval ending at %s: at most %.2f s after the outage ended (4.5 s)\n",
                 report.c_str(), first_traffic ? span(*first_traffic, 0).c_str() : "?", mbit(expected).c_str(),
                 span(*first_full, 1).c_str(), *recovered_at - 4.5);
    e(*recovered_at - 4.5 <= 2.0, "full rate again " + std::to_string(*recovered_at - 4.5) + " s after the outage, expected within 2 s");
    return e;
  });
}

TEST_CASE("replay CLI: errors, status, link set on a replayed link, stop", "[netns][replay]") {
  const std::string lab = "wlr-cli";
  LabGuard g(lab, write_topology(lab, "4ms", "50Mbit"));
  const auto dir = std::filesystem::temp_directory_path();

  // A broken trace is refused before it reaches the controller, naming line and column.
  const auto bad = (dir / "wlr-bad.csv").string();
  std::ofstream(bad) << "time,rate\n0s,50Mbit\n1s,10Mbps\n";
  auto r = run(test::wanlab() + " replay " + bad + " --link use:euw --lab " + lab);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("wlr-bad.csv: line 3, column 2 (rate): '10Mbps'"));
  r = run(test::wanlab() + " replay " + kTraces + "steps-50-10-30.csv --link use:nowhere --lab " + lab);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("no DC named 'nowhere'"));
  r = run(test::wanlab() + " replay " + kTraces + "steps-50-10-30.csv --link use-euw --lab " + lab);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("SRC:DST"));
  const auto no_end = (dir / "wlr-no-end.csv").string();
  std::ofstream(no_end) << "time,rate\n0s,50Mbit\n1s,10Mbit\n";
  r = run(test::wanlab() + " replay " + no_end + " --loop --link use:euw --lab " + lab);
  CHECK(r.code == 2);  // no end, so no loop period
  CHECK_THAT(r.out, Catch::Contains("no end"));
  r = run(test::wanlab() + " replay --stop --link use:euw --lab " + lab);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("no trace is replaying on link use->euw"));

  // A fast looping trace: 40 and 45 Mbit/s alternating every 10 ms.
  const auto fast = (dir / "wlr-fast.csv").string();
  std::ofstream(fast) << "#@ mode=loop end=0.02s\ntime,rate\n0s,40Mbit\n0.01s,45Mbit\n";
  r = run(test::wanlab() + " replay " + fast + " --link use:euw --lab " + lab);
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("2 steps over 0.02s (loop), rate 40Mbit .. 45Mbit"));
  std::this_thread::sleep_for(500ms);
  auto s = status_json(lab);
  REQUIRE(s["replays"].size() == 1);
  const auto& rp = s["replays"][0];
  CHECK(rp["link"] == "use:euw");
  CHECK(rp["state"] == "running");
  CHECK(rp["steps"] == 2);
  CHECK(rp["loops"].get<std::uint64_t>() >= 15);
  CHECK(rp["next_step_in_ms"].get<double>() <= 10.0);
  CHECK(rp["failed"] == 0);  // (steps may be skipped on a busy machine: a wake-up 10 ms late skips one)
  CHECK(rp["started_at"].get<std::string>().size() == 24);  // 2026-11-21T06:41:00.123Z
  const auto human = run(test::wanlab() + " status " + lab);
  CHECK_THAT(human.out, Catch::Contains("lateness p50/p99/max"));
  CHECK_THAT(human.out, Catch::Contains("wlr-fast.csv"));

  // link set on the replayed link applies, and says the replay will set the rate again.
  r = run(test::wanlab() + " link set use euw --lab " + lab + " --rate 20Mbit --delay 3ms");
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("is replaying") && Catch::Contains("sets rate again"));
  std::this_thread::sleep_for(100ms);  // the replay's next steps set the rate again

  r = run(test::wanlab() + " replay --stop --link use:euw --lab " + lab);
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("stopped replay of"));
  s = status_json(lab);
  CHECK(s["replays"].empty());
  // The link keeps the values in force: the trace's rate, the delay of the link set.
  for (const auto& l : s["links"])
    if (l["src"] == "use") {
      CHECK((l["rate"] == "40Mbit" || l["rate"] == "45Mbit"));
      CHECK(l["delay"] == "3ms");
    }
  r = run(test::wanlab() + " replay --stop --lab " + lab);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("no replay was running"));
}
