// Scenario runs on real labs: agents in the nodes' namespaces, every byte over TCP through
// the emulated WAN. Checks the data plane's byte counts against the scenario, that the
// iteration time follows the WAN rate, and that k connections beat one over a long fat link.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "process.hpp"
#include "quiet_host.hpp"

using namespace wanlab;
using test::run;
namespace fs = std::filesystem;

namespace {

fs::path tmp(const std::string& name) { return fs::temp_directory_path() / name; }

// Two DCs of `nodes` nodes x `gpus` GPUs, one WAN link each way.
std::string write_topology(const std::string& lab, int nodes, int gpus, const std::string& rtt,
                           const std::string& rate) {
  const auto path = tmp(lab + ".json");
  nlohmann::json doc = {
      {"name", lab},
      {"dcs",
       {{{"name", "use"}, {"nodes", nodes}, {"gpus_per_node", gpus}},
        {{"name", "euw"}, {"nodes", nodes}, {"gpus_per_node", gpus}}}},
      {"wan", {{{"between", {"use", "euw"}}, {"rtt", rtt}, {"rate", rate}}}}};
  std::ofstream(path) << doc.dump(2);
  return path.string();
}

std::string write_scenario(const std::string& name, const std::string& topology, nlohmann::json par,
                           const std::string& schedule, int micro_batches, int connections, double scale,
                           int layers = 4) {
  const auto path = tmp(name + "-scenario.json");
  nlohmann::json doc = {{"name", name},
                        {"topology", topology},
                        {"model", {{"layers", layers}, {"hidden", 2048}, {"heads", 16}, {"seq_len", 2048}, {"vocab", 32000}}},
                        {"parallelism", par},
                        {"schedule", schedule},
                        {"micro_batches", micro_batches},
                        {"iterations", 3},
                        {"warmup", 1},
                        {"connections", connections},
                        {"scale", scale}};
  std::ofstream(path) << doc.dump(2);
  return path.string();
}

nlohmann::json run_scenario(const std::string& scenario, const fs::path& out, const std::string& extra = "") {
  fs::remove_all(out);
  auto r = run(test::wanlab() + " run " + scenario + " --out " + out.string() + " --quiet " + extra);
  INFO(r.out);
  for (const auto& f : fs::exists(out / "agents") ? fs::directory_iterator(out / "agents") : fs::directory_iterator())
    if (r.code != 0) UNSCOPED_INFO(run("tail -n 20 " + f.path().string()).out);
  REQUIRE(r.code == 0);
  std::ifstream f(out / "summary.json");
  return nlohmann::json::parse(f);
}

const nlohmann::json& wan(const nlohmann::json& summary, const std::string& src, const std::string& dst) {
  for (const auto& w : summary.at("wan"))
    if (w.at("src") == src && w.at("dst") == dst) return w;
  FAIL("no WAN entry " << src << "->" << dst);
  throw std::logic_error("unreachable");
}

}  // namespace

