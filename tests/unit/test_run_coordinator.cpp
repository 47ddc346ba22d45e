// The run coordinator as a pure state machine: the happy path message by message (who gets
// what, the assignments' content, the start instant, progress and reports), and every way
// a run fails (a `failed` message, a lost agent, timeouts, bad reports, cuda without GPUs),
// each with the abort it sends and the error it keeps.
#include <catch2/catch.hpp>

#include <algorithm>

#include "test_workload_fixtures.hpp"
#include "wanlab/common/protocol.hpp"
#include "wanlab/core/address_plan.hpp"
#include "wanlab/run/coordinator.hpp"
#include "wanlab/workload/execute.hpp"
#include "wanlab/workload/plan.hpp"
#include "wanlab/workload/scenario.hpp"

using namespace wanlab;
using namespace wanlab::run;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

constexpr std::int64_t kUnixNow = 1'700'000'000'123'456'789;
std::int64_t fake_unix_now() {
  return kUnixNow;
}

const Clock::time_point t0{};  // the steady clock's epoch: times below are offsets from it

// Two DCs of 3 nodes with 2 GPUs each. pp 2 x dp 2 x tp 2, stage 0 in use, stage 1 in euw:
// every replica's TP pair fills one node, so the run needs use-0, use-1, euw-0, euw-1
// (workers 0,1 / 2,3 / 4,5 / 6,7), and use-2, euw-2 stay idle.
const core::Topology& topo() {
  static const core::Topology t = workload::testing::lab(json::parse(R"([
    {"name": "use", "nodes": 3, "gpus_per_node": 2},
    {"name": "euw", "nodes": 3, "gpus_per_node": 2}])"));
  return t;
}

json scenario_doc(const std::string& compute = "modeled") {
  return {{"name", "small"},
          {"topology", "two-dc.json"},  // must exist; the plan uses topo() above
          {"model", {{"layers", 4}, {"hidden", 128}, {"heads", 8}, {"seq_len", 32}, {"vocab", 100}}},
          {"parallelism", {{"pp", 2}, {"dp", 2}, {"tp", 2}}},
          {"placement", json::array({json::array({"use", "use"}), json::array({"euw", "euw"})})},
          {"schedule", "1f1b"},
          {"micro_batches", 4},
          {"iterations", 3},
          {"warmup", 1},
          {"connections", 4},
          {"compute", compute}};
}

workload::Plan make_plan(const std::string& compute = "modeled") {
  const auto s =
      workload::parse_scenario(scenario_doc(compute), "small.json", std::string(WANLAB_SOURCE_DIR) + "/topologies");
  return workload::build_plan(s, topo());
}

CoordinatorOptions options() {
  CoordinatorOptions o;
  o.data_port = 7400;
  o.join_timeout = 1000ms;
  o.setup_timeout = 2500ms;
  o.start_delay = 300ms;
  o.stall_timeout = 5000ms;
  return o;
}

RunCoordinator make(const std::string& compute = "modeled") {
  RunCoordinator co("r1", make_plan(compute), topo(), options(), t0);
  co.unix_now_ns = &fake_unix_now;
  return co;
}

const std::vector<std::string> kNeeded = {"euw-0", "euw-1", "use-0", "use-1"};  // sorted, as nodes() is

json hello(const std::string& node, int gpus = 0) {
  return {{"v", 1}, {"type", "hello"}, {"node", node}, {"pid", 100}, {"agent_version", "0.1.0"}, {"gpus", gpus}};
}
json from_agent(const std::string& type, const std::string& run = "r1") {
  return {{"v", 1}, {"type", type}, {"run", run}};
}
json progress(int worker, int iteration) {
  auto m = from_agent("progress");
  m["worker"] = worker;
  m["iteration"] = iteration;
  return m;
}
json report_msg(const program::WorkerReport& r) {
  auto m = from_agent("report");
  m["report"] = program::to_json(r);
  return m;
}
json abort_msg(const std::string& reason) {
  return {{"v", 1}, {"type", "abort"}, {"run", "r1"}, {"reason", reason}};
}

