#include "wanlab/run/results.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <limits>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "wanlab/common/version.hpp"
#include "wanlab/workload/metrics.hpp"

namespace wanlab::run {

std::vector<TcpSample> tcp_samples_from_json(int src, const nlohmann::json& j) {
  if (!j.is_array()) throw std::invalid_argument("tcp: not an array");
  std::vector<TcpSample> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const auto& e = j[i];
    const auto where = [&](const char* field) { return fmt::format("tcp[{}].{}", i, field); };
    if (!e.is_object()) throw std::invalid_argument(fmt::format("tcp[{}]: not an object", i));
    const auto count = [&](const char* field) -> std::uint32_t {
      const auto it = e.find(field);
      if (it == e.end()) throw std::invalid_argument(where(field) + ": missing");
      // (an unsigned value past INT64_MAX reads as negative here)
      if (!it->is_number_integer() || it->get<std::int64_t>() < 0 || it->get<std::int64_t>() > 0xffffffffLL)
        throw std::invalid_argument(where(field) + ": not a count");
      return static_cast<std::uint32_t>(it->get<std::int64_t>());
    };
    TcpSample t;
    t.src = src;
    const auto peer = e.find("peer");
    if (peer == e.end() || !peer->is_number_integer()) throw std::invalid_argument(where("peer") + ": not a worker");
    t.dst = peer->get<int>();
    t.cwnd = count("cwnd");
    if (const auto ss = e.find("ssthresh"); ss == e.end())
      throw std::invalid_argument(where("ssthresh") + ": missing");
    else if (!ss->is_null())
      t.ssthresh = count("ssthresh");
    t.srtt_us = count("srtt_us");
    t.mss = count("mss");
    t.retransmits = count("retransmits");
    if (const auto p = e.find("paced"); p != e.end()) {
      if (!p->is_boolean()) throw std::invalid_argument(where("paced") + ": not true or false");
      t.paced = p->get<bool>();
    }
    out.push_back(t);
  }
  return out;
}

nlohmann::json tcp_summary(const workload::Plan& plan, const std::vector<TcpSample>& samples) {
  struct Acc {
    std::vector<double> cwnd, ssthresh, srtt_ms, mss;
    std::uint64_t retransmits = 0;
    int in_slow_start = 0;
    int paced = 0, pacing_known = 0;
  };
  std::map<std::pair<std::size_t, std::size_t>, Acc> by_link;
  const auto n = plan.workers.size();
  for (const auto& t : samples) {
    if (t.src < 0 || t.dst < 0 || static_cast<std::size_t>(t.src) >= n || static_cast<std::size_t>(t.dst) >= n) continue;
    const auto a = plan.workers[static_cast<std::size_t>(t.src)].dc;
    const auto b = plan.workers[static_cast<std::size_t>(t.dst)].dc;
    if (a == b) continue;
    auto& acc = by_link[{a, b}];
    acc.cwnd.push_back(t.cwnd);
    if (t.ssthresh)
      acc.ssthresh.push_back(*t.ssthresh);
    else
      ++acc.in_slow_start;
    acc.srtt_ms.push_back(t.srtt_us / 1e3);
    acc.mss.push_back(t.mss);
    acc.retransmits += t.retransmits;
    if (t.paced) {
      ++acc.pacing_known;
      if (*t.paced) ++acc.paced;
    }
  }
  const auto stats = [](std::vector<double> v) {
    if (v.empty()) return nlohmann::json(nullptr);
    std::sort(v.begin(), v.end());
    return nlohmann::json{{"min", v.front()}, {"p50", v[v.size() / 2]}, {"max", v.back()}};
  };
  auto out = nlohmann::json::array();
  for (const auto& [link, acc] : by_link) {
    auto ss = stats(acc.ssthresh);
    if (ss.is_null()) ss = nlohmann::json::object();
    ss["in_slow_start"] = acc.in_slow_start;
    auto rtt = stats(acc.srtt_ms);
    rtt.erase("min");
    nlohmann::json link_tcp = {{"src", plan.topology.dcs.at(link.first).name},
                               {"dst", plan.topology.dcs.at(link.second).name},
                               {"connections", acc.cwnd.size()},
                               {"cwnd_segments", stats(acc.cwnd)},
                               {"ssthresh_segments", ss},
                               {"srtt_ms", rtt},
                               {"retransmitted_segments", acc.retransmits},
                               {"mss", stats(acc.mss).at("p50")}};
    if (acc.pacing_known > 0) link_tcp["paced_connections"] = acc.paced;
    out.push_back(std::move(link_tcp));
  }
  return out;
}