TEST_CASE("a two-DC run: bytes on the WAN are the scenario's, results are complete", "[run]") {
  const auto topo = write_topology("wlrun", 2, 4, "20ms", "200Mbit");
  // One stage per DC: dp 2 x tp 4 fills a DC's 8 GPUs.
  const auto scen = write_scenario("wlrun-basic", topo, {{"pp", 2}, {"dp", 2}, {"tp", 4}}, "1f1b", 4, 2, 0.1);
  const auto out = tmp("wlrun-basic-out");
  const auto s = run_scenario(scen, out);
  for (const auto& [src, dst] : {std::pair{"use", "euw"}, std::pair{"euw", "use"}}) {
    const auto& w = wan(s, src, dst);
    INFO(src << "->" << dst << ": " << w.dump());
    const double expected = w.at("expected_payload_bytes").get<double>();
    REQUIRE(expected > 1e6);
    // Counted by the userspace engine on the wire (TCP payload), against the scenario's
    // bytes: the 32-byte stripe headers and retransmissions are the only difference.
    CHECK(std::abs(w.at("payload_bytes").get<double>() - expected) / expected < 0.02);
  }
  // TCP as the senders left it: dp 2 x tp 4 senders per direction, 2 connections each,
  // with a real cwnd and RTT.
  REQUIRE(s.at("tcp").size() == 2);
  for (const auto& t : s.at("tcp")) {
    INFO(t.dump());
    CHECK(t.at("connections") == 2 * 4 * 2);
    // One connection may end at 1 segment, where a retransmission timeout leaves Linux's
    // window (seen once in CI's netns tier); the typical one is larger.
    CHECK(t.at("cwnd_segments").at("min").get<double>() >= 1);
    CHECK(t.at("cwnd_segments").at("p50").get<double>() >= 2);
    CHECK(t.at("srtt_ms").at("p50").get<double>() >= 20);  // the WAN's RTT at least
    CHECK(t.at("srtt_ms").at("p50").get<double>() < 1000);
    CHECK(t.at("mss").get<double>() > 1000);
    // tcp_pacing (the default): TCP paces every WAN connection itself, as with fq.
    CHECK(t.at("paced_connections") == t.at("connections"));
  }
  CHECK(s.at("iteration_time_s").at("mean").get<double>() > 0.05);
  // The machine's CPU during the run, the hypervisor's steal among it.
  REQUIRE(s.contains("host_cpu"));
  CHECK(s.at("host_cpu").at("busy_fraction").get<double>() > 0);
  CHECK(s.at("host_cpu").at("busy_fraction").get<double>() <= 1);
  CHECK(s.at("host_cpu").at("steal_fraction").get<double>() >= 0);
  CHECK(s.at("host_cpu").at("steal_fraction").get<double>() < 1);
  // The userspace engine over the run, from its counters: it ran and released the frames
  // that crossed the WAN. (The kernel backend has no engine, and no such block.)
  if (s.at("backend") == "userspace") {
    REQUIRE(s.contains("engine"));
    const auto& eng = s.at("engine");
    INFO(eng.dump());
    CHECK(eng.at("cpu_fraction_of_a_core").get<double>() > 0);
    CHECK(eng.at("cpu_fraction_of_a_core").get<double>() < 1.5);  // one thread: at most a core (and rounding)
    CHECK(eng.at("releases").get<double>() > 100);
    CHECK(eng.at("release_late_mean_us").get<double>() >= 0);
    CHECK(eng.at("released_late_over_1ms_fraction").get<double>() <=
          eng.at("released_late_over_100us_fraction").get<double>());
    // Its scheduling (root may use SCHED_FIFO: the default), the lateness percentiles of its
    // histogram, and the verdict on the run with the thresholds it was reached by.
    // On 2+ CPUs it is pinned to the last one (receive steering, lab/plan.hpp SetRps).
    const auto scheduling = eng.at("scheduling").get<std::string>();
    const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus >= 2)
      CHECK(scheduling.starts_with("SCHED_FIFO 50 on CPU "));
    else
      CHECK(scheduling == "SCHED_FIFO 50");
    REQUIRE(eng.at("release_late_p50_us").is_number());
    if (eng.at("release_late_p99_us").is_number())  // null: beyond the histogram's last bound
      CHECK(eng.at("release_late_p50_us").get<double>() <= eng.at("release_late_p99_us").get<double>());
    CHECK(eng.at("degraded").is_boolean());
    CHECK(eng.at("degraded").get<bool>() == !eng.at("degraded_reasons").empty());
    CHECK(eng.at("thresholds").at("released_late_over_1ms_fraction").get<double>() == 0.01);
  } else {
    CHECK_FALSE(s.contains("engine"));
  }
  CHECK(s.at("gpu_utilization").at("per_gpu").size() == 16);
  CHECK(s.at("backend") == "userspace");
  CHECK(s.at("scale") == 0.1);
  const auto timeline = nlohmann::json::parse(std::ifstream(out / "timeline.json"));
  CHECK(timeline.at("traceEvents").size() > 16 * 3 * 8);
  std::ifstream csv(out / "links.csv");
  std::string header;
  std::getline(csv, header);
  CHECK(header == "t_s,src,dst,bytes,payload_bytes,mbit_s,drops,queued_packets");
  int rows = 0;
  for (std::string line; std::getline(csv, line);) ++rows;
  CHECK(rows >= 4);
  // The lab came up for the run and is gone again.
  CHECK(run(test::wanlab() + " status wlrun").code != 0);
}