// The same message to each node, in order.
std::vector<Outgoing> each(const std::vector<std::string>& nodes, const json& m) {
  std::vector<Outgoing> out;
  for (const auto& n : nodes) out.push_back({n, m});
  return out;
}

std::vector<std::string> nodes_of(const std::vector<Outgoing>& out) {
  std::vector<std::string> n;
  for (const auto& o : out) n.push_back(o.node);
  return n;
}

// Every message the coordinator sends is a valid controller message of the protocol.
void check_valid(const std::vector<Outgoing>& out) {
  for (const auto& o : out) {
    INFO(o.message.dump());
    const auto err = protocol::validate(o.message, protocol::Sender::controller);
    CHECK_FALSE(err);
  }
}

// The node of each worker of make_plan().
std::string node_of(int worker) {
  static const char* names[] = {"use-0", "use-0", "use-1", "use-1", "euw-0", "euw-0", "euw-1", "euw-1"};
  return names[worker];
}

// Reports the agents would send: the plan's programs on a virtual clock.
std::vector<program::WorkerReport> reports_of(const workload::Plan& plan) {
  return workload::execute(plan.programs, plan.scenario.iterations, workload::modeled_compute(plan),
                           workload::uncontended_comm(plan));
}

// Drives `co` to the given phase: every needed agent joins at t0 + 10 ms, all ready at
// + 20 ms, all connected at + 30 ms.
void drive_to(RunCoordinator& co, Phase phase) {
  for (const auto& n : kNeeded) co.agent_joined(n, hello(n), t0 + 10ms);
  REQUIRE(co.phase() == Phase::preparing);
  if (phase == Phase::preparing) return;
  for (const auto& n : kNeeded) co.message(n, from_agent("ready"), t0 + 20ms);
  REQUIRE(co.phase() == Phase::connecting);
  if (phase == Phase::connecting) return;
  for (const auto& n : kNeeded) co.message(n, from_agent("connected"), t0 + 30ms);
  REQUIRE(co.phase() == Phase::running);
}

}  // namespace

TEST_CASE("coordinator: the plan's premises", "[unit][run][coordinator]") {
  const auto plan = make_plan();
  REQUIRE(plan.workers.size() == 8);
  for (int w = 0; w < 8; ++w) {
    INFO("worker " << w);
    const auto& p = plan.workers[static_cast<std::size_t>(w)];
    CHECK(core::node_name(topo().dcs[p.dc], p.node) == node_of(w));
    CHECK(p.gpu == w % 2);
  }
  auto co = make();
  CHECK(co.nodes() == std::set<std::string>(kNeeded.begin(), kNeeded.end()));
  CHECK(co.phase() == Phase::agents);
  CHECK(co.run_id() == "r1");
  CHECK(co.error().empty());
  CHECK(co.progress() == std::vector<int>(8, -1));
  CHECK(co.iterations_done() == 0);
  CHECK_FALSE(co.start_unix_ns());
  CHECK(to_string(Phase::agents) == "waiting_for_agents");
  CHECK(to_string(Phase::preparing) == "preparing");
  CHECK(to_string(Phase::connecting) == "connecting");
  CHECK(to_string(Phase::running) == "running");
  CHECK(to_string(Phase::done) == "done");
  CHECK(to_string(Phase::failed) == "failed");
}