nlohmann::json make_summary(const workload::Plan& plan, const core::Topology& topo,
                            const std::vector<program::WorkerReport>& reports, const std::vector<LinkSample>& samples,
                            const RunMeta& meta) {
  return make_summary(plan, topo, workload::by_worker(plan, reports), samples, meta);
}

nlohmann::json make_summary(const workload::Plan& plan, const core::Topology& topo, const workload::ReportRefs& reports,
                            const std::vector<LinkSample>& samples, const RunMeta& meta) {
  auto s = workload::summarize(plan, reports);
  // The run's length on the wire: from the start barrier to the end of the last iteration.
  std::int64_t end_ns = 0;
  for (const auto* r : reports)
    for (const auto& it : r->iterations) end_ns = std::max(end_ns, it.end_ns);
  const double run_s = static_cast<double>(end_ns) / 1e9;

  std::map<std::pair<std::size_t, std::size_t>, LinkSample> last;
  for (const auto& x : samples) last[{x.src, x.dst}] = x;
  std::map<std::pair<std::size_t, std::size_t>, std::uint64_t> expected;
  for (const auto& lb : plan.wan_bytes_per_iteration)
    expected[{lb.src, lb.dst}] += lb.bytes * static_cast<std::uint64_t>(plan.scenario.iterations);

  nlohmann::json wan = nlohmann::json::array();
  for (std::size_t i = 0; i < topo.links.size(); ++i) {
    const auto& l = topo.links[i];
    const auto key = std::make_pair(l.src, l.dst);
    const auto it = last.find(key);
    const LinkSample x = it != last.end() ? it->second : LinkSample{};
    const auto exp = expected.count(key) ? expected[key] : 0;
    const double rate = i < meta.rate_bps.size() ? static_cast<double>(meta.rate_bps[i]) : 0.0;
    nlohmann::json j = {{"src", topo.dcs[l.src].name},
                        {"dst", topo.dcs[l.dst].name},
                        {"bytes", x.bytes},
                        {"payload_bytes", x.payload_bytes},
                        {"expected_payload_bytes", exp},
                        {"drops", x.drops},
                        {"rate_bps", rate},
                        {"utilization", rate > 0 && run_s > 0 ? static_cast<double>(x.bytes) * 8 / (rate * run_s) : 0.0}};
    if (exp > 0 && x.payload_bytes > 0)
      j["payload_error"] = (static_cast<double>(x.payload_bytes) - static_cast<double>(exp)) / static_cast<double>(exp);
    wan.push_back(std::move(j));
  }
  s["wan"] = wan;
  s["run"] = meta.run_id;
  s["lab"] = meta.lab;
  s["scenario"] = plan.scenario.name;
  s["scenario_file"] = meta.scenario_file;
  s["policy"] = plan.scenario.policy;
  s["backend"] = meta.backend;
  s["scale"] = meta.scale;
  s["connections"] = plan.scenario.connections;
  s["compute"] = workload::to_string(plan.scenario.compute);
  s["started_at"] = meta.started_at;
  s["run_time_s"] = run_s;
  s["wanlab"] = build_info();  // version, commit and kernel: which code and host made these figures
  if (meta.scale != 1)
    s["scale_note"] = fmt::format(
        "bytes and WAN link rates x{}: timing as at full size, but TCP dynamics (windows, slow start) do not scale "
        "exactly",
        meta.scale);
  return s;
}

std::string links_csv(const core::Topology& topo, const std::vector<LinkSample>& samples) {
  std::string out = "t_s,src,dst,bytes,payload_bytes,mbit_s,drops,queued_packets\n";
  std::map<std::pair<std::size_t, std::size_t>, LinkSample> prev;
  for (const auto& x : samples) {
    const auto key = std::make_pair(x.src, x.dst);
    double mbit = 0;
    if (auto it = prev.find(key); it != prev.end() && x.t_s > it->second.t_s)
      mbit = static_cast<double>(x.bytes - it->second.bytes) * 8 / 1e6 / (x.t_s - it->second.t_s);
    prev[key] = x;
    out += fmt::format("{:.3f},{},{},{},{},{:.3f},{},{}\n", x.t_s, topo.dcs[x.src].name, topo.dcs[x.dst].name, x.bytes,
                       x.payload_bytes, mbit, x.drops, x.queued_packets);
  }
  return out;
}

