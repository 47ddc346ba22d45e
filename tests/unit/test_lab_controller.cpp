// The lab runtime (api::LabController) and the run manager without root: the controller
// is given a backend that makes no kernel object and a shaper that writes down what it is
// asked (the real parts there are the kernel's; the netns tier runs the same controller on
// real namespaces). What is tested is the controller's own: link changes in place and
// their rollback, the rate scale, replays stepping the shaper, the state file, the order
// of teardown, and a run's bookkeeping against its lab.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <fmt/format.h>

#include "temp_dir.hpp"
#include "wanlab/api/lab_backend.hpp"
#include "wanlab/api/lab_controller.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/lab/wan_tc.hpp"
#include "wanlab/run/run_manager.hpp"

using namespace wanlab;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// What the backend and its shaper were asked, in order (the replay thread writes too).
struct Journal {
  std::mutex m;
  std::vector<std::string> events;
  std::atomic<bool> fail_apply{false};   // the shaper's next apply() throws
  std::atomic<bool> fail_bring_up{false};  // the backend's apply() throws
  void add(std::string e) {
    std::lock_guard lock(m);
    events.push_back(std::move(e));
  }
  std::vector<std::string> take() {
    std::lock_guard lock(m);
    return std::exchange(events, {});
  }
};

class RecordingShaper final : public shaping::LinkShaper {
 public:
  explicit RecordingShaper(std::shared_ptr<Journal> j) : j_(std::move(j)) {}
  ~RecordingShaper() override { j_->add("shaper gone"); }
  std::string backend() const override { return "recording"; }
  bool applies_delay() const override { return true; }
  void apply(const core::Topology& topo, const core::WanLink& link) override {
    if (j_->fail_apply.exchange(false)) throw std::runtime_error("RTNETLINK answers: No buffer space available");
    j_->add(fmt::format("apply {}->{} rate {} delay {} queue {}p", topo.dcs[link.src].name, topo.dcs[link.dst].name,
                        to_string(link.params.rate), to_string(link.params.delay), lab::queue_limit_packets(topo, link)));
  }
  shaping::LinkCounters counters(const core::Topology&, const core::WanLink& link) override {
    shaping::LinkCounters c;
    c.packets = 10 + link.src;
    c.bytes = 15000 * c.packets;
    return c;
  }
  bool gates_flows() const override { return true; }
  void set_flows(const core::Topology&, const core::WanLink& link, const std::vector<shaping::GatedFlow>& flows) override {
    j_->add(fmt::format("flows {}->{}: {}", link.src, link.dst, flows.size()));
  }
  void set_gate(const core::Topology&, const core::WanLink& link, int flow, bool open) override {
    j_->add(fmt::format("gate {}->{} flow {} {}", link.src, link.dst, flow, open ? "open" : "closed"));
  }
  std::vector<shaping::FlowCounters> flow_counters(const core::Topology&, const core::WanLink&) override { return {}; }

 private:
  std::shared_ptr<Journal> j_;
};

class RecordingBackend final : public api::LabBackend {
 public:
  explicit RecordingBackend(std::shared_ptr<Journal> j) : j_(std::move(j)) {}
  lab::Plan plan(const core::Topology& topo, lab::LabState& state) override {
    j_->add("plan");
    lab::Plan p;
    p.namespaces = {topo.name + ".router"};
    state.namespaces = p.namespaces;
    return p;
  }
  void apply(const lab::Plan&) override {
    j_->add("apply plan");
    if (j_->fail_bring_up) throw std::runtime_error("lab operation 3 of 40 (add veth): File exists");
  }
  std::unique_ptr<shaping::LinkShaper> make_shaper(const core::Topology&, const lab::LabState&) override {
    j_->add("make shaper");
    return std::make_unique<RecordingShaper>(j_);
  }
  void release(const core::Topology&, const lab::LabState&) override { j_->add("release"); }
  lab::TeardownReport teardown(const core::Topology&, const lab::LabState& state) override {
    j_->add("teardown");
    return {state.namespaces, 0};
  }

 private:
  std::shared_ptr<Journal> j_;
};

// WANLAB_STATE_DIR for one test (the lab's state file and folder), restored at scope exit.
struct StateDir {
  test::TempDir dir{"labctl"};
  std::string old;
  bool had = false;
  StateDir() {
    if (const char* e = std::getenv("WANLAB_STATE_DIR")) {
      had = true;
      old = e;
    }
    ::setenv("WANLAB_STATE_DIR", (dir.path() / "run").c_str(), 1);
  }
  ~StateDir() {
    if (had)
      ::setenv("WANLAB_STATE_DIR", old.c_str(), 1);
    else
      ::unsetenv("WANLAB_STATE_DIR");
  }
};

