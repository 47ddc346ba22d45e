#pragma once
// Helpers of the kernel tier: two-DC labs brought up through the real `wanlab` binary with
// `--backend kernel`, and the tools that measure them (ping, iperf3, `status --json`).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "process.hpp"
#include "wanlab/lab/naming.hpp"
#include "wanlab/lab/state.hpp"
#include "wanlab/netlink/netlink.hpp"

namespace wanlab::kernel_test {

using test::run;
using namespace std::chrono_literals;

// The binary under test. The vm tier mirrors it at its build path inside the guest, and
// may name it with WANLAB_BINARY as well.
inline std::string wanlab_bin() {
  const char* env = std::getenv("WANLAB_BINARY");
  return env && *env ? env : WANLAB_BINARY;
}

// A measured figure, printed as it is taken (stderr, so that it shows live on the vm's
// serial console whatever the Catch2 reporter) and kept for the failure messages.
inline void measured(const char* format, ...) __attribute__((format(printf, 1, 2)));
inline void measured(const char* format, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, format);
  std::vsnprintf(line, sizeof line, format, ap);
  va_end(ap);
  std::fprintf(stderr, "MEASURED: %s\n", line);
  std::fflush(stderr);
}

// Wall clock in seconds since the epoch: the clock `ping -D` stamps its replies with.
inline double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

constexpr const char* kUse0 = "198.18.0.2";  // node use-0 (DC 0)
constexpr const char* kEuw0 = "198.18.4.2";  // node euw-0 (DC 1)

// Goodput of TCP over a 1500-byte MTU is at most 1448/1514 of the HTB wire rate
// (timestamps on: 52 bytes of TCP/IP header, 14 of Ethernet).
constexpr double kGoodputShare = 1448.0 / 1514.0;

// Delay tolerance, above the configured RTT. netem never releases a packet early, so the
// lower bound is the configured value itself. Above it come the lab's own forwarding
// (three namespaces, two bridges: tens of microseconds) and the lateness of netem's hrtimer
// watchdog (microseconds natively). Observed: +0.035 ms in the vm tier's instruction-
// counted guest; +1.0 to +1.8 ms in a real-time TCG guest, whose timers fire late when the
// host is busy (tests/vm/README.md). 2 ms or 5 % still catches every unit or direction
// mistake (a factor of 2, 64 or 1000, or a delay not applied).
inline double rtt_tolerance_ms(double rtt_ms) {
  return std::max(2.0, 0.05 * rtt_ms);
}

// Writes a two-DC lab (use, euw; one node each) with the given WAN entries.
inline std::string write_topology(const std::string& lab, const nlohmann::json& wan) {
  const auto path = std::filesystem::temp_directory_path() / (lab + ".json");
  nlohmann::json doc = {{"name", lab},
                        {"description", "kernel tier (tests/kernel)"},
                        {"dcs", {{{"name", "use"}, {"nodes", 1}}, {{"name", "euw"}, {"nodes", 1}}}},
                        {"wan", wan}};
  std::ofstream(path) << doc.dump(2);
  return path.string();
}

inline std::vector<std::string> namespaces_of(const std::string& lab) {
  std::vector<std::string> out;
  for (const auto& n : netlink::Netns::list())
    if (n.starts_with(lab::ns_prefix(lab))) out.push_back(n);
  return out;
}

// A lab up for one test with the kernel backend, always taken down at the end.
class Lab {
 public:
  Lab(std::string name, const nlohmann::json& wan) : name_(std::move(name)) {
    run(wanlab_bin() + " down " + name_);
    const auto file = write_topology(name_, wan);
    const auto t0 = now_s();
    auto r = run(wanlab_bin() + " up " + file + " --backend kernel");
    INFO(r.out);
    REQUIRE(r.code == 0);
    std::fprintf(stderr, "lab %s up in %.2f s (kernel backend)\n", name_.c_str(), now_s() - t0);
    up_ = true;
  }
  ~Lab() {
    if (up_) run(wanlab_bin() + " down " + name_);
  }
  Lab(const Lab&) = delete;
  Lab& operator=(const Lab&) = delete;

