#pragma once
// A run's results: summary.json, timeline.json and links.csv, from the workers' reports and
// the WAN counters sampled while it ran. Pure apart from write_run_folder().
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wanlab/common/program.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/workload/metrics.hpp"
#include "wanlab/workload/plan.hpp"

namespace wanlab::run {

/// One WAN link's counters at one moment, counted from the run's start.
struct LinkSample {
  double t_s = 0;  // since the start barrier
  std::size_t src = 0, dst = 0;
  std::uint64_t bytes = 0;          // wire bytes sent on the link
  std::uint64_t payload_bytes = 0;  // TCP/UDP payload (userspace engine; 0 on the kernel backend)
  std::uint64_t drops = 0;
  std::uint64_t queued_packets = 0;
};

/// One data connection's TCP state at the end of the run, as its sending agent read it
/// (TCP_INFO; protocol `report` `tcp`).
struct TcpSample {
  int src = -1, dst = -1;  // workers
  std::uint32_t cwnd = 0;  // segments
  std::optional<std::uint32_t> ssthresh;  // segments; none: still in its first slow start
  std::uint32_t srtt_us = 0;
  std::uint32_t mss = 0;
  std::uint32_t retransmits = 0;
  std::optional<bool> paced;  // TCP paced it (SO_MAX_PACING_RATE set); none: not reported
};

/// Reads a report's `tcp` array for worker `src`; throws std::invalid_argument naming the
/// entry and field at fault.
std::vector<TcpSample> tcp_samples_from_json(int src, const nlohmann::json& j);

/// summary.json `tcp`: per directed WAN link that has connections, their congestion windows
/// and ssthresh (segments: min, p50, max; `in_slow_start`: connections that never left it),
/// smoothed RTT (ms: p50, max), segments sent again (sum), the MSS (p50) and, where the
/// agents said, how many of them TCP paced (`paced_connections`). Connections inside a DC
/// are left out.
nlohmann::json tcp_summary(const workload::Plan& plan, const std::vector<TcpSample>& samples);

/// The machine's CPU time, all CPUs together, from the first line of /proc/stat (ticks).
struct HostCpu {
  std::uint64_t busy = 0;   // user, nice, system, irq, softirq
  std::uint64_t steal = 0;  // taken by the hypervisor for other guests
  std::uint64_t total = 0;  // the above, idle and iowait
};
/// Parses /proc/stat's text; throws std::invalid_argument when its `cpu` line is missing or
/// short.
HostCpu parse_proc_stat(const std::string& text);
/// Reads /proc/stat; nullopt where it cannot be read.
std::optional<HostCpu> read_host_cpu();
/// summary.json `host_cpu` between two readings: busy and steal as fractions of all CPU time.
/// A run's timings on a VM whose hypervisor took more than a percent or two are the host's
/// as much as the lab's (README, Tests).
nlohmann::json host_cpu_json(const HostCpu& from, const HostCpu& to);

/// A backend's counters by name (api::RunLab::backend_counters()).
using BackendCounters = std::vector<std::pair<std::string, std::uint64_t>>;
/// summary.json `engine` between two readings of the userspace engine's counters taken
/// `seconds` apart: its thread's CPU as a fraction of one core, how late it released packets
/// (mean, and the shares more than 100 µs and 1 ms late), and the frames its RX rings lost.
/// Null where the backend has no engine (the kernel backend) or a counter is missing.
/// With the engine's lateness histogram (release_late_le_*), also its p50, p99 and p99.9:
/// each the upper bound of the bucket it falls in (µs; null above the last finite bound).
/// Then engine_assessment()'s verdict: `degraded`, `degraded_reasons`, `thresholds`.
nlohmann::json engine_json(const BackendCounters& from, const BackendCounters& to, double seconds);

/// When a run's emulation was degraded: the engine released more than this share of its
/// packets over 1 ms late (it fell behind its own schedule: the host did not give it the CPU)...
inline constexpr double kDegradedLateOver1msFraction = 0.01;
/// ...or its RX rings lost more than this share of the frames they received (each a burst
/// of TCP retransmissions the emulated WAN never caused).
inline constexpr double kDegradedRingDropFraction = 0.0001;
/// Adds `degraded` (bool), `degraded_reasons` (sentences) and `thresholds` to an engine
/// block (engine_json's): the verdict on the figures it holds.
void engine_assessment(nlohmann::json& engine);

struct RunMeta {
  std::string run_id;
  std::string lab;
  std::string backend;
  std::string started_at;  // ISO 8601 UTC
  double scale = 1;
  std::string scenario_file;
  /// The rate in force on each link during the run (configured x scale), by link index.
  std::vector<std::uint64_t> rate_bps;
};

/// The summary (DESIGN.md metrics): workload::summarize's fields, plus `wan` for every directed
/// link of the topology: bytes, payload_bytes, expected_payload_bytes (what the scenario
/// implies), payload_error (relative), rate, utilization (wire bytes / (rate x time)); and
/// the run's identity. `samples` are cumulative, the last of each link the run's total.
nlohmann::json make_summary(const workload::Plan& plan, const core::Topology& topo,
                            const std::vector<program::WorkerReport>& reports, const std::vector<LinkSample>& samples,
                            const RunMeta& meta);
/// The same, from each worker's report by worker id (workload::ReportRefs).
nlohmann::json make_summary(const workload::Plan& plan, const core::Topology& topo, const workload::ReportRefs& reports,
                            const std::vector<LinkSample>& samples, const RunMeta& meta);

/// links.csv: t_s,src,dst,bytes,payload_bytes,mbit_s,drops,queued_packets; one row per link
/// and sample, mbit_s the rate since the link's previous sample.
std::string links_csv(const core::Topology& topo, const std::vector<LinkSample>& samples);

/// Writes summary.json, timeline.json, links.csv and scenario.json into `dir` (created).
void write_run_folder(const std::filesystem::path& dir, const nlohmann::json& summary, const nlohmann::json& timeline,
                      const std::string& links_csv, const nlohmann::json& scenario);

}  // namespace wanlab::run