core::Topology two_dc() { return core::load_topology(fs::path(WANLAB_SOURCE_DIR) / "topologies/two-dc.json"); }

api::UpOptions options() {
  api::UpOptions o;
  o.backend = "userspace";
  o.replay_priority = 0;  // ordinary scheduling: no CAP_SYS_NICE needed
  o.spawn_agents = false;
  return o;
}

struct Lab {
  StateDir state;
  std::shared_ptr<Journal> journal = std::make_shared<Journal>();
  std::unique_ptr<api::LabController> ctl;
  Lab() {
    ctl = std::make_unique<api::LabController>(two_dc(), options(), std::make_unique<RecordingBackend>(journal));
  }
};

std::string rate_of(api::LabController& ctl, std::size_t link) {
  return ctl.status()["links"][link]["rate"].get<std::string>();
}

api::LinkChange rate_change(std::uint64_t bps) {
  api::LinkChange c;
  c.rate = Rate{bps};
  return c;
}

api::RunRequest run_request(const fs::path& scenario, const fs::path& out) {
  api::RunRequest r;
  r.scenario = scenario.string();
  r.out = out.string();
  return r;
}

template <class F>
bool eventually(F done, std::chrono::milliseconds limit = 5s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

}  // namespace

TEST_CASE("lab controller: bring-up through its backend, the state file first", "[unit][labctl]") {
  Lab lab;
  CHECK(lab.journal->take() == std::vector<std::string>{"plan", "apply plan", "make shaper"});
  const auto st = lab::read_state("two-dc");
  REQUIRE(st);
  CHECK(st->backend == "userspace");
  CHECK(st->namespaces == std::vector<std::string>{"two-dc.router"});
  const auto s = lab.ctl->status();
  CHECK(s["backend"] == "userspace");
  REQUIRE(s["links"].size() == 2);
  CHECK(s["links"][0]["counters"]["packets"] == 10);
  CHECK(s["links"][1]["counters"]["packets"] == 11);
  CHECK(lab.ctl->operation_count() == 0);
}