  const std::string& name() const { return name_; }

  test::Run down() {
    up_ = false;
    return run(wanlab_bin() + " down " + name_);
  }

  std::string exec(const std::string& node, const std::string& cmd) const {
    return wanlab_bin() + " exec --lab " + name_ + " " + node + " -- " + cmd;
  }

  test::Run link_set(const std::string& src, const std::string& dst, const std::string& flags) const {
    return run(wanlab_bin() + " link set " + src + " " + dst + " --lab " + name_ + " " + flags);
  }

  nlohmann::json status() const {
    auto r = run(wanlab_bin() + " status " + name_ + " --json");
    INFO(r.out);
    REQUIRE(r.code == 0);
    return nlohmann::json::parse(r.out);
  }

  // The status entry of the directed link src -> dst (configuration and counters).
  nlohmann::json link(const std::string& src, const std::string& dst) const {
    const auto st = status();  // (not a temporary: the loop keeps references into it)
    for (const auto& l : st["links"])
      if (l["src"] == src && l["dst"] == dst) return l;
    FAIL("no link " << src << " -> " << dst << " in the status of lab " << name_);
    return {};
  }

  // `tc qdisc show` on the router's egress toward DC dst: an independent reading of what
  // the kernel holds. Empty when iproute2's tc is not installed.
  std::string tc_qdiscs(const std::string& dst) const {
    if (run("command -v tc").code != 0) return {};
    return run("ip netns exec " + lab::ns_router(name_) + " tc qdisc show dev " + lab::if_router_to(dst)).out;
  }

  // Starts a one-off iperf3 server (daemon, JSON output) in a node on a port of its own,
  // so that it never meets the previous one-off server still on its way out.
  int start_iperf_server(const std::string& node) const {
    const int port = next_port_++;
    const auto r = run(exec(node, "iperf3 -s -D -1 -J -p " + std::to_string(port)));
    INFO(r.out);
    REQUIRE(r.code == 0);
    return port;
  }

 private:
  std::string name_;
  bool up_ = false;
  mutable int next_port_ = 5201;
};

inline std::string address_of(const std::string& node) {
  if (node == "use-0") return kUse0;
  if (node == "euw-0") return kEuw0;
  FAIL("no address for node " << node);
  return {};
}

// An iperf3 client run from node `from` to the server listening on `port` in node `to`:
// the client's JSON (with the server's in server_output_json). The client retries while the
// server is not listening yet.
inline nlohmann::json iperf_client_json(const Lab& lab, const std::string& from, const std::string& to, int port,
                                        const std::string& args, int* code = nullptr) {
  test::Run r;
  for (int attempt = 0; attempt < 50; ++attempt) {
    r = run(lab.exec(
        from, "iperf3 -J --get-server-output -p " + std::to_string(port) + " -c " + address_of(to) + " " + args));
    if (r.out.find("unable to connect") == std::string::npos) break;
    std::this_thread::sleep_for(100ms);
  }
  if (code) *code = r.code;
  try {
    return nlohmann::json::parse(r.out.substr(r.out.find('{')));
  } catch (const std::exception& e) {
    return {{"error", std::string("unparseable iperf3 output: ") + e.what() + ": " + r.out}};
  }
}

// An iperf3 run from node `from` to a fresh one-off server in node `to`.
inline nlohmann::json iperf_json(const Lab& lab, const std::string& from, const std::string& to,
                                 const std::string& args, int* code = nullptr) {
  return iperf_client_json(lab, from, to, lab.start_iperf_server(to), args, code);
}

// ---- ping ----

struct PingReply {
  long seq = 0;
  double rtt_ms = 0;
  double at = 0;  // receive time, seconds since the epoch (ping -D)
};

struct Ping {
  int code = -1;
  long transmitted = 0;
  long received = 0;
  std::vector<PingReply> replies;  // in arrival order
  std::string out;