TEST_CASE("the iteration time rises when the WAN rate drops", "[run]") {
  const auto topo = write_topology("wlrate", 1, 4, "10ms", "400Mbit");
  const auto scen = write_scenario("wlrate", topo, {{"pp", 2}, {"dp", 1}, {"tp", 4}}, "gpipe", 4, 2, 0.5);
  run(test::wanlab() + " down wlrate");
  REQUIRE(run(test::wanlab() + " up " + topo).code == 0);
  const auto fast = run_scenario(scen, tmp("wlrate-fast"));
  REQUIRE(run(test::wanlab() + " link set use euw --lab wlrate --rate 100Mbit").code == 0);
  REQUIRE(run(test::wanlab() + " link set euw use --lab wlrate --rate 100Mbit").code == 0);
  const auto slow = run_scenario(scen, tmp("wlrate-slow"));
  run(test::wanlab() + " down wlrate");
  const double tf = fast.at("iteration_time_s").at("mean").get<double>();
  const double ts = slow.at("iteration_time_s").at("mean").get<double>();
  WARN("iteration time at 400 Mbit/s: " << tf << " s; at 100 Mbit/s: " << ts << " s");
  CHECK(ts > 1.5 * tf);
}

TEST_CASE("k TCP connections fill a 200 ms link that one connection cannot", "[run]") {
  // One GPU per DC, so a single worker pair carries everything: with k = 1 one TCP flow,
  // whose window (the receiver's buffer limit) caps it far below the link rate at 200 ms.
  const auto topo = write_topology("wlconn", 1, 1, "200ms", "800Mbit");
  auto scen1 = write_scenario("wlconn-k1", topo, {{"pp", 2}, {"dp", 1}, {"tp", 1}}, "gpipe", 6, 1, 1.0, 2);
  auto scen4 = write_scenario("wlconn-k4", topo, {{"pp", 2}, {"dp", 1}, {"tp", 1}}, "gpipe", 6, 4, 1.0, 2);
  // k = 1 with the scenario's window: 4 MiB, so at most 4 MiB per 200 ms, 168 Mbit/s.
  auto scenw = write_scenario("wlconn-w", topo, {{"pp", 2}, {"dp", 1}, {"tp", 1}}, "gpipe", 6, 1, 1.0, 2);
  {
    auto doc = nlohmann::json::parse(std::ifstream(scenw));
    doc["tcp_window"] = "1MiB";
    std::ofstream(scenw) << doc.dump(2);
  }
  test::measure_on_quiet_host("k connections on a 200 ms link", [&] {
    run(test::wanlab() + " down wlconn");
    REQUIRE(run(test::wanlab() + " up " + topo).code == 0);
    const auto k1 = run_scenario(scen1, tmp("wlconn-k1"));
    const auto k4 = run_scenario(scen4, tmp("wlconn-k4"));
    const auto kw = run_scenario(scenw, tmp("wlconn-w"));
    run(test::wanlab() + " down wlconn");
    // What the link delivered at best over half a second (links.csv, payload bytes): the
    // activations of a whole GPipe forward phase are in flight then.
    auto peak = [](const fs::path& out) {
      std::ifstream csv(out / "links.csv");
      std::string line;
      std::getline(csv, line);
      std::vector<std::pair<double, double>> samples;  // t, payload bytes (use -> euw)
      while (std::getline(csv, line)) {
        std::vector<std::string> f;
        std::stringstream ss(line);
        for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
        if (f.size() == 8 && f[1] == "use") samples.emplace_back(std::stod(f[0]), std::stod(f[4]));
      }
      double best = 0;
      for (std::size_t i = 0; i < samples.size(); ++i)
        for (std::size_t j = i; j < samples.size(); ++j)
          if (samples[j].first - samples[i].first >= 0.5) {
            best = std::max(best, (samples[j].second - samples[i].second) * 8 / 1e6 /
                                      (samples[j].first - samples[i].first));
            break;
          }
      return best;
    };
    const double p1 = peak(tmp("wlconn-k1")), p4 = peak(tmp("wlconn-k4"));
    WARN("200 ms RTT, 800 Mbit/s link: k=1 peaks at " << p1 << " Mbit/s (iteration " << k1.at("iteration_time_s").at("mean")
                                                    << " s), k=4 at " << p4 << " Mbit/s (iteration "
                                                    << k4.at("iteration_time_s").at("mean") << " s)");
    test::Expect e;
    e(p4 > 1.3 * p1, "k=4 peaks at " + std::to_string(p4) + " Mbit/s, expected more than 1.3 x k=1's " + std::to_string(p1));

    // The scenario's window holds the one connection to about window / RTT, and it uses it.
    // Without it the connection reaches what the nodes' buffers allow, which the host sets:
    // 440-510 Mbit/s where tcp_wmem allows more than 10 MB, 158 Mbit/s where its maximum is
    // Linux's default 4 MiB. A 1 MiB window (42 Mbit/s) stays well below either.
    const double pw = peak(tmp("wlconn-w"));
    const double window_rate = 1.0 * 1024 * 1024 * 8 / 0.2 / 1e6;
    WARN("tcp_window 1MiB: k=1 peaks at " << pw << " Mbit/s (window / RTT " << window_rate << " Mbit/s; iteration "
                                          << kw.at("iteration_time_s").at("mean") << " s)");
    const auto w = "tcp_window 1MiB: k=1 peaks at " + std::to_string(pw) + " Mbit/s, ";
    e(pw <= 1.25 * window_rate, w + "expected at most 1.25 x window / RTT");
    e(pw >= 0.6 * window_rate, w + "expected at least 0.6 x window / RTT");
    e(pw < 0.7 * p1, w + "expected under 0.7 x k=1's " + std::to_string(p1) + " without the window");
    return e;
  });
}

