// A run's results: summary.json's WAN part (bytes, payload against what the scenario
// implies, utilization over the run's length) and identity, links.csv (rates from
// consecutive samples of one link), and the run folder. Reports come from the virtual
// executor running the plan, as the agents would send them.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "test_workload_fixtures.hpp"
#include "wanlab/common/version.hpp"
#include "wanlab/run/results.hpp"
#include "wanlab/workload/execute.hpp"
#include "wanlab/workload/metrics.hpp"
#include "wanlab/workload/plan.hpp"
#include "wanlab/workload/scenario.hpp"

using namespace wanlab;
using namespace wanlab::run;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Three DCs of 2 nodes with 2 GPUs each, fully meshed (6 directed links). The scenario puts
// stage 0 in use and stage 1 in euw; apse carries nothing.
const core::Topology& topo() {
  static const core::Topology t = workload::testing::lab(json::parse(R"([
    {"name": "use", "nodes": 2, "gpus_per_node": 2},
    {"name": "euw", "nodes": 2, "gpus_per_node": 2},
    {"name": "apse", "nodes": 2, "gpus_per_node": 2}])"));
  return t;
}

workload::Plan make_plan(double scale = 1) {
  const json doc = {{"name", "small"},
                    {"topology", "two-dc.json"},  // must exist; the plan uses topo() above
                    {"model", {{"layers", 4}, {"hidden", 128}, {"heads", 8}, {"seq_len", 32}, {"vocab", 100}}},
                    {"parallelism", {{"pp", 2}, {"dp", 2}, {"tp", 2}}},
                    {"placement", json::array({json::array({"use", "use"}), json::array({"euw", "euw"})})},
                    {"schedule", "1f1b"},
                    {"micro_batches", 4},
                    {"iterations", 3},
                    {"warmup", 1},
                    {"connections", 4},
                    {"scale", scale}};
  const auto s = workload::parse_scenario(doc, "small.json", std::string(WANLAB_SOURCE_DIR) + "/topologies");
  return workload::build_plan(s, topo());
}

std::vector<program::WorkerReport> reports_of(const workload::Plan& plan) {
  return workload::execute(plan.programs, plan.scenario.iterations, workload::modeled_compute(plan),
                           workload::uncontended_comm(plan));
}

std::size_t link_index(const std::string& src, const std::string& dst) {
  const auto& t = topo();
  for (std::size_t i = 0; i < t.links.size(); ++i)
    if (t.dcs[t.links[i].src].name == src && t.dcs[t.links[i].dst].name == dst) return i;
  FAIL("no link " << src << "->" << dst);
  return 0;
}

RunMeta meta() {
  RunMeta m;
  m.run_id = "20240101-000000-small";
  m.lab = "t";
  m.backend = "userspace";
  m.started_at = "2024-01-01T00:00:00.000Z";
  m.scale = 1;
  m.scenario_file = "/s/small.json";
  // A different rate per link, so that a mix-up shows: link i runs at (i + 1) x 100 Mbit/s.
  for (std::size_t i = 0; i < topo().links.size(); ++i) m.rate_bps.push_back((i + 1) * 100'000'000);
  return m;
}

constexpr std::size_t kUse = 0, kEuw = 1, kApse = 2;