TEST_CASE("coordinator: windowed runs pace WAN pairs; a scenario's tcp_window is sent scaled",
          "[unit][run][coordinator]") {
  auto doc = scenario_doc();
  doc["tcp_window"] = "1MiB";
  doc["scale"] = 0.5;
  const auto s = workload::parse_scenario(doc, "small.json", std::string(WANLAB_SOURCE_DIR) + "/topologies");
  auto o = options();
  o.windows = true;
  RunCoordinator co("r1", workload::build_plan(s, topo()), topo(), o, t0);
  const auto a = co.assignment("use-0");
  CHECK(a["tcp_window"] == 512 * 1024);
  // Bytes/s per connection towards each other DC: the link's rate x scale over tp x k
  // connections, so a window's transfer leaves at the link's rate.
  const auto* l = topo().find_link(0, 1);
  REQUIRE(l != nullptr);
  REQUIRE(a["pacing"].size() == 1);
  CHECK(a["pacing"]["euw"].get<double>() ==
        Approx(static_cast<double>(l->params.rate.bps) * 0.5 / 8 / (2 * 4)).epsilon(1e-6));
  // Without windows (fair) nothing is paced; without tcp_window nothing is clamped.
  const auto plain = make().assignment("use-0");
  CHECK_FALSE(plain.contains("pacing"));
  CHECK_FALSE(plain.contains("tcp_window"));
}

TEST_CASE("coordinator: the assignment of a node", "[unit][run][coordinator]") {
  const auto plan = make_plan();
  const auto co = make();
  const auto a = co.assignment("use-0");
  // The peers: every worker the node's workers send to, receive from or share a ring with
  // (its own among them: the ring of (stage 0, *, t) is {t, 2 + t}).
  json peers = json::array();
  const std::vector<std::tuple<int, std::string, std::string, std::string>> expected_peers = {
      {0, "use-0", "use", "198.18.0.2"}, {1, "use-0", "use", "198.18.0.2"}, {2, "use-1", "use", "198.18.0.3"},
      {3, "use-1", "use", "198.18.0.3"}, {4, "euw-0", "euw", "198.18.4.2"}, {5, "euw-0", "euw", "198.18.4.2"}};
  for (const auto& [w, node, dc, address] : expected_peers)
    peers.push_back({{"worker", w}, {"node", node}, {"dc", dc}, {"address", address}, {"port", 7400}});
  json workers = json::array();
  for (std::size_t w : {0u, 1u})
    workers.push_back({{"gpu", static_cast<int>(w)},
                       {"effective_flops", plan.effective_flops[w]},
                       {"program", program::to_json(plan.programs[w])}});
  const json expected = {{"node", "use-0"},      {"dc", "use"},      {"listen_port", 7400}, {"iterations", 3},
                         {"compute", "modeled"}, {"connections", 4}, {"workers", workers},  {"peers", peers},
                         {"windows", false},     {"port_salt", 0},   {"tcp_slow_start_after_idle", false},
                         {"tcp_pacing", true},   {"tcp_congestion", "cubic"},  {"tp", 2}};
  CHECK(a == expected);
  // The addresses are the address plan's.
  CHECK(core::node_address(0, 1).to_string() == "198.18.0.3");
  CHECK(core::node_address(1, 0).to_string() == "198.18.4.2");
  CHECK(plan.effective_flops[0] > 0);

  // The last stage's second replica: sends gradients back to (0, 1, t) = workers 2, 3 in use-1.
  const auto b = co.assignment("euw-1");
  CHECK(b["dc"] == "euw");
  CHECK(b["workers"].size() == 2);
  CHECK(b["workers"][0]["program"]["worker"] == 6);
  CHECK(b["workers"][1]["gpu"] == 1);
  std::vector<int> ids;
  std::vector<std::string> addresses;
  for (const auto& p : b["peers"]) {
    ids.push_back(p["worker"].get<int>());
    addresses.push_back(p["address"].get<std::string>());
  }
  CHECK(ids == std::vector<int>{2, 3, 4, 5, 6, 7});
  CHECK(addresses ==
        std::vector<std::string>{"198.18.0.3", "198.18.0.3", "198.18.4.2", "198.18.4.2", "198.18.4.3", "198.18.4.3"});
  // Nodes that host no worker have no assignment.
  CHECK_THROWS(co.assignment("use-2"));
}

