// Flow gating in the userspace engine on a whole lab, with real TCP: two iperf3 flows from
// one DC to another, told apart by the data plane's source-port scheme (common/flows.hpp),
// get the link in turn as their gates open and close; ping, which no gated flow matches,
// is never held; the flows' counters agree with what the receivers got.
//
// The lab is built in this process (api::LabController, userspace backend), since gating
// is an in-process interface (the arbiter's); the tools run through `wanlab exec`.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "iperf.hpp"
#include "process.hpp"
#include "quiet_host.hpp"
#include "wanlab/api/lab_controller.hpp"
#include "wanlab/common/flows.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/lab/state.hpp"

using namespace wanlab;
using namespace std::chrono_literals;
using test::Iperf;
using test::parse_iperf;
using test::run;
using Clock = std::chrono::steady_clock;

namespace {

constexpr double kRate = 100e6;
constexpr double kToolStart = 0.5;                 // s, client launch to its time 0, at most
constexpr std::uint32_t kUse0 = 0xC6120002;        // 198.18.0.2
constexpr std::uint32_t kEuw0 = 0xC6120402;        // 198.18.4.2

// A lab built in this process for one test, always torn down.
struct InProcessLab {
  std::string name;
  std::unique_ptr<api::LabController> ctl;
  InProcessLab(std::string lab, const nlohmann::json& doc) : name(std::move(lab)) {
    run(test::wanlab() + " down " + name);
    api::UpOptions o;
    o.backend = "userspace";
    ctl = std::make_unique<api::LabController>(core::parse_topology(doc, name + ".json", "."), o);
  }
  ~InProcessLab() {
    if (!ctl) return;
    ctl->teardown();
    ctl.reset();
    lab::remove_lab_dir(name);
  }
};

std::string exec(const std::string& lab, const std::string& node, const std::string& cmd) {
  return test::wanlab() + " exec --lab " + lab + " " + node + " -- " + cmd;
}

// Mean goodput over the 0.5 s intervals that lie wholly inside [from, to] s after the
// client's launch, whenever in [0, kToolStart] after it the client's time 0 was.
double mean_within(const Iperf& r, double from, double to, std::size_t& used) {
  double sum = 0;
  used = 0;
  for (std::size_t i = 0; i < r.interval_bps.size(); ++i) {
    const double start = 0.5 * static_cast<double>(i);
    if (start >= from && start + 0.5 + kToolStart <= to) sum += r.interval_bps[i], ++used;
  }
  return used ? sum / static_cast<double>(used) : 0;
}

std::string mbit(double bps) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", bps / 1e6);
  return buf;
}

const shaping::FlowCounters& by_id(const std::vector<shaping::FlowCounters>& c, int id) {
  for (const auto& f : c)
    if (f.id == id) return f;
  FAIL("no counters for gated flow " << id);
  throw std::logic_error("unreachable");
}

constexpr int kA = 0, kB = 1;  // the gated flows' ids
// Phases, in seconds after the clients' launch: both open until 2.5; A alone until 7.5;
// B alone until 12.5; then both open again (A's held packets enter the queue B fills as
// it has room) and the clients run to 15.
constexpr double kOnlyA = 2.5, kOnlyB = 7.5, kEnd = 12.5;

// What the two flows and the ping got, and the flows' counters late in each phase.
struct TurnsRun {
  Iperf a, b;
  test::Run ping;
  std::vector<shaping::FlowCounters> mid, late, end;
};

// Two iperf3 flows from use-0 to euw-0 (A from port_a, B from port_b) and a ping, while the
// gates open and close through the phases.
TurnsRun take_turns(api::LabController& ctl, const std::string& name, std::uint16_t port_a, std::uint16_t port_b) {
  for (const char* port : {"5201", "5202"})
    REQUIRE(run(exec(name, "euw-0", std::string("iperf3 -s -D -1 -J -i 0.5 -p ") + port)).code == 0);
  std::this_thread::sleep_for(300ms);

  // cubic, whatever the host's default: BBR's RTT probe (a 4-packet window for 200 ms every
  // 10 s) would dent a phase's goodput by chance.
  auto client = [&](const char* server_port, std::uint16_t cport) {
    return parse_iperf(run(exec(name, "use-0",
                                std::string("iperf3 -C cubic -J --get-server-output -i 0.5 -t 15 -c 198.18.4.2 -p ") +
                                    server_port + " --cport " + std::to_string(cport))));
  };
  const auto launch = Clock::now();
  TurnsRun r;
  auto& a = r.a;
  auto& b = r.b;
  auto& ping = r.ping;
  std::thread ta([&] { a = client("5201", port_a); });
  std::thread tb([&] { b = client("5202", port_b); });
  std::thread tp([&] {
    std::this_thread::sleep_for(1s);
    ping = run(exec(name, "use-0", "ping -n -i 0.2 -c 55 -W 1 198.18.4.2"));  // 1 s .. 12 s
  });
  auto at = [&](double s) { std::this_thread::sleep_until(launch + std::chrono::duration<double>(s)); };

  at(kOnlyA);
  ctl.set_gate(0, 1, kB, false);
  at(kOnlyB - 0.2);
  r.mid = ctl.flow_counters(0, 1);  // B closed for 4.8 s: it holds what it sent
  ctl.set_gate(0, 1, kA, false);
  ctl.set_gate(0, 1, kB, true);
  at(kEnd - 0.2);
  r.late = ctl.flow_counters(0, 1);
  at(kEnd);
  ctl.set_gate(0, 1, kA, true);
  ta.join();
  tb.join();
  tp.join();
  std::this_thread::sleep_for(100ms);  // counters are published every 10 ms
  r.end = ctl.flow_counters(0, 1);
  return r;
}

