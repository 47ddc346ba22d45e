#include "wanlab/run/results.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "wanlab/workload/metrics.hpp"

namespace wanlab::run {

nlohmann::json make_summary(const workload::Plan& plan, const core::Topology& topo,
                            const std::vector<program::WorkerReport>& reports, const std::vector<LinkSample>& samples,
                            const RunMeta& meta) {
  auto s = workload::summarize(plan, reports);
  // The run's length on the wire: from the start barrier to the end of the last iteration.
  std::int64_t end_ns = 0;
  for (const auto& r : reports)
    for (const auto& it : r.iterations) end_ns = std::max(end_ns, it.end_ns);
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

}  // namespace wanlab::run