TEST_CASE("coordinator: the happy path, message by message", "[unit][run][coordinator]") {
  const auto plan = make_plan();
  auto co = make();

  // Agents join; the run waits for all four it needs. An idle node's agent gets nothing.
  CHECK(co.agent_joined("use-0", hello("use-0"), t0 + 10ms).empty());
  CHECK(co.agent_joined("use-2", hello("use-2"), t0 + 11ms).empty());
  CHECK(co.agent_joined("euw-1", hello("euw-1"), t0 + 12ms).empty());
  CHECK(co.agent_joined("euw-0", hello("euw-0"), t0 + 13ms).empty());
  CHECK(co.phase() == Phase::agents);
  auto out = co.agent_joined("use-1", hello("use-1"), t0 + 14ms);
  CHECK(co.phase() == Phase::preparing);
  REQUIRE(out.size() == 4);
  CHECK(nodes_of(out) == kNeeded);
  for (const auto& o : out) {
    INFO(o.node);
    CHECK(o.message == json{{"v", 1}, {"type", "assign"}, {"run", "r1"}, {"assignment", co.assignment(o.node)}});
    CHECK(o.message["assignment"]["node"] == o.node);
  }
  check_valid(out);

  // ready: `connect` to everyone once the last one is ready. Early `connected`, the idle
  // node and other runs do not count.
  CHECK(co.message("use-0", from_agent("ready"), t0 + 20ms).empty());
  CHECK(co.message("use-0", from_agent("ready"), t0 + 20ms).empty());  // twice is once
  CHECK(co.message("euw-0", from_agent("connected"), t0 + 20ms).empty());
  CHECK(co.message("use-2", from_agent("ready"), t0 + 20ms).empty());
  CHECK(co.message("euw-0", from_agent("ready", "r0"), t0 + 20ms).empty());
  CHECK(co.message("euw-0", from_agent("ready"), t0 + 21ms).empty());
  CHECK(co.message("euw-1", from_agent("ready"), t0 + 22ms).empty());
  CHECK(co.phase() == Phase::preparing);
  out = co.message("use-1", from_agent("ready"), t0 + 23ms);
  CHECK(co.phase() == Phase::connecting);
  CHECK(out == each(kNeeded, {{"v", 1}, {"type", "connect"}, {"run", "r1"}}));
  check_valid(out);

  // connected: `start` at the injected now + the start delay.
  // euw-0's `connected` while preparing did not count: it has to say it again.
  for (const auto& n : {"use-0", "use-1", "euw-1"}) CHECK(co.message(n, from_agent("connected"), t0 + 30ms).empty());
  CHECK(co.message("euw-0", from_agent("connected", "r2"), t0 + 30ms).empty());
  CHECK(co.phase() == Phase::connecting);
  CHECK_FALSE(co.start_unix_ns());
  out = co.message("euw-0", from_agent("connected"), t0 + 31ms);
  CHECK(co.phase() == Phase::running);
  const std::int64_t at = kUnixNow + 300'000'000;
  CHECK(co.start_unix_ns() == at);
  CHECK(out == each(kNeeded, {{"v", 1}, {"type", "start"}, {"run", "r1"}, {"delay_ms", 300}, {"at_unix_ns", at}}));
  check_valid(out);

  // progress: per worker, from its own node only, never backwards.
  CHECK(co.message("use-0", progress(0, 0), t0 + 1s).empty());
  CHECK(co.message("use-0", progress(4, 1), t0 + 1s).empty());   // not use-0's worker
  CHECK(co.message("euw-0", progress(9, 1), t0 + 1s).empty());   // no such worker
  CHECK(co.message("euw-0", progress(-1, 1), t0 + 1s).empty());  // no such worker
  auto other_run = progress(2, 0);
  other_run["run"] = "r0";
  CHECK(co.message("use-1", other_run, t0 + 1s).empty());  // another run's
  CHECK(co.progress() == std::vector<int>{0, -1, -1, -1, -1, -1, -1, -1});
  CHECK(co.iterations_done() == 0);
  for (int w = 0; w < 8; ++w) co.message(node_of(w), progress(w, w == 5 ? 1 : 0), t0 + 2s);
  CHECK(co.progress() == std::vector<int>{0, 0, 0, 0, 0, 1, 0, 0});
  CHECK(co.iterations_done() == 1);
  co.message("euw-0", progress(5, 0), t0 + 2s);  // late and out of order: kept at 1
  CHECK(co.progress()[5] == 1);
  for (int w = 0; w < 8; ++w) co.message(node_of(w), progress(w, 1), t0 + 3s);
  CHECK(co.iterations_done() == 2);

  // reports: one per worker; the last one ends the run with `bye` to everyone.
  const auto reports = reports_of(plan);
  REQUIRE(reports.size() == 8);
  REQUIRE(reports[0].iterations.size() == 3);
  for (int w : {7, 0, 1, 2, 3, 4, 5}) {
    INFO("worker " << w);
    CHECK(co.message(node_of(w), report_msg(reports[static_cast<std::size_t>(w)]), t0 + 4s).empty());
    CHECK(co.phase() == Phase::running);
    CHECK(co.progress()[static_cast<std::size_t>(w)] == 2);
  }
  CHECK(co.iterations_done() == 2);  // worker 6 has finished iteration 1 only
  out = co.message("euw-1", report_msg(reports[6]), t0 + 5s);
  CHECK(co.phase() == Phase::done);
  CHECK(out == each(kNeeded, {{"v", 1}, {"type", "bye"}}));
  check_valid(out);
  CHECK(co.iterations_done() == 3);
  CHECK(co.reports() == reports);
  CHECK(co.error().empty());

  // After the end nothing more happens.
  CHECK(co.message("use-0", from_agent("failed"), t0 + 6s).empty());
  CHECK(co.agent_left("use-0", "eof", t0 + 6s).empty());
  CHECK(co.tick(t0 + 1h).empty());
  CHECK(co.abort("too late").empty());
  CHECK(co.phase() == Phase::done);
  CHECK(co.error().empty());
}