namespace {
void write_file(const std::filesystem::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) throw std::runtime_error(fmt::format("cannot write {}: {}", p.string(), std::strerror(errno)));
}
}  // namespace

void write_run_folder(const std::filesystem::path& dir, const nlohmann::json& summary, const nlohmann::json& timeline,
                      const std::string& csv, const nlohmann::json& scenario) {
  std::filesystem::create_directories(dir);
  write_file(dir / "summary.json", summary.dump(2) + "\n");
  write_file(dir / "timeline.json", timeline.dump() + "\n");
  write_file(dir / "links.csv", csv);
  write_file(dir / "scenario.json", scenario.dump(2) + "\n");
}

HostCpu parse_proc_stat(const std::string& text) {
  std::istringstream in(text);
  std::string label;
  in >> label;
  if (label != "cpu") throw std::invalid_argument("/proc/stat: the first line is not the 'cpu' line");
  std::uint64_t f[8];
  for (int i = 0; i < 8; ++i)
    if (!(in >> f[i]))
      throw std::invalid_argument(fmt::format("/proc/stat: the 'cpu' line has {} fields, expected at least 8", i));
  // user nice system idle iowait irq softirq steal
  HostCpu c;
  c.busy = f[0] + f[1] + f[2] + f[5] + f[6];
  c.steal = f[7];
  c.total = c.busy + f[3] + f[4] + c.steal;
  return c;
}