TEST_CASE("an atlas run: every WAN transfer in a window, nothing on the link before its grant", "[run][atlas]") {
  const auto topo = write_topology("wlatlas", 2, 4, "20ms", "200Mbit");
  const auto path = write_scenario("wlatlas", topo, {{"pp", 2}, {"dp", 2}, {"tp", 4}}, "1f1b", 4, 2, 0.1);
  auto doc = nlohmann::json::parse(std::ifstream(path));
  doc["policy"] = "atlas";
  std::ofstream(path) << doc.dump(2);
  const auto out = tmp("wlatlas-out");
  const auto s = run_scenario(path, out);
  CHECK(s.at("policy") == "atlas");
  for (const auto& [src, dst] : {std::pair{"use", "euw"}, std::pair{"euw", "use"}}) {
    const auto& w = wan(s, src, dst);
    const double expected = w.at("expected_payload_bytes").get<double>();
    CHECK(std::abs(w.at("payload_bytes").get<double>() - expected) / expected < 0.02);
  }
  const auto& win = s.at("windows");
  INFO(win.dump());
  CHECK(win.at("enforced_by") == "agents and data plane");
  CHECK(win.at("revoked") == 0);
  // 2 replicas x 4 micro-batches x 2 directions x 3 iterations
  CHECK(win.at("transfers") == 48);
  CHECK(win.at("windows") == 48);
  std::ifstream csv(out / "windows.csv");
  std::string line;
  std::getline(csv, line);
  CHECK(line.rfind("src,dst,transfer,iteration,pipeline,", 0) == 0);
  int rows = 0;
  while (std::getline(csv, line)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
    REQUIRE(f.size() >= 17);
    ++rows;
    INFO(line);
    // The gate lets a transfer's first byte into the link only once its window opened.
    REQUIRE_FALSE(f[15].empty());
    CHECK(std::stod(f[15]) >= std::stod(f[13]) - 1e-6);
  }
  CHECK(rows == 48);
  CHECK(fs::exists(out / "timeline.json"));
}