TEST_CASE("coordinator: messages of another run, or from agents not in it, are ignored", "[unit][run][coordinator]") {
  auto co = make();
  drive_to(co, Phase::connecting);
  json f = from_agent("failed", "r0");
  f["message"] = "old run";
  CHECK(co.message("use-0", f, t0 + 40ms).empty());
  f = from_agent("failed");
  f["message"] = "not part of it";
  CHECK(co.message("use-2", f, t0 + 40ms).empty());  // idle node: never joined
  json nothing = {{"v", 1}, {"type", "failed"}, {"message", "no run id"}};
  CHECK(co.message("use-0", nothing, t0 + 40ms).empty());
  CHECK(co.phase() == Phase::connecting);
  CHECK(co.error().empty());
  // Unknown types and messages of the wrong phase change nothing either.
  CHECK(co.message("use-0", from_agent("ready"), t0 + 40ms).empty());
  CHECK(co.message("use-0", progress(0, 0), t0 + 40ms).empty());
  CHECK(co.progress()[0] == -1);
  CHECK(co.message("use-0", from_agent("pong"), t0 + 40ms).empty());
  CHECK(co.phase() == Phase::connecting);
}

TEST_CASE("coordinator: a failed message aborts everyone", "[unit][run][coordinator]") {
  auto co = make();
  co.agent_joined("use-2", hello("use-2"), t0);  // idle: not told
  drive_to(co, Phase::connecting);
  auto f = from_agent("failed");
  f["message"] = "cannot connect: connection refused";
  const auto out = co.message("euw-1", f, t0 + 40ms);
  CHECK(co.phase() == Phase::failed);
  CHECK(co.error() == "node euw-1: cannot connect: connection refused");
  CHECK(out == each(kNeeded, abort_msg("node euw-1: cannot connect: connection refused")));
  check_valid(out);
  // Only the first failure counts.
  f["message"] = "second";
  CHECK(co.message("use-0", f, t0 + 41ms).empty());
  CHECK(co.message("use-0", from_agent("connected"), t0 + 41ms).empty());
  CHECK(co.abort("again").empty());
  CHECK(co.tick(t0 + 1h).empty());
  CHECK(co.error() == "node euw-1: cannot connect: connection refused");
}