  double loss() const { return transmitted ? 1.0 - double(received) / double(transmitted) : 1.0; }
  double min_ms() const {
    double m = 1e300;
    for (const auto& r : replies) m = std::min(m, r.rtt_ms);
    return m;
  }
  double max_ms() const {
    double m = 0;
    for (const auto& r : replies) m = std::max(m, r.rtt_ms);
    return m;
  }
  double avg_ms() const {
    double s = 0;
    for (const auto& r : replies) s += r.rtt_ms;
    return replies.empty() ? 0 : s / double(replies.size());
  }
  double stdev_ms() const {
    const double a = avg_ms();
    double s = 0;
    for (const auto& r : replies) s += (r.rtt_ms - a) * (r.rtt_ms - a);
    return replies.size() < 2 ? 0 : std::sqrt(s / double(replies.size() - 1));
  }
};

inline Ping parse_ping(int code, std::string out) {
  Ping p;
  p.code = code;
  static const std::regex reply(R"((?:\[(\d+\.\d+)\] )?\d+ bytes from [0-9.]+: icmp_seq=(\d+) ttl=\d+ time=([0-9.]+) ms)");
  static const std::regex summary(R"((\d+) packets transmitted, (\d+) received)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), reply); it != std::sregex_iterator(); ++it) {
    const auto& m = *it;
    p.replies.push_back({std::stol(m[2]), std::stod(m[3]), m[1].matched ? std::stod(m[1]) : 0.0});
  }
  std::smatch m;
  if (std::regex_search(out, m, summary)) {
    p.transmitted = std::stol(m[1]);
    p.received = std::stol(m[2]);
  }
  p.out = std::move(out);
  return p;
}

// `ping -n -D` from a node: count requests at interval seconds.
inline Ping ping(const Lab& lab, const std::string& from, const std::string& to, int count, double interval,
                 const std::string& extra = "") {
  char args[128];
  std::snprintf(args, sizeof args, "ping -n -D -c %d -i %g -W 2 %s", count, interval, extra.c_str());
  auto r = run(lab.exec(from, std::string(args) + " " + to));
  return parse_ping(r.code, std::move(r.out));
}

// A first exchange resolves the neighbours on every hop (four ARP lookups through the
// lab); measurements start after it.
inline void warm_up(const Lab& lab, const std::string& from, const std::string& to) {
  run(lab.exec(from, "ping -n -c 2 -i 0.2 -W 2 " + to));
}

// ---- iperf3 ----

// An iperf3 client run with JSON output: goodput per interval as the receiver saw it, and
// in total (after the omitted warm-up), plus the sender's retransmissions.
struct Iperf {
  int code = -1;
  std::vector<double> interval_bps;
  std::vector<double> interval_start;  // seconds since the server's start, for each of interval_bps
  double total_bps = 0;
  std::uint64_t received_bytes = 0;  // payload, as the receiver counted it
  long retransmits = -1;
  std::string error;
};

// Reads an iperf3 client's JSON (see iperf_client_json).
inline Iperf parse_iperf(const nlohmann::json& j, int code) {
  Iperf out;
  out.code = code;
  try {
    if (j.contains("error")) out.error = j["error"].get<std::string>();
    // Whole seconds only: the server's last interval is a fraction of one, when the
    // client's end reaches it.
    for (const auto& i : j.at("server_output_json").at("intervals"))
      if (!i["sum"].value("omitted", false) && i["sum"]["seconds"].get<double>() > 0.5) {
        out.interval_bps.push_back(i["sum"]["bits_per_second"].get<double>());
        out.interval_start.push_back(i["sum"]["start"].get<double>());
      }
    out.total_bps = j.at("end").at("sum_received").at("bits_per_second").get<double>();
    out.received_bytes = j["end"]["sum_received"].value("bytes", std::uint64_t{0});
    out.retransmits = j["end"]["sum_sent"].value("retransmits", -1L);
  } catch (const std::exception& e) {
    out.error += std::string(" (iperf3 output without results: ") + e.what() + ")";
  }
  return out;
}

inline Iperf iperf(const Lab& lab, const std::string& from, const std::string& to, int seconds,
                   const std::string& extra = "") {
  int code = -1;
  const auto j = iperf_json(lab, from, to, "-t " + std::to_string(seconds) + " " + extra, &code);
  return parse_iperf(j, code);
}

}  // namespace wanlab::kernel_test