TEST_CASE("lab controller: link set applies in place; the reverse queue follows the RTT", "[unit][labctl]") {
  Lab lab;
  lab.journal->take();
  auto out = lab.ctl->set_link("use", "euw", rate_change(1'000'000'000));
  CHECK(out["rate"] == "1Gbit");
  CHECK_FALSE(out.contains("note"));
  auto ev = lab.journal->take();
  REQUIRE(ev.size() == 1);
  CHECK_THAT(ev[0], Contains("apply use->euw rate 1Gbit"));

  // A longer delay on use->euw lengthens the round trip, so euw->use's automatic queue
  // limit (1.5 x BDP) grows and is applied too.
  api::LinkChange delay;
  delay.delay = Duration{100ms};
  out = lab.ctl->set_link("use", "euw", delay);
  ev = lab.journal->take();
  REQUIRE(ev.size() == 2);
  CHECK_THAT(ev[0], Contains("apply use->euw") && Contains("delay 100ms"));
  CHECK_THAT(ev[1], Contains("apply euw->use"));
  CHECK_THAT(out["note"].get<std::string>(), Contains("reverse link euw->use changed too"));
}

TEST_CASE("lab controller: a refused link change leaves the lab as it was", "[unit][labctl]") {
  Lab lab;
  lab.journal->take();
  const auto before = rate_of(*lab.ctl, 0);
  api::LinkChange c;
  c.rate = Rate{2'000'000'000};
  lab.journal->fail_apply = true;
  try {
    lab.ctl->set_link("use", "euw", c);
    FAIL("the shaper's failure was not reported");
  } catch (const api::ApiError& e) {
    CHECK(e.status() == 500);
    CHECK(e.code() == "kernel");
    CHECK_THAT(e.what(), Contains("No buffer space"));
  }
  CHECK(rate_of(*lab.ctl, 0) == before);  // rolled back in the topology

  api::LinkChange jitter;
  jitter.jitter = Duration{200ms};
  try {
    lab.ctl->set_link("use", "euw", jitter);
    FAIL("jitter over the delay was accepted");
  } catch (const api::ApiError& e) {
    CHECK(e.status() == 400);
    CHECK(e.field() == "jitter");
  }
  try {
    lab.ctl->set_link("use", "mars", c);
    FAIL("an unknown DC was accepted");
  } catch (const api::ApiError& e) {
    CHECK(e.status() == 404);
    CHECK(e.field() == "dst");
  }
  CHECK(lab.journal->take().empty());
}

TEST_CASE("lab controller: the rate scale reaches the shaper and is undone on failure", "[unit][labctl]") {
  Lab lab;
  lab.journal->take();
  lab.ctl->set_rate_scale(0.5);
  auto ev = lab.journal->take();
  REQUIRE(ev.size() == 2);
  CHECK_THAT(ev[0], Contains("rate 2.155Gbit"));  // 4.31Gbit x 0.5
  auto s = lab.ctl->status();
  CHECK(s["rate_scale"] == 0.5);
  CHECK(s["links"][0]["rate"] == "4.31Gbit");  // the configured rate keeps its meaning
  CHECK(s["links"][0]["rate_in_force"] == "2.155Gbit");

  lab.journal->fail_apply = true;
  CHECK_THROWS_AS(lab.ctl->set_rate_scale(0.25), api::ApiError);
  CHECK(lab.ctl->status()["rate_scale"] == 0.5);
  ev = lab.journal->take();  // the links set back at x0.5
  REQUIRE_FALSE(ev.empty());
  for (const auto& e : ev) CHECK_THAT(e, Contains("rate 2.155Gbit"));

  for (double bad : {0.0, -1.0, 1.5}) CHECK_THROWS_AS(lab.ctl->set_rate_scale(bad), api::ApiError);
  lab.ctl->set_rate_scale(1.0);
  CHECK_THAT(lab.journal->take().at(0), Contains("rate 4.31Gbit"));
}

TEST_CASE("lab controller: a link set reaches the state file at the next flush", "[unit][labctl]") {
  Lab lab;
  api::LinkChange c;
  c.rate = Rate{500'000'000};
  lab.ctl->set_link("use", "euw", c);
  const auto rate_in_file = [] {
    return lab::read_state("two-dc")->topology.at("wan").dump();
  };
  CHECK_THAT(rate_in_file(), !Contains("500Mbit"));
  lab.ctl->persist_if_dirty();
  CHECK_THAT(rate_in_file(), Contains("500Mbit"));
}

TEST_CASE("lab controller: a replay steps the shaper in the trace's order", "[unit][labctl][replay]") {
  Lab lab;
  lab.journal->take();
  const auto trace = lab.state.dir.write("steps.csv", "#@ mode=hold\ntime,rate\n0s,100Mbit\n30ms,200Mbit\n60ms,300Mbit\n");
  api::ReplayRequest r;
  r.src = "use";
  r.dst = "euw";
  r.trace = trace.string();
  r.format = "csv";
  const auto started = lab.ctl->start_replay(r);
  CHECK(started["trace"] == trace.string());
  REQUIRE(eventually([&] { return lab.ctl->replays()["replays"][0]["state"] == "finished"; }));
  const auto ev = lab.journal->take();
  std::vector<std::string> rates;
  for (const auto& e : ev)
    if (e.rfind("apply use->euw", 0) == 0) rates.push_back(e.substr(e.find("rate ") + 5, e.find(" delay") - e.find("rate ") - 5));
  CHECK(rates == std::vector<std::string>{"100Mbit", "200Mbit", "300Mbit"});
  CHECK(rate_of(*lab.ctl, 0) == "300Mbit");
  // The replay's end writes the state file (not every step).
  REQUIRE(eventually([&] { return lab::read_state("two-dc")->topology.at("wan").dump().find("300Mbit") != std::string::npos; }));
}

TEST_CASE("lab controller: link set during a replay, stop, and bad traces", "[unit][labctl][replay]") {
  Lab lab;
  const auto trace = lab.state.dir.write("long.csv", "#@ mode=hold\ntime,rate\n0s,100Mbit\n30s,200Mbit\n");
  api::ReplayRequest r;
  r.src = "use";
  r.dst = "euw";
  r.trace = trace.string();
  lab.ctl->start_replay(r);
  REQUIRE(eventually([&] { return rate_of(*lab.ctl, 0) == "100Mbit"; }));
  api::LinkChange c;
  c.rate = Rate{1'000'000'000};
  const auto out = lab.ctl->set_link("use", "euw", c);
  CHECK_THAT(out["note"].get<std::string>(), Contains("is replaying") && Contains("sets rate again"));
  const auto stopped = lab.ctl->stop_replays(std::pair{std::string("use"), std::string("euw")});
  CHECK(stopped["stopped"].size() == 1);
  CHECK(lab.ctl->replays()["replays"].empty());
  try {
    lab.ctl->stop_replays(std::pair{std::string("use"), std::string("euw")});
    FAIL("stopping no replay was accepted");
  } catch (const api::ApiError& e) {
    CHECK(e.status() == 404);
    CHECK(e.code() == "no_replay");
  }
  const auto bad = lab.state.dir.write("bad.csv", "time,rate\n0s,fast\n");
  r.trace = bad.string();
  try {
    lab.ctl->start_replay(r);
    FAIL("a bad trace was accepted");
  } catch (const api::ApiError& e) {
    CHECK(e.status() == 400);
    CHECK(e.code() == "bad_trace");
    CHECK_THAT(e.what(), Contains(bad.string()));
  }
  CHECK(rate_of(*lab.ctl, 0) == "1Gbit");
}

TEST_CASE("lab controller: teardown stops the shaper before the backend lets go", "[unit][labctl]") {
  Lab lab;
  lab.journal->take();
  const auto report = lab.ctl->teardown();
  CHECK(report.removed == std::vector<std::string>{"two-dc.router"});
  CHECK(lab.journal->take() == std::vector<std::string>{"shaper gone", "release", "teardown"});
  CHECK(lab.ctl->teardown().removed.empty());  // idempotent
  CHECK(lab.journal->take().empty());
  CHECK(lab.ctl->link_counters().empty());
  CHECK_FALSE(lab.ctl->gates_flows());
  try {
    lab.ctl->set_link("use", "euw", rate_change(1'000'000));
    FAIL("a torn-down lab changed a link");
  } catch (const api::ApiError& e) {
    CHECK(e.status() == 409);
  }
}

TEST_CASE("lab controller: a failed bring-up removes what it made", "[unit][labctl]") {
  StateDir state;
  auto journal = std::make_shared<Journal>();
  journal->fail_bring_up = true;
  CHECK_THROWS_WITH(api::LabController(two_dc(), options(), std::make_unique<RecordingBackend>(journal)),
                    Contains("File exists"));
  CHECK(journal->take() == std::vector<std::string>{"plan", "apply plan", "release", "teardown"});
  CHECK_FALSE(fs::exists(lab::lab_dir("two-dc")));
}

TEST_CASE("run manager on a lab without root: a run's record, rates and abort", "[unit][labctl][run]") {
  Lab lab;
  // two-dc-1b (4 nodes, fair), its topology named by absolute path.
  auto doc = json::parse(std::ifstream(fs::path(WANLAB_SOURCE_DIR) / "bench/scenarios/two-dc-1b.json"));
  doc["topology"] = (fs::path(WANLAB_SOURCE_DIR) / "topologies/two-dc.json").string();
  doc["iterations"] = 2;
  const auto scenario = lab.state.dir.write("run.json", doc.dump());
  boost::asio::io_context ioc;
  run::RunManagerOptions ro;
  ro.agent_socket = lab.state.dir.path() / "agents.sock";
  ro.spawn_agents = false;  // no namespaces here: agents would connect on their own
  ro.backend = "userspace";
  run::RunManager runs(ioc, *lab.ctl, ro);
  lab.journal->take();

  const auto out = lab.state.dir.path() / "out";
  const auto st = runs.start(run_request(scenario, out));
  const auto id = st["run"].get<std::string>();
  CHECK(st["phase"] == "waiting_for_agents");
  CHECK(st["nodes"] == 4);
  // The WAN rates are the scenario's scale of the configured ones while it runs...
  auto ev = lab.journal->take();
  REQUIRE(ev.size() == 2);
  CHECK_THAT(ev[0], Contains("rate 215.5Mbit"));
  // ... and the lab's state file names the run before any agent exists.
  const auto rec = lab::read_state("two-dc")->run;
  REQUIRE(rec);
  CHECK(rec->id == id);
  CHECK(rec->iterations == 2);

  try {
    runs.start(run_request(scenario, out / "second"));
    FAIL("a second run was started");
  } catch (const api::ApiError& e) {
    CHECK(e.status() == 409);
    CHECK(e.code() == "busy");
  }

  const auto ab = runs.abort(id);
  CHECK(ab["phase"] == "failed");
  CHECK_THAT(ab["error"].get<std::string>(), Contains("aborted by request"));
  ev = lab.journal->take();
  REQUIRE(ev.size() == 2);
  CHECK_THAT(ev[0], Contains("rate 4.31Gbit"));  // restored
  CHECK_FALSE(lab::read_state("two-dc")->run);
  CHECK(fs::exists(out / "error.txt"));

  // A scenario for other DCs is refused before anything changes.
  const auto three = fs::path(WANLAB_SOURCE_DIR) / "bench/scenarios/three-dc-smoke.json";
  try {
    runs.start(run_request(three, out / "three"));
    FAIL("a scenario for another lab was started");
  } catch (const api::ApiError& e) {
    CHECK(e.status() == 409);
    CHECK(e.code() == "wrong_lab");
  }
  CHECK(lab.journal->take().empty());
  runs.close();
}