TEST_CASE("a run with a prefill load: prefills fill the bubbles, never overlap training compute", "[run][prefill]") {
  const auto topo = write_topology("wlpf", 2, 4, "20ms", "200Mbit");
  const auto scen = write_scenario("wlpf", topo, {{"pp", 2}, {"dp", 2}, {"tp", 4}}, "1f1b", 4, 2, 0.1);
  auto doc = nlohmann::json::parse(std::ifstream(scen));
  // 8 layers of a 2048-wide model over 1024 tokens: 0.3 ms per layer at 40 % of an H100.
  doc["prefill"] = {{"model", {{"layers", 8}, {"hidden", 2048}, {"heads", 16}, {"seq_len", 2048}, {"vocab", 32000}}},
                    {"rate_per_s", 300},
                    {"prompt_tokens", 1024},
                    {"deadline_s", 1},
                    {"loadgen", "use-0"},
                    {"decode", {"use-1", "euw-1"}},
                    {"scale", 0.01}};
  std::ofstream(scen) << doc.dump(2);
  const auto out = tmp("wlpf-out");
  nlohmann::json s;
  // How many requests finish, how soon, and how long training waits are timings: judged by
  // the hypervisor's steal during the run.
  test::measure_on_quiet_host("prefill run", [&] {
    s = run_scenario(scen, out);
    const auto& p = s.at("prefill");
    INFO(p.dump());
    const int requests = p.at("requests").get<int>();
    REQUIRE(requests > 100);
    // Every KV cache reached its decode node, but for those of the last prefills, still on
    // their way when training (and with it the run) ended: counted, and only a few.
    CHECK(p.at("kv_delivered").get<int>() + p.at("kv_in_flight_at_end").get<int>() == p.at("completed").get<int>());
    CHECK(p.at("kv_in_flight_at_end").get<int>() <= std::max(2, p.at("completed").get<int>() / 100));
    CHECK(p.at("placed").get<int>() + p.at("queued_at_end").get<int>() + p.at("expired").get<int>() == requests);
    test::Expect e;
    e(p.at("completed").get<int>() > 0.8 * requests,
      std::to_string(p.at("completed").get<int>()) + " of " + std::to_string(requests) + " completed, expected 80 %");
    e(p.at("ttft_s").at("p50").get<double>() < 1.0,
      "TTFT p50 " + std::to_string(p.at("ttft_s").at("p50").get<double>()) + " s, expected under 1");
    // Training waits for at most a layer at a time.
    e(p.at("training_wait_s_per_iteration").at("max").get<double>() < 0.05,
      "training waited " + std::to_string(p.at("training_wait_s_per_iteration").at("max").get<double>()) +
          " s per iteration, expected under 0.05");
    return e;
  });
  // Of training's wait, the part in idle times that ran past their expected end.
  const auto& wait = s.at("prefill").at("training_wait_s_per_iteration");
  CHECK(wait.at("after_expected_end_mean").get<double>() >= 0);
  CHECK(wait.at("after_expected_end_mean").get<double>() <= wait.at("mean").get<double>() + 1e-9);
  // Prefill counts in GPU utilization, not in training's bubble fraction.
  CHECK(s.at("gpu_utilization").at("mean").get<double>() > 1 - s.at("bubble_fraction").get<double>() + 0.02);
  CHECK(s.at("training_slowdown").is_null());  // needs the run without the load (bench)

  // On every GPU's compute track, no two spans overlap: prefill never runs with training,
  // nor twice at once.
  const auto timeline = nlohmann::json::parse(std::ifstream(out / "timeline.json"));
  std::map<std::pair<int, int>, std::vector<std::tuple<double, double, std::string>>> tracks;
  int prefills = 0;
  for (const auto& e : timeline.at("traceEvents")) {
    if (e.value("ph", "") != "X") continue;
    const auto name = e.value("name", std::string{});
    const bool prefill = name.rfind("prefill", 0) == 0;
    const bool training = name.rfind("forward", 0) == 0 || name.rfind("backward", 0) == 0;
    if (!prefill && !training) continue;
    prefills += prefill;
    tracks[{e.at("pid").get<int>(), e.at("tid").get<int>()}].emplace_back(
        e.at("ts").get<double>(), e.at("ts").get<double>() + e.at("dur").get<double>(), prefill ? "p" : "t");
  }
  CHECK(prefills > 100);
  int overlaps = 0;
  for (auto& [track, spans] : tracks) {
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i)
      if (std::get<0>(spans[i]) < std::get<1>(spans[i - 1]) - 1) ++overlaps;  // 1 µs of timestamp rounding allowed
  }
  CHECK(overlaps == 0);
}

TEST_CASE("a run right after one that failed as its first agents joined gets agents of its own", "[run]") {
  // compute "cuda" fails at the first agent that reports no GPU, before the node's other
  // agents have connected; those connect to a controller whose run has ended. The next run
  // must not take them for its own (they exit, and it failed with "the agent of node ... went
  // away").
  const auto topo = write_topology("wlagain", 2, 2, "10ms", "1Gbit");
  const auto scen = write_scenario("wlagain", topo, {{"pp", 2}, {"dp", 2}, {"tp", 2}}, "1f1b", 4, 1, 0.05, 2);
  nlohmann::json doc;
  std::ifstream(scen) >> doc;
  doc["name"] = "wlagain-cuda";
  doc["compute"] = "cuda";
  const auto cuda = tmp("wlagain-cuda-scenario.json");
  std::ofstream(cuda) << doc.dump(2);
  run(test::wanlab() + " down wlagain");
  REQUIRE(run(test::wanlab() + " up " + topo).code == 0);
  for (int attempt = 0; attempt < 3; ++attempt) {
    const auto failed = run(test::wanlab() + " run " + cuda.string() + " --out " + tmp("wlagain-cuda").string() + " --quiet");
    INFO(failed.out);
    if (failed.code == 0) {
      WARN("this machine has a GPU: the cuda run succeeded, so nothing failed before the next run");
    } else {
      CHECK(failed.out.find("has no GPU") != std::string::npos);
    }
    const auto next = run_scenario(scen, tmp("wlagain-modeled"));
    CHECK(next.at("iteration_time_s").at("mean").get<double>() > 0);
  }
  run(test::wanlab() + " down wlagain");
}