TEST_CASE("coordinator: a failed message while running, and abort()", "[unit][run][coordinator]") {
  SECTION("failed while running") {
    auto co = make();
    drive_to(co, Phase::running);
    auto f = from_agent("failed");
    f["message"] = "worker 3: peer reset";
    CHECK(co.message("use-1", f, t0 + 1s) == each(kNeeded, abort_msg("node use-1: worker 3: peer reset")));
    CHECK(co.phase() == Phase::failed);
  }
  SECTION("abort by request, while preparing") {
    auto co = make();
    drive_to(co, Phase::preparing);
    CHECK(co.abort("aborted by request") == each(kNeeded, abort_msg("aborted by request")));
    CHECK(co.phase() == Phase::failed);
    CHECK(co.error() == "aborted by request");
  }
  SECTION("abort before every agent has joined tells those that have") {
    auto co = make();
    co.agent_joined("use-1", hello("use-1"), t0);
    co.agent_joined("euw-0", hello("euw-0"), t0);
    CHECK(co.abort("the controller is shutting down") ==
          each({"euw-0", "use-1"}, abort_msg("the controller is shutting down")));
  }
}

TEST_CASE("coordinator: an agent that goes away", "[unit][run][coordinator]") {
  SECTION("mid-run: the others are aborted") {
    auto co = make();
    drive_to(co, Phase::running);
    const auto out = co.agent_left("euw-0", "connection reset", t0 + 1s);
    CHECK(co.phase() == Phase::failed);
    CHECK(co.error() == "the agent of node euw-0 went away: connection reset");
    CHECK(out == each({"euw-1", "use-0", "use-1"}, abort_msg("the agent of node euw-0 went away: connection reset")));
    // The others leaving afterwards changes nothing.
    CHECK(co.agent_left("use-0", "eof", t0 + 2s).empty());
    CHECK(co.error() == "the agent of node euw-0 went away: connection reset");
  }
  SECTION("an idle node's agent, or one never seen, leaving is no news") {
    auto co = make();
    co.agent_joined("use-2", hello("use-2"), t0);
    drive_to(co, Phase::running);
    CHECK(co.agent_left("use-2", "eof", t0 + 1s).empty());
    CHECK(co.agent_left("zzz-0", "eof", t0 + 1s).empty());
    CHECK(co.phase() == Phase::running);
  }
  SECTION("while waiting for the others") {
    auto co = make();
    co.agent_joined("use-0", hello("use-0"), t0);
    co.agent_joined("use-1", hello("use-1"), t0);
    CHECK(co.agent_left("use-0", "eof", t0 + 1ms) ==
          each({"use-1"}, abort_msg("the agent of node use-0 went away: eof")));
    CHECK(co.phase() == Phase::failed);
  }
  SECTION("an agent that comes back mid-run") {
    auto co = make();
    drive_to(co, Phase::preparing);
    const auto out = co.agent_joined("use-1", hello("use-1"), t0 + 50ms);
    CHECK(co.phase() == Phase::failed);
    CHECK(co.error() ==
          "the agent of node use-1 reconnected during the run (it had lost its controller connection); its "
          "workers' state is gone");
    CHECK(nodes_of(out) == kNeeded);
  }
}