// Declared again (B only): B keeps its counters, its gate closed; then gating ends.
void check_declared_again(api::LabController& ctl, const std::vector<shaping::GatedFlow>& declared,
                          const std::vector<shaping::FlowCounters>& end) {
  ctl.set_flows(0, 1, {declared[1]});
  const auto again = ctl.flow_counters(0, 1);
  REQUIRE(again.size() == 1);
  CHECK(again[0].id == kB);
  CHECK_FALSE(again[0].open);
  CHECK(again[0].packets == by_id(end, kB).packets);
  ctl.set_flows(0, 1, {});
  CHECK(ctl.flow_counters(0, 1).empty());
}

// Goodput per phase: the open flow has the link, the closed one next to nothing. False when
// too few intervals were measured to tell.
bool check_goodput(test::Expect& e, const Iperf& a, const Iperf& b) {
  std::size_t n1a, n1b, n2a, n2b, n3a;
  const double a1 = mean_within(a, kOnlyA + 0.5, kOnlyB, n1a), b1 = mean_within(b, kOnlyA + 0.5, kOnlyB, n1b);
  const double a2 = mean_within(a, kOnlyB + 0.5, kEnd, n2a), b2 = mean_within(b, kOnlyB + 1.0, kEnd, n2b);
  const double a3 = mean_within(a, kEnd + 0.5, 15.0, n3a);
  std::string intervals = "\n  A:";
  for (double v : a.interval_bps) intervals += " " + mbit(v);
  intervals += "\n  B:";
  for (double v : b.interval_bps) intervals += " " + mbit(v);
  std::fprintf(stderr,
               "flow gates, 100 Mbit/s link, 10 ms each way: A only: A %s, B %s Mbit/s (%zu intervals); "
               "B only: A %s, B %s Mbit/s (%zu intervals); both open again: A %s Mbit/s; goodput per 0.5 s "
               "interval:%s\n",
               mbit(a1).c_str(), mbit(b1).c_str(), n1a, mbit(a2).c_str(), mbit(b2).c_str(), n2b, mbit(a3).c_str(),
               intervals.c_str());
  if (!e(std::min({n1a, n1b, n2a, n2b}) >= 6, "fewer than 6 intervals in a phase")) return false;
  if (!e(n3a >= 2, "fewer than 2 intervals after both reopened")) return false;
  e(a1 >= 0.85 * kRate, "A alone: " + mbit(a1) + " Mbit/s, expected at least 85 % of 100");
  CHECK(b1 <= 0.05 * kRate);
  CHECK(a2 <= 0.05 * kRate);
  e(b2 >= 0.85 * kRate, "B alone: " + mbit(b2) + " Mbit/s, expected at least 85 % of 100");
  // A's connection came back, sharing the link with B.
  e(a3 >= 0.05 * kRate, "A after both reopened: " + mbit(a3) + " Mbit/s, expected at least 5 Mbit/s");
  return true;
}

// The counters at the end of each phase: the closed flow held packets (at most a queue's
// worth: the link's default limit, 1.5 x BDP = 250 packets), the open one sent since it
// opened and holds none.
void check_counters(const TurnsRun& turns) {
  const auto &mid = turns.mid, &late = turns.late, &end = turns.end;
  const auto &a = turns.a, &b = turns.b;
  const auto capacity = 250u;
  const auto& mb = by_id(mid, kB);
  const auto& ma = by_id(mid, kA);
  INFO("mid: A sent " << ma.packets << " held " << ma.held_packets << "; B sent " << mb.packets << " held "
                      << mb.held_packets << " dropped " << mb.dropped);
  CHECK(ma.open);
  CHECK_FALSE(mb.open);
  CHECK(mb.held_packets > 0);
  CHECK(mb.held_packets <= capacity);
  CHECK(ma.held_packets == 0);
  REQUIRE((ma.first_out_ns && ma.opened_ns && ma.last_out_ns && mb.last_out_ns));
  CHECK(*ma.first_out_ns >= *ma.opened_ns);
  CHECK(*ma.last_out_ns > *mb.last_out_ns);  // B sent nothing for a while
  const auto& la = by_id(late, kA);
  const auto& lb = by_id(late, kB);
  INFO("late: A sent " << la.packets << " held " << la.held_packets << " dropped " << la.dropped << "; B sent "
                       << lb.packets << " held " << lb.held_packets);
  CHECK_FALSE(la.open);
  CHECK(lb.open);
  CHECK(la.held_packets > 0);
  CHECK(la.held_packets <= capacity);
  CHECK(lb.held_packets == 0);
  REQUIRE((lb.opened_ns && lb.first_out_ns));
  CHECK(*lb.opened_ns > *mb.last_out_ns);
  CHECK(*lb.first_out_ns >= *lb.opened_ns);
  CHECK(lb.packets > mb.packets);
  std::fprintf(stderr,
               "  counters: A closed 5 s: %llu held, %llu dropped at the gate; B closed 5 s: %llu held, %llu dropped; "
               "B's first packet %.3f ms after its gate opened\n",
               static_cast<unsigned long long>(la.held_packets), static_cast<unsigned long long>(la.dropped),
               static_cast<unsigned long long>(mb.held_packets), static_cast<unsigned long long>(mb.dropped),
               static_cast<double>(*lb.first_out_ns - *lb.opened_ns) / 1e6);
  // Each flow's wire bytes against what its receiver got (headers and retransmissions on
  // top); nothing held once both gates are open.
  for (const auto& [id, r] : {std::pair{kA, &a}, std::pair{kB, &b}}) {
    const auto& f = by_id(end, id);
    INFO("flow " << id << ": " << f.bytes << " bytes on the wire, " << r->received_bytes << " received");
    CHECK(f.open);
    CHECK(f.held_packets == 0);
    CHECK(static_cast<double>(f.bytes) >= r->received_bytes);
    CHECK(static_cast<double>(f.bytes) <= 1.25 * r->received_bytes);
  }
  CHECK(by_id(end, kB).packets > lb.packets);
}