std::optional<HostCpu> read_host_cpu() {
  std::ifstream in("/proc/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  try {
    return parse_proc_stat(line);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

nlohmann::json host_cpu_json(const HostCpu& from, const HostCpu& to) {
  const double total = to.total > from.total ? static_cast<double>(to.total - from.total) : 0.0;
  const auto share = [&](std::uint64_t a, std::uint64_t b) { return total > 0 && b >= a ? static_cast<double>(b - a) / total : 0.0; };
  return {{"busy_fraction", share(from.busy, to.busy)}, {"steal_fraction", share(from.steal, to.steal)}};
}

nlohmann::json engine_json(const BackendCounters& from, const BackendCounters& to, double seconds) {
  const auto value = [](const BackendCounters& c, std::string_view name) -> std::optional<std::uint64_t> {
    for (const auto& [k, v] : c)
      if (k == name) return v;
    return std::nullopt;
  };
  // Each counter only grows; a missing one (no engine, an older one) leaves the block out.
  std::map<std::string_view, double> d;
  for (const std::string_view name : {"cpu_us", "releases", "release_late_ns_total", "released_late_over_100us",
                                      "released_late_over_1ms", "rx_ring_dropped", "rx_big_ring_dropped",
                                      "tx_ring_full", "sleeps"}) {
    const auto a = value(from, name), b = value(to, name);
    if (!a || !b) return nullptr;
    d[name] = *b >= *a ? static_cast<double>(*b - *a) : 0.0;
  }
  const double releases = d["releases"];
  const auto per_release = [&](double x) { return releases > 0 ? x / releases : 0.0; };
  // The lateness histogram: release_late_le_<bound>ns per bucket, release_late_le_inf last.
  std::vector<std::pair<double, double>> hist;  // (upper bound in ns or +inf, releases in the run)
  for (const auto& [k, v] : to) {
    constexpr std::string_view prefix = "release_late_le_";
    if (!k.starts_with(prefix)) continue;
    std::string_view bound(k);
    bound.remove_prefix(prefix.size());
    double ns = std::numeric_limits<double>::infinity();
    if (bound != "inf") {
      if (!bound.ends_with("ns")) continue;
      bound.remove_suffix(2);
      std::uint64_t b = 0;
      if (std::from_chars(bound.data(), bound.data() + bound.size(), b).ec != std::errc{}) continue;
      ns = static_cast<double>(b);
    }
    const auto a = value(from, k);
    hist.emplace_back(ns, a && v >= *a ? static_cast<double>(v - *a) : 0.0);
  }
  std::sort(hist.begin(), hist.end());
  double in_hist = 0;
  for (const auto& h : hist) in_hist += h.second;
  const auto percentile = [&](double q) -> nlohmann::json {
    if (in_hist <= 0) return nullptr;
    double seen = 0;
    for (const auto& [bound, n] : hist) {
      seen += n;
      if (seen >= q * in_hist) return std::isinf(bound) ? nlohmann::json() : nlohmann::json(bound / 1e3);
    }
    return nullptr;
  };
  nlohmann::json e = {{"cpu_fraction_of_a_core", seconds > 0 ? d["cpu_us"] / 1e6 / seconds : 0.0},
          {"releases", d["releases"]},
          {"release_late_mean_us", per_release(d["release_late_ns_total"]) / 1e3},
          {"released_late_over_100us_fraction", per_release(d["released_late_over_100us"])},
          {"released_late_over_1ms_fraction", per_release(d["released_late_over_1ms"])},
          {"sleeps", d["sleeps"]},
          {"rx_ring_dropped", d["rx_ring_dropped"]},
          {"rx_big_ring_dropped", d["rx_big_ring_dropped"]},
          {"tx_ring_full", d["tx_ring_full"]}};
  if (const auto a = value(from, "rx_frames"), b = value(to, "rx_frames"); a && b)
    e["rx_frames"] = *b >= *a ? static_cast<double>(*b - *a) : 0.0;
  // The engine thread's time off the CPU over the run, as shares of the run's wall time.
  for (const auto& [counter, field] : {std::pair{"run_delay_ns", "run_delay_fraction"},
                                       std::pair{"cpu_steal_ns", "cpu_steal_fraction"}})
    if (const auto a = value(from, counter), b = value(to, counter); a && b && seconds > 0)
      e[field] = *b >= *a ? static_cast<double>(*b - *a) / 1e9 / seconds : 0.0;
  if (!hist.empty()) {
    e["release_late_p50_us"] = percentile(0.5);
    e["release_late_p99_us"] = percentile(0.99);
    e["release_late_p999_us"] = percentile(0.999);
  }
  engine_assessment(e);
  return e;
}

namespace {
// Whose doing an engine's lateness was, from its time off the CPU (empty when not measured).
std::string off_cpu_text(const nlohmann::json& e) {
  const auto share = [&](const char* k) -> std::optional<double> {
    if (!e.contains(k) || !e[k].is_number()) return std::nullopt;
    return e[k].get<double>();
  };
  const auto steal = share("cpu_steal_fraction"), delay = share("run_delay_fraction");
  if (!steal && !delay) return {};
  std::string t = " (over the run, the hypervisor took ";
  t += steal ? fmt::format("{:.2f} %", 100 * *steal) : std::string("an unmeasured share");
  t += " of its CPU's time; it waited runnable ";
  t += delay ? fmt::format("{:.2f} %", 100 * *delay) : std::string("an unmeasured share");
  t += " of the time)";
  return t;
}
}  // namespace

void engine_assessment(nlohmann::json& e) {
  nlohmann::json reasons = nlohmann::json::array();
  const double late = e.value("released_late_over_1ms_fraction", 0.0);
  if (late > kDegradedLateOver1msFraction)
    reasons.push_back(fmt::format("{:.2f} % of packets released more than 1 ms late (threshold {:g} %): the engine "
                                  "did not get the CPU when it needed it{}",
                                  100 * late, 100 * kDegradedLateOver1msFraction, off_cpu_text(e)));
  const double dropped = e.value("rx_ring_dropped", 0.0) + e.value("rx_big_ring_dropped", 0.0);
  const double received = e.value("rx_frames", 0.0) + dropped;
  if (dropped > 0 && dropped > kDegradedRingDropFraction * received)
    reasons.push_back(fmt::format("{:.0f} frames lost in the engine's RX rings, {:.3f} % of {:.0f} (threshold {:g} %): "
                                  "TCP sent them again though the emulated WAN never dropped them",
                                  dropped, received > 0 ? 100 * dropped / received : 100.0, received,
                                  100 * kDegradedRingDropFraction));
  e["degraded"] = !reasons.empty();
  e["degraded_reasons"] = std::move(reasons);
  e["thresholds"] = {{"released_late_over_1ms_fraction", kDegradedLateOver1msFraction},
                     {"ring_dropped_fraction_of_received", kDegradedRingDropFraction}};
}

}  // namespace wanlab::run