TEST_CASE("coordinator: bad reports fail the run", "[unit][run][coordinator]") {
  const auto plan = make_plan();
  const auto reports = reports_of(plan);
  auto co = make();
  drive_to(co, Phase::running);
  SECTION("a report for another node's worker") {
    const auto out = co.message("use-0", report_msg(reports[4]), t0 + 1s);
    CHECK(co.phase() == Phase::failed);
    CHECK(co.error() == "node use-0 reported for worker 4, which is not one of its workers");
    CHECK(out == each(kNeeded, abort_msg("node use-0 reported for worker 4, which is not one of its workers")));
  }
  SECTION("a report for no worker at all") {
    auto r = reports[0];
    r.worker = 8;
    co.message("use-0", report_msg(r), t0 + 1s);
    CHECK(co.error() == "node use-0 reported for worker 8, which is not one of its workers");
  }
  SECTION("too few iterations") {
    auto r = reports[3];
    r.iterations.pop_back();
    const auto out = co.message("use-1", report_msg(r), t0 + 1s);
    CHECK(co.phase() == Phase::failed);
    CHECK(co.error() == "worker 3 reported 2 iterations of 3");
    CHECK(nodes_of(out) == kNeeded);
  }
  SECTION("too many iterations") {
    auto r = reports[3];
    r.iterations.push_back(r.iterations.back());
    co.message("use-1", report_msg(r), t0 + 1s);
    CHECK(co.error() == "worker 3 reported 4 iterations of 3");
  }
  SECTION("an unreadable report") {
    auto m = from_agent("report");
    m["report"] = {{"worker", "three"}};
    const auto out = co.message("use-1", m, t0 + 1s);
    CHECK(co.phase() == Phase::failed);
    CHECK_THAT(co.error(), Catch::StartsWith("node use-1 sent an unreadable report: "));
    CHECK(nodes_of(out) == kNeeded);
  }
  CHECK(co.reports() == std::vector<program::WorkerReport>(8));  // none kept
}

TEST_CASE("coordinator: timeouts name the nodes that are missing", "[unit][run][coordinator]") {
  SECTION("join") {
    auto co = make();
    co.agent_joined("use-0", hello("use-0"), t0 + 100ms);
    co.agent_joined("euw-1", hello("euw-1"), t0 + 200ms);
    CHECK(co.tick(t0 + 1000ms).empty());  // counted from the run's creation; not yet over
    CHECK(co.phase() == Phase::agents);
    const auto out = co.tick(t0 + 1001ms);
    CHECK(co.phase() == Phase::failed);
    CHECK(co.error() == "no agent for node(s) euw-0, use-1 after 1 s");
    CHECK(out == each({"euw-1", "use-0"}, abort_msg("no agent for node(s) euw-0, use-1 after 1 s")));
  }
  SECTION("no agent at all: nobody to tell") {
    auto co = make();
    CHECK(co.tick(t0 + 5s).empty());
    CHECK(co.phase() == Phase::failed);
    CHECK(co.error() == "no agent for node(s) euw-0, euw-1, use-0, use-1 after 1 s");
  }
  SECTION("ready") {
    auto co = make();
    for (const auto& n : kNeeded) co.agent_joined(n, hello(n), t0 + 900ms);  // preparing from here
    co.message("use-0", from_agent("ready"), t0 + 1s);
    co.message("euw-0", from_agent("ready"), t0 + 2s);
    CHECK(co.tick(t0 + 900ms + 2500ms).empty());
    CHECK(co.phase() == Phase::preparing);
    const auto out = co.tick(t0 + 900ms + 2501ms);
    CHECK(co.phase() == Phase::failed);
    CHECK(co.error() == "node(s) euw-1, use-1 did not get ready within 2.5 s");
    CHECK(out == each(kNeeded, abort_msg("node(s) euw-1, use-1 did not get ready within 2.5 s")));
  }
  SECTION("connected") {
    auto co = make();
    drive_to(co, Phase::connecting);  // connecting since t0 + 20 ms
    co.message("use-1", from_agent("connected"), t0 + 2s);
    CHECK(co.tick(t0 + 20ms + 2500ms).empty());
    const auto out = co.tick(t0 + 20ms + 2501ms);
    CHECK(co.phase() == Phase::failed);
    CHECK(co.error() == "node(s) euw-0, euw-1, use-0 did not connect their workers within 2.5 s");
    CHECK(nodes_of(out) == kNeeded);
  }
  SECTION("stall while running: any news resets it") {
    auto co = make();
    drive_to(co, Phase::running);  // running since t0 + 30 ms
    CHECK(co.tick(t0 + 30ms + 5000ms).empty());
    co.message("euw-1", progress(6, 0), t0 + 4s);
    CHECK(co.tick(t0 + 4s + 5000ms).empty());
    CHECK(co.phase() == Phase::running);
    const auto out = co.tick(t0 + 4s + 5001ms);
    CHECK(co.phase() == Phase::failed);
    CHECK(co.error() == "no progress from any worker for 5 s");
    CHECK(out == each(kNeeded, abort_msg("no progress from any worker for 5 s")));
  }
  SECTION("the setup timeouts do not apply while running") {
    auto co = make();
    drive_to(co, Phase::running);
    co.message("use-0", progress(0, 0), t0 + 4s);
    CHECK(co.tick(t0 + 8s).empty());  // > join and setup timeouts since every phase began
    CHECK(co.phase() == Phase::running);
  }
}