// Ping crossed the gated link throughout, never held: replies (a full drop-tail queue may
// take one or two), none late beyond the link's delay plus a full queue (250 packets at
// 100 Mbit/s: 30 ms).
void check_ping(test::Expect& e, const test::Run& ping) {
  INFO(ping.out);
  std::smatch m;
  REQUIRE(std::regex_search(ping.out, m, std::regex(R"((\d+) received)")));
  e(std::stoi(m[1]) >= 52, "ping: " + std::string(m[1]) + " of 55 replies, expected at least 52");
  const std::regex re(R"(time=([0-9.]+) ms)");
  double worst = 0;
  for (auto it = std::sregex_iterator(ping.out.begin(), ping.out.end(), re); it != std::sregex_iterator(); ++it)
    worst = std::max(worst, std::stod((*it)[1]));
  std::fprintf(stderr, "  ping through the gated link: worst RTT %.3f ms (configured 20 ms)\n", worst);
  e(worst < 100, "ping: worst RTT " + std::to_string(worst) + " ms, expected under 100");
}

}  // namespace

TEST_CASE("gated flows take a 100 Mbit/s link in turn; ping is never held", "[netns][gate]") {
  const std::string name = "wlg-turns";
  // One node sends both flows, as two GPUs of one server would (slots 0 and 1).
  const nlohmann::json doc = {
      {"name", name},
      {"dcs", {{{"name", "use"}, {"nodes", 1}}, {{"name", "euw"}, {"nodes", 1}}}},
      {"wan", {{{"between", {"use", "euw"}}, {"delay", "10ms"}, {"rate", "100Mbit"}}}}};
  InProcessLab lab(name, doc);
  auto& ctl = *lab.ctl;
  REQUIRE(ctl.gates_flows());
  const std::uint16_t port_a = flows::source_port(0, 0), port_b = flows::source_port(1, 0);
  const std::vector<shaping::GatedFlow> declared{
      {kA, {{kUse0, kEuw0, flows::slot_port(0), flows::kFlowPortMask}}},
      {kB, {{kUse0, kEuw0, flows::slot_port(1), flows::kFlowPortMask}}}};
  ctl.set_flows(0, 1, declared);
  CHECK_THROWS_AS(ctl.set_gate(0, 1, 7, true), std::out_of_range);
  auto c = ctl.flow_counters(0, 1);
  REQUIRE(c.size() == 2);
  CHECK_FALSE(by_id(c, kA).open);
  CHECK_FALSE(by_id(c, kB).open);
  test::measure_on_quiet_host("gated flows in turn", [&] {
    // A later attempt declares the flows again (the last one ended gating) and starts over.
    ctl.set_flows(0, 1, declared);
    ctl.set_gate(0, 1, kA, true);
    ctl.set_gate(0, 1, kB, true);
    const auto r = take_turns(ctl, name, port_a, port_b);
    REQUIRE(r.end.size() == 2);
    check_declared_again(ctl, declared, r.end);
    const auto &a = r.a, &b = r.b;
    INFO(a.error << "\n" << b.error);
    REQUIRE(a.code == 0);  // both connections survived being held
    REQUIRE(b.code == 0);
    test::Expect e;
    // iperf3 reports fewer intervals when its process was kept off the CPU.
    if (!e(a.interval_bps.size() >= 30 && b.interval_bps.size() >= 30,
           "intervals: A " + std::to_string(a.interval_bps.size()) + ", B " + std::to_string(b.interval_bps.size()) +
               ", expected 30 each"))
      return e;
    if (!check_goodput(e, a, b)) return e;
    check_counters(r);
    check_ping(e, r.ping);
    return e;
  });
}