const json* wan_entry(const json& summary, const std::string& src, const std::string& dst) {
  for (const auto& w : summary.at("wan"))
    if (w.at("src") == src && w.at("dst") == dst) return &w;
  return nullptr;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("results: the plan's premises", "[unit][run][results]") {
  const auto plan = make_plan();
  REQUIRE(topo().links.size() == 6);
  // One pipeline message: 1 sample x 32 tokens x 128 hidden x 2 bytes (bf16), split over tp 2.
  CHECK(plan.pipeline_message_bytes == 4096);
  // Per iteration and direction: 4 stage-0 workers x 4 micro-batches x 4096 bytes; the
  // all-reduces stay inside the DCs.
  CHECK(plan.wan_bytes_per_iteration ==
        std::vector<workload::Plan::LinkBytes>{{kUse, kEuw, 65536}, {kEuw, kUse, 65536}});
  CHECK(make_plan(0.5).wan_bytes_per_iteration ==
        std::vector<workload::Plan::LinkBytes>{{kUse, kEuw, 32768}, {kEuw, kUse, 32768}});
}

TEST_CASE("results: the summary's WAN entries", "[unit][run][results]") {
  const auto plan = make_plan();
  const auto reports = reports_of(plan);
  REQUIRE(reports.size() == 8);
  std::int64_t end_ns = 0;
  for (const auto& r : reports) end_ns = std::max(end_ns, r.iterations.back().end_ns);
  REQUIRE(end_ns > 0);
  const double run_s = static_cast<double>(end_ns) / 1e9;

  const std::vector<LinkSample> samples = {
      {0.5, kUse, kEuw, 50'000, 40'000, 1, 7},
      {0.5, kEuw, kUse, 1'000, 0, 0, 0},          // the kernel backend counts no payload
      {1.0, kUse, kEuw, 200'000, 190'000, 3, 0},  // the last of a link is its total
  };
  const auto m = meta();
  const auto s = make_summary(plan, topo(), reports, samples, m);

  REQUIRE(s["wan"].size() == 6);  // every directed link, in topology order
  for (std::size_t i = 0; i < 6; ++i) {
    INFO("link " << i);
    CHECK(s["wan"][i]["src"] == topo().dcs[topo().links[i].src].name);
    CHECK(s["wan"][i]["dst"] == topo().dcs[topo().links[i].dst].name);
    CHECK(s["wan"][i]["rate_bps"] == Approx(static_cast<double>((i + 1) * 100'000'000)));
  }

  const json* ue = wan_entry(s, "use", "euw");
  REQUIRE(ue);
  const double rate_ue = static_cast<double>((link_index("use", "euw") + 1) * 100'000'000);
  CHECK((*ue)["bytes"] == 200'000);
  CHECK((*ue)["payload_bytes"] == 190'000);
  CHECK((*ue)["expected_payload_bytes"] == 65536 * 3);
  CHECK((*ue)["drops"] == 3);
  CHECK((*ue)["rate_bps"] == Approx(rate_ue));
  CHECK((*ue)["utilization"].get<double>() == Approx(200'000.0 * 8 / (rate_ue * run_s)).epsilon(1e-12));
  CHECK((*ue)["payload_error"].get<double>() == Approx((190'000.0 - 196'608.0) / 196'608.0).epsilon(1e-12));
  CHECK((*ue).size() == 9);

  // Traffic expected but no payload counted: no payload_error.
  const json* eu = wan_entry(s, "euw", "use");
  REQUIRE(eu);
  const double rate_eu = static_cast<double>((link_index("euw", "use") + 1) * 100'000'000);
  CHECK((*eu)["bytes"] == 1'000);
  CHECK((*eu)["payload_bytes"] == 0);
  CHECK((*eu)["expected_payload_bytes"] == 196'608);
  CHECK((*eu)["utilization"].get<double>() == Approx(1'000.0 * 8 / (rate_eu * run_s)).epsilon(1e-12));
  CHECK_FALSE(eu->contains("payload_error"));

  // A link without samples or traffic: zeros.
  const json* ua = wan_entry(s, "use", "apse");
  REQUIRE(ua);
  CHECK(*ua == json{{"src", "use"},
                    {"dst", "apse"},
                    {"bytes", 0},
                    {"payload_bytes", 0},
                    {"expected_payload_bytes", 0},
                    {"drops", 0},
                    {"rate_bps", static_cast<double>((link_index("use", "apse") + 1) * 100'000'000)},
                    {"utilization", 0.0}});

  // The run's length is the end of the last iteration of any worker.
  CHECK(s["run_time_s"].get<double>() == Approx(run_s).epsilon(1e-15));
  CHECK(s["window_s"]["end"].get<double>() == Approx(run_s).epsilon(1e-12));
}

TEST_CASE("results: payload bytes counted by the wire can be larger than expected", "[unit][run][results]") {
  const auto plan = make_plan();
  const auto reports = reports_of(plan);
  const std::vector<LinkSample> samples = {{2.0, kEuw, kUse, 300'000, 245'760, 0, 0}};
  const auto s = make_summary(plan, topo(), reports, samples, meta());
  const json* eu = wan_entry(s, "euw", "use");
  REQUIRE(eu);
  CHECK((*eu)["payload_error"].get<double>() == Approx(0.25).epsilon(1e-12));  // 245760 = 1.25 x 196608
}

TEST_CASE("results: the summary's identity and training metrics", "[unit][run][results]") {
  const auto plan = make_plan();
  const auto reports = reports_of(plan);
  auto m = meta();
  const auto s = make_summary(plan, topo(), reports, {}, m);
  CHECK(s["run"] == "20240101-000000-small");
  CHECK(s["lab"] == "t");
  CHECK(s["scenario"] == "small");
  CHECK(s["scenario_file"] == "/s/small.json");
  CHECK(s["policy"] == "fair");
  CHECK(s["backend"] == "userspace");
  CHECK(s["scale"] == 1.0);
  CHECK(s["connections"] == 4);
  CHECK(s["compute"] == "modeled");
  CHECK(s["started_at"] == "2024-01-01T00:00:00.000Z");
  CHECK_FALSE(s.contains("scale_note"));
  // Everything workload::summarize says is there unchanged (scenario and scale agree).
  const auto training = workload::summarize(plan, reports);
  for (const auto& [k, v] : training.items()) {
    INFO(k);
    CHECK(s.at(k) == v);
  }
  CHECK(s["iteration_time_s"]["per_iteration"].size() == 3);
  CHECK(s["workers"] == 8);
  // Without samples, every link reads zero.
  for (const auto& w : s["wan"]) {
    CHECK(w["bytes"] == 0);
    CHECK(w["utilization"] == 0.0);
  }
  // A link whose rate is unknown has no utilization.
  m.rate_bps.clear();
  const auto u = make_summary(plan, topo(), reports, {{1.0, kUse, kEuw, 1000, 1000, 0, 0}}, m);
  CHECK((*wan_entry(u, "use", "euw"))["rate_bps"] == 0.0);
  CHECK((*wan_entry(u, "use", "euw"))["utilization"] == 0.0);
  // Reports that do not match the plan are refused.
  auto missing = reports;
  missing.pop_back();
  CHECK_THROWS_AS(make_summary(plan, topo(), missing, {}, meta()), std::invalid_argument);
}

TEST_CASE("results: a scaled run says so", "[unit][run][results]") {
  const auto plan = make_plan(0.5);
  const auto reports = reports_of(plan);
  auto m = meta();
  m.scale = 0.5;
  const auto s = make_summary(plan, topo(), reports, {{1.0, kUse, kEuw, 100'000, 98'304, 0, 0}}, m);
  CHECK(s["scale"] == 0.5);
  CHECK(s["scale_note"] ==
        "bytes and WAN link rates x0.5: timing as at full size, but TCP dynamics (windows, slow start) do not "
        "scale exactly");
  // The expectation uses the scaled bytes: 3 iterations x 32768.
  const json* ue = wan_entry(s, "use", "euw");
  CHECK((*ue)["expected_payload_bytes"] == 98'304);
  CHECK((*ue)["payload_error"] == 0.0);
}

TEST_CASE("results: links.csv", "[unit][run][results]") {
  SECTION("no samples: the header alone") {
    CHECK(links_csv(topo(), {}) == "t_s,src,dst,bytes,payload_bytes,mbit_s,drops,queued_packets\n");
  }
  SECTION("rates from consecutive samples of the same link") {
    const std::vector<LinkSample> samples = {
        {0.0, kUse, kEuw, 0, 0, 0, 0},
        {0.0, kEuw, kUse, 0, 0, 0, 0},
        {0.5, kUse, kEuw, 125'000, 120'000, 0, 12},     // 2 Mbit/s since 0
        {0.5, kEuw, kUse, 1'250, 0, 0, 0},              // 0.02 Mbit/s
        {1.0, kUse, kEuw, 250'000, 240'000, 2, 3},      // 2 Mbit/s since 0.5
        {1.25, kApse, kUse, 5'000, 5'000, 0, 0},        // a link's first sample: 0
        {1.5, kUse, kEuw, 1'500'000, 1'400'000, 2, 0},  // 20 Mbit/s since 1.0
        {1.5, kUse, kEuw, 1'600'000, 1'500'000, 2, 0},  // no time since the last: 0
        {2.0, kEuw, kUse, 1'250, 0, 0, 0},              // nothing since 0.5
    };
    CHECK(links_csv(topo(), samples) ==
          "t_s,src,dst,bytes,payload_bytes,mbit_s,drops,queued_packets\n"
          "0.000,use,euw,0,0,0.000,0,0\n"
          "0.000,euw,use,0,0,0.000,0,0\n"
          "0.500,use,euw,125000,120000,2.000,0,12\n"
          "0.500,euw,use,1250,0,0.020,0,0\n"
          "1.000,use,euw,250000,240000,2.000,2,3\n"
          "1.250,apse,use,5000,5000,0.000,0,0\n"
          "1.500,use,euw,1500000,1400000,20.000,2,0\n"
          "1.500,use,euw,1600000,1500000,0.000,2,0\n"
          "2.000,euw,use,1250,0,0.000,0,0\n");
  }
}

TEST_CASE("results: the run folder", "[unit][run][results]") {
  static std::atomic<int> counter{0};
  const auto dir = fs::temp_directory_path() /
                   ("wanlab-test-run-results-" + std::to_string(::getpid()) + "-" + std::to_string(counter++)) /
                   "nested";
  const json summary = {{"run", "r1"}, {"x", 1}};
  const json timeline = {{"traceEvents", json::array()}};
  const json scenario = {{"name", "small"}};
  write_run_folder(dir, summary, timeline, "t_s\n1\n", scenario);
  CHECK(slurp(dir / "summary.json") == summary.dump(2) + "\n");
  CHECK(slurp(dir / "timeline.json") == timeline.dump() + "\n");
  CHECK(slurp(dir / "links.csv") == "t_s\n1\n");
  CHECK(slurp(dir / "scenario.json") == scenario.dump(2) + "\n");
  // Written again, the files are replaced, not appended to.
  write_run_folder(dir, summary, timeline, "t_s\n", scenario);
  CHECK(slurp(dir / "links.csv") == "t_s\n");
  std::error_code ec;
  fs::remove_all(dir.parent_path(), ec);
}

TEST_CASE("results: TCP state of the WAN connections", "[unit][run][results]") {
  const auto plan = make_plan();
  // Worker ids: stage 0 (use) and stage 1 (euw); find a WAN pair and a pair inside use.
  int s0 = -1, s1 = -1, s0b = -1;
  for (const auto& w : plan.workers) {
    if (w.stage == 0 && s0 < 0) s0 = w.worker;
    else if (w.stage == 0 && s0b < 0) s0b = w.worker;
    if (w.stage == 1 && s1 < 0) s1 = w.worker;
  }
  REQUIRE((s0 >= 0 && s1 >= 0 && s0b >= 0));
  const auto samples = tcp_samples_from_json(
      s0, json::array({{{"peer", s1}, {"cwnd", 40}, {"ssthresh", 38}, {"srtt_us", 90000}, {"mss", 1448}, {"retransmits", 2}, {"paced", true}},
                       {{"peer", s1}, {"cwnd", 80}, {"ssthresh", nullptr}, {"srtt_us", 85000}, {"mss", 1448}, {"retransmits", 0}, {"paced", false}},
                       {{"peer", s1}, {"cwnd", 60}, {"ssthresh", 70}, {"srtt_us", 95000}, {"mss", 1448}, {"retransmits", 1}, {"paced", true}},
                       {{"peer", s0b}, {"cwnd", 500}, {"ssthresh", nullptr}, {"srtt_us", 50}, {"mss", 1448}, {"retransmits", 9}}}));
  REQUIRE(samples.size() == 4);
  CHECK(samples[0].src == s0);
  CHECK(samples[0].dst == s1);
  CHECK(samples[0].ssthresh == std::optional<std::uint32_t>(38));
  CHECK_FALSE(samples[1].ssthresh.has_value());
  CHECK(samples[0].paced == std::optional<bool>(true));
  CHECK(samples[1].paced == std::optional<bool>(false));
  CHECK_FALSE(samples[3].paced.has_value());  // an agent that does not say

  const auto t = tcp_summary(plan, samples);
  REQUIRE(t.size() == 1);  // the connection inside use is not a WAN one
  CHECK(t[0]["src"] == "use");
  CHECK(t[0]["dst"] == "euw");
  CHECK(t[0]["connections"] == 3);
  CHECK(t[0]["cwnd_segments"] == json{{"min", 40.0}, {"p50", 60.0}, {"max", 80.0}});
  CHECK(t[0]["ssthresh_segments"]["min"] == 38.0);
  CHECK(t[0]["ssthresh_segments"]["max"] == 70.0);
  CHECK(t[0]["ssthresh_segments"]["in_slow_start"] == 1);
  CHECK(t[0]["srtt_ms"]["p50"] == Approx(90.0));
  CHECK(t[0]["srtt_ms"]["max"] == Approx(95.0));
  CHECK(t[0]["retransmitted_segments"] == 3);
  CHECK(t[0]["mss"] == 1448.0);
  CHECK(t[0]["paced_connections"] == 2);
  CHECK(tcp_summary(plan, {}).empty());
  // Where no agent said, the summary does not guess.
  auto unsaid = samples;
  for (auto& s : unsaid) s.paced.reset();
  CHECK_FALSE(tcp_summary(plan, unsaid)[0].contains("paced_connections"));

  // Bad entries name the entry and the field.
  const auto refused = [&](const json& j, const std::string& what) {
    try {
      tcp_samples_from_json(s0, j);
      FAIL("accepted " << j.dump());
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()) == what);
    }
  };
  refused(json::object(), "tcp: not an array");
  refused(json::array({1}), "tcp[0]: not an object");
  refused(json::array({{{"cwnd", 1}}}), "tcp[0].peer: not a worker");
  refused(json::array({{{"peer", s1}, {"cwnd", -1}}}), "tcp[0].cwnd: not a count");
  refused(json::array({{{"peer", s1}, {"cwnd", 10}, {"srtt_us", 1}, {"mss", 1}, {"retransmits", 0}}}),
          "tcp[0].ssthresh: missing");
  refused(json::array({{{"peer", s1}, {"cwnd", 10}, {"ssthresh", "x"}, {"srtt_us", 1}, {"mss", 1}, {"retransmits", 0}}}),
          "tcp[0].ssthresh: not a count");
  refused(json::array({{{"peer", s1}, {"cwnd", 10}, {"ssthresh", 5}, {"srtt_us", 1}, {"mss", 1}}}),
          "tcp[0].retransmits: missing");
  refused(json::array({{{"peer", s1}, {"cwnd", 10}, {"ssthresh", 5}, {"srtt_us", 1}, {"mss", 1}, {"retransmits", 0}, {"paced", 1}}}),
          "tcp[0].paced: not true or false");
}

TEST_CASE("results: the host's CPU time, steal included, between two readings of /proc/stat",
          "[unit][run][results]") {
  // user nice system idle iowait irq softirq steal guest guest_nice
  const auto a = parse_proc_stat("cpu  100 0 50 800 10 0 20 20 0 0\ncpu0 50 0 25 400 5 0 10 10 0 0\n");
  CHECK(a.busy == 170);
  CHECK(a.steal == 20);
  CHECK(a.total == 1000);
  const auto b = parse_proc_stat("cpu  400 0 150 1170 10 0 50 220 0 0\n");
  const auto j = host_cpu_json(a, b);
  // 1000 ticks passed: 430 busy, 200 stolen.
  CHECK(j.at("busy_fraction").get<double>() == Approx(0.43));
  CHECK(j.at("steal_fraction").get<double>() == Approx(0.20));
  // No time passed: zeros, not a division by zero.
  CHECK(host_cpu_json(a, a).at("steal_fraction").get<double>() == 0.0);
  CHECK_THROWS_WITH(parse_proc_stat("intr 1 2 3\n"), Catch::Contains("not the 'cpu' line"));
  CHECK_THROWS_WITH(parse_proc_stat("cpu 1 2 3\n"), Catch::Contains("3 fields, expected at least 8"));
  // This machine's own: readable, and consistent.
  const auto here = read_host_cpu();
  REQUIRE(here.has_value());
  CHECK(here->total >= here->busy + here->steal);
}

TEST_CASE("results: the userspace engine's CPU and release lateness over a run, from two readings of its counters",
          "[unit][run][results]") {
  const BackendCounters a{{"rx_frames", 5},
                          {"cpu_us", 1'000'000},
                          {"releases", 1000},
                          {"release_late_ns_total", 5'000'000},
                          {"released_late_over_100us", 10},
                          {"released_late_over_1ms", 1},
                          {"rx_ring_dropped", 0},
                          {"rx_big_ring_dropped", 3},
                          {"tx_ring_full", 0},
                          {"sleeps", 100}};
  BackendCounters b = a;
  for (auto& [k, v] : b) {
    if (k == "cpu_us") v += 1'500'000;                // 1.5 s of CPU in 3 s
    if (k == "releases") v += 4000;                   // 4000 packets
    if (k == "release_late_ns_total") v += 80'000'000; // 20 µs each on average
    if (k == "released_late_over_100us") v += 40;
    if (k == "released_late_over_1ms") v += 4;
    if (k == "rx_big_ring_dropped") v += 7;
    if (k == "sleeps") v += 900;
  }
  const auto j = engine_json(a, b, 3.0);
  REQUIRE(j.is_object());
  CHECK(j.at("cpu_fraction_of_a_core").get<double>() == Approx(0.5));
  CHECK(j.at("releases").get<double>() == 4000);
  CHECK(j.at("release_late_mean_us").get<double>() == Approx(20.0));
  CHECK(j.at("released_late_over_100us_fraction").get<double>() == Approx(0.01));
  CHECK(j.at("released_late_over_1ms_fraction").get<double>() == Approx(0.001));
  CHECK(j.at("rx_big_ring_dropped").get<double>() == 7);
  CHECK(j.at("rx_ring_dropped").get<double>() == 0);
  CHECK(j.at("sleeps").get<double>() == 900);
  // Nothing released, no time: zeros, not divisions by zero.
  const auto idle = engine_json(a, a, 0.0);
  CHECK(idle.at("release_late_mean_us").get<double>() == 0.0);
  CHECK(idle.at("cpu_fraction_of_a_core").get<double>() == 0.0);
  // No engine (the kernel backend's counters lack these): no block.
  CHECK(engine_json({}, {}, 3.0).is_null());
  CHECK(engine_json({{"rx_frames", 1}}, {{"rx_frames", 2}}, 3.0).is_null());
}

TEST_CASE("results: the summary names the wanlab version, commit and kernel that made it", "[unit][run][results]") {
  const auto plan = make_plan();
  const auto s = make_summary(plan, topo(), reports_of(plan), {}, meta());
  REQUIRE(s.contains("wanlab"));
  CHECK(s["wanlab"]["version"] == std::string(wanlab::version()));
  CHECK(s["wanlab"]["version"].get<std::string>().find('.') != std::string::npos);  // CMake's project VERSION
  // From git at build time: 12 hex digits (maybe "-dirty"), or "unknown" outside a checkout.
  const auto commit = s["wanlab"]["commit"].get<std::string>();
  CHECK((commit == "unknown" || (commit.size() >= 12 && std::all_of(commit.begin(), commit.begin() + 12, [](char c) {
           return std::isxdigit(static_cast<unsigned char>(c)) != 0;
         }))));
  CHECK_FALSE(s["wanlab"]["kernel"].get<std::string>().empty());
  CHECK(wanlab::version_line() == fmt::format("wanlab {} (commit {})", wanlab::version(), commit));
}

namespace {
// The engine's counters as UserspaceShaper::stats() names them, with a lateness histogram.
BackendCounters engine_counters(std::uint64_t releases, std::uint64_t over_1ms, std::uint64_t rx_frames,
                                std::uint64_t ring_dropped, const std::vector<std::pair<std::string, std::uint64_t>>& hist) {
  BackendCounters c{{"rx_frames", rx_frames},
                    {"cpu_us", 0},
                    {"releases", releases},
                    {"release_late_ns_total", 0},
                    {"released_late_over_100us", over_1ms},
                    {"released_late_over_1ms", over_1ms},
                    {"rx_ring_dropped", 0},
                    {"rx_big_ring_dropped", ring_dropped},
                    {"tx_ring_full", 0},
                    {"sleeps", 0}};
  for (const auto& h : hist) c.push_back(h);
  return c;
}
const std::vector<std::pair<std::string, std::uint64_t>> kNoHist{
    {"release_late_le_5000ns", 0}, {"release_late_le_100000ns", 0}, {"release_late_le_1000000ns", 0},
    {"release_late_le_inf", 0}};
}  // namespace

TEST_CASE("results: release lateness percentiles from the engine's histogram, over the run only",
          "[unit][run][results][engine]") {
  // Before the run: 1000 releases, all late by over 1 ms (an earlier run's); they must not count.
  const auto a = engine_counters(1000, 1000, 0, 0,
                                 {{"release_late_le_5000ns", 0}, {"release_late_le_100000ns", 0},
                                  {"release_late_le_1000000ns", 0}, {"release_late_le_inf", 1000}});
  // The run: 10,000 releases, 9,890 within 5 µs, 100 within 100 µs, 10 within 1 ms.
  const auto b = engine_counters(11000, 1000, 0, 0,
                                 {{"release_late_le_inf", 1000}, {"release_late_le_5000ns", 9890},
                                  {"release_late_le_100000ns", 100}, {"release_late_le_1000000ns", 10}});
  const auto j = engine_json(a, b, 1.0);
  CHECK(j.at("release_late_p50_us").get<double>() == 5.0);
  CHECK(j.at("release_late_p99_us").get<double>() == 100.0);   // 9,890 < 9,900 <= 9,990
  CHECK(j.at("release_late_p999_us").get<double>() == 100.0);  // 9,990 of 10,000 within 100 µs
  CHECK_FALSE(j.at("degraded").get<bool>());
  CHECK(j.at("degraded_reasons").empty());
  // The 99th percentile beyond the last finite bound: null, not a number.
  const auto c = engine_counters(2000, 1000, 0, 0,
                                 {{"release_late_le_5000ns", 900}, {"release_late_le_100000ns", 0},
                                  {"release_late_le_1000000ns", 0}, {"release_late_le_inf", 1100}});
  const auto k = engine_json(a, c, 1.0);
  CHECK(k.at("release_late_p50_us").get<double>() == 5.0);
  CHECK(k.at("release_late_p99_us").is_null());
  // An engine without the histogram (an older one): no percentiles, the rest as before.
  const auto old = engine_json(engine_counters(0, 0, 0, 0, {}), engine_counters(10, 0, 0, 0, {}), 1.0);
  CHECK_FALSE(old.contains("release_late_p99_us"));
  CHECK(old.at("releases").get<double>() == 10);
}

TEST_CASE("results: a run's emulation is degraded when the engine fell behind or its rings lost frames",
          "[unit][run][results][engine]") {
  const auto zero = engine_counters(0, 0, 0, 0, kNoHist);
  SECTION("on time, nothing lost") {
    const auto j = engine_json(zero, engine_counters(100'000, 999, 50'000, 5, kNoHist), 1.0);  // 0.999 %, 0.01 %
    CHECK_FALSE(j.at("degraded").get<bool>());
    CHECK(j.at("degraded_reasons").empty());
    CHECK(j.at("thresholds").at("released_late_over_1ms_fraction").get<double>() == kDegradedLateOver1msFraction);
    CHECK(j.at("thresholds").at("ring_dropped_fraction_of_received").get<double>() == kDegradedRingDropFraction);
    CHECK(j.at("rx_frames").get<double>() == 50'000);
  }
  SECTION("more than 1 % of releases over 1 ms late") {
    const auto j = engine_json(zero, engine_counters(100'000, 1'001, 50'000, 0, kNoHist), 1.0);
    CHECK(j.at("degraded").get<bool>());
    REQUIRE(j.at("degraded_reasons").size() == 1);
    CHECK_THAT(j.at("degraded_reasons")[0].get<std::string>(),
               Catch::Contains("1.00 % of packets released more than 1 ms late (threshold 1 %)"));
  }
  SECTION("the RX rings lost more than 1 in 10,000 frames") {
    const auto j = engine_json(zero, engine_counters(100'000, 0, 100'000, 11, kNoHist), 1.0);
    CHECK(j.at("degraded").get<bool>());
    REQUIRE(j.at("degraded_reasons").size() == 1);
    CHECK_THAT(j.at("degraded_reasons")[0].get<std::string>(), Catch::Contains("11 frames lost in the engine's RX rings"));
    CHECK_THAT(j.at("degraded_reasons")[0].get<std::string>(), Catch::Contains("threshold 0.01 %"));
  }
  SECTION("both") {
    const auto j = engine_json(zero, engine_counters(1000, 300, 1000, 200, kNoHist), 1.0);
    CHECK(j.at("degraded").get<bool>());
    CHECK(j.at("degraded_reasons").size() == 2);
  }
  SECTION("a degraded run says how much of the run the engine spent off its CPU, and why") {
    auto from = zero, to = engine_counters(1000, 300, 1000, 0, kNoHist);
    from.emplace_back("run_delay_ns", 1'000'000'000);
    from.emplace_back("cpu_steal_ns", 0);
    to.emplace_back("run_delay_ns", 1'050'000'000);  // 50 ms of 2 s runnable but waiting
    to.emplace_back("cpu_steal_ns", 100'000'000);    // 100 ms taken by the hypervisor
    const auto j = engine_json(from, to, 2.0);
    CHECK(j.at("run_delay_fraction").get<double>() == Approx(0.025));
    CHECK(j.at("cpu_steal_fraction").get<double>() == Approx(0.05));
    REQUIRE(j.at("degraded_reasons").size() == 1);
    CHECK_THAT(j.at("degraded_reasons")[0].get<std::string>(),
               Catch::Contains("the hypervisor took 5.00 % of its CPU's time; it waited runnable 2.50 % of the time"));
    // Counters of an engine that did not measure them: neither field, no words about them.
    const auto old = engine_json(zero, engine_counters(1000, 300, 1000, 0, kNoHist), 2.0);
    CHECK_FALSE(old.contains("run_delay_fraction"));
    CHECK_THAT(old.at("degraded_reasons")[0].get<std::string>(), !Catch::Contains("hypervisor"));
  }
  SECTION("the verdict alone, on figures from elsewhere") {
    json e = {{"released_late_over_1ms_fraction", 0.088}, {"rx_frames", 1e6}, {"rx_ring_dropped", 0.0}};
    engine_assessment(e);
    CHECK(e.at("degraded").get<bool>());
    json fine = {{"released_late_over_1ms_fraction", 0.0005}};
    engine_assessment(fine);
    CHECK_FALSE(fine.at("degraded").get<bool>());
  }
}