TEST_CASE("coordinator: cuda compute needs a GPU on every node", "[unit][run][coordinator]") {
  SECTION("a node without GPUs fails the run, naming it and the reason") {
    auto co = make("cuda");
    CHECK(co.agent_joined("euw-0", hello("euw-0", 1), t0).empty());
    auto h = hello("use-1", 0);
    h["gpu_reason"] = "no NVIDIA driver";
    const auto out = co.agent_joined("use-1", h, t0 + 1ms);
    CHECK(co.phase() == Phase::failed);
    const std::string why =
        "scenario small asks for compute \"cuda\" but node use-1 has no GPU: no NVIDIA driver; use \"modeled\"";
    CHECK(co.error() == why);
    CHECK(out == each({"euw-0"}, abort_msg(why)));  // those that joined are told
  }
  SECTION("without a reason, or without a gpus field") {
    auto co = make("cuda");
    co.agent_joined("use-0", hello("use-0", 0), t0);
    CHECK(co.error() == "scenario small asks for compute \"cuda\" but node use-0 has no GPU; use \"modeled\"");
    auto co2 = make("cuda");
    co2.agent_joined("euw-1", {{"v", 1}, {"type", "hello"}, {"node", "euw-1"}}, t0);
    CHECK(co2.phase() == Phase::failed);
    CHECK_THAT(co2.error(), Catch::Contains("node euw-1 has no GPU"));
  }
  SECTION("an idle node without GPUs does not matter") {
    auto co = make("cuda");
    CHECK(co.agent_joined("use-2", hello("use-2", 0), t0).empty());
    CHECK(co.phase() == Phase::agents);
  }
  SECTION("one GPU per node is enough (emulated GPUs share it)") {
    auto co = make("cuda");
    std::vector<Outgoing> out;
    for (const auto& n : kNeeded) out = co.agent_joined(n, hello(n, 1), t0);
    CHECK(co.phase() == Phase::preparing);
    REQUIRE(out.size() == 4);
    for (const auto& o : out) CHECK(o.message["assignment"]["compute"] == "cuda");
  }
  SECTION("modeled compute does not care") {
    auto co = make("modeled");
    for (const auto& n : kNeeded) co.agent_joined(n, hello(n, 0), t0);
    CHECK(co.phase() == Phase::preparing);
  }
}
