// The replay schedule and runner on a virtual clock: which step is due when, hold and
// loop, lateness, a runner that falls behind, failing steps, stopping; the lateness
// histogram.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include "wanlab/replay/runner.hpp"
#include "wanlab/replay/schedule.hpp"

using namespace wanlab;
using namespace wanlab::replay;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

// Time moves only when the replay sleeps (to the deadline, plus `oversleep`) or a step
// costs time (`apply_cost` in the apply function).
struct VirtualClock final : Clock {
  Duration t = 1000s;  // any origin
  Duration oversleep{};
  std::size_t sleeps = 0;
  Duration now() override { return t; }
  bool sleep_until(Duration deadline, const std::atomic<bool>& stop) override {
    if (stop) return false;
    ++sleeps;
    if (deadline > t) t = deadline + oversleep;
    return true;
  }
};

struct Applied {
  Duration at;  // since the start
  Step step;
};

Trace trace_of(const std::string& text) {
  return parse_trace(text, "t.csv");
}

const char* kSteps = "time,rate\n0s,50Mbit\n3s,10Mbit\n6s,30Mbit\n";

}  // namespace

TEST_CASE("schedule: hold runs the steps once", "[unit][replay]") {
  const Schedule s(trace_of(kSteps));
  CHECK(s.size() == 3);
  CHECK(s.first() == Due{0, 0, 0s});
  CHECK(s.next(Due{0, 0, 0s}) == Due{1, 0, 3s});
  CHECK(s.next(Due{2, 0, 6s}) == std::nullopt);
  CHECK(s.latest(2999ms) == Due{0, 0, 0s});
  CHECK(s.latest(3s) == Due{1, 0, 3s});
  CHECK(s.latest(1h) == Due{2, 0, 6s});
  CHECK(s.finish() == 6s);
  CHECK(Schedule(trace_of("#@ end=9s\ntime,rate\n0s,1Mbit\n")).finish() == 9s);
  // Before a first step after 0, nothing is due.
  CHECK(Schedule(trace_of("time,rate\n1s,1Mbit\n")).latest(999ms) == std::nullopt);
}

TEST_CASE("schedule: loop starts over at the end", "[unit][replay]") {
  const Schedule s(trace_of("#@ mode=loop end=9s\ntime,rate\n1s,50Mbit\n3s,10Mbit\n6s,30Mbit\n"));
  CHECK(s.first() == Due{0, 0, 1s});
  CHECK(s.next(Due{2, 0, 6s}) == Due{0, 1, 10s});
  CHECK(s.next(Due{2, 4, 42s}) == Due{0, 5, 46s});
  CHECK(s.latest(9500ms) == Due{2, 0, 6s});  // loop 1 began at 9 s, its first step is at 10 s
  CHECK(s.latest(10s) == Due{0, 1, 10s});
  CHECK(s.latest(9h + 7s) == Due{2, 3600, 9h + 6s});
  CHECK(s.finish() == std::nullopt);
  CHECK(s.between(Due{0, 0, 1s}, Due{1, 0, 3s}) == 0);
  CHECK(s.between(Due{0, 0, 1s}, Due{0, 1, 10s}) == 2);
  CHECK(s.between(Due{2, 0, 6s}, Due{2, 3, 33s}) == 8);
}

TEST_CASE("replayer: each step lands at its time; hold finishes at the end", "[unit][replay]") {
  VirtualClock clock;
  std::vector<Applied> applied;
  const Duration start = clock.t;
  Replayer r(
      trace_of(std::string("#@ end=9s\n") + kSteps),
      [&](const Step& s) {
        applied.push_back({clock.t - start, s});
      },
      clock);
  CHECK(r.progress().state == ReplayState::running);
  CHECK(r.progress().next == Due{0, 0, 0s});
  std::atomic<bool> stop{false};
  r.run(stop);
  REQUIRE(applied.size() == 3);
  CHECK(applied[0].at == 0s);
  CHECK(applied[1].at == 3s);
  CHECK(applied[2].at == 6s);
  CHECK(applied[1].step.rate == Rate{10'000'000});
  CHECK(clock.t - start == 9s);  // waited for the end
  const auto p = r.progress();
  CHECK(p.state == ReplayState::finished);
  CHECK(p.applied == 3);
  CHECK(p.skipped == 0);
  CHECK(p.last == Due{2, 0, 6s});
  CHECK_FALSE(p.next);
  CHECK(p.lateness.count == 3);
  CHECK(p.lateness.max == 0s);
}

TEST_CASE("replayer: loop goes on until stopped; lateness is measured", "[unit][replay]") {
  VirtualClock clock;
  clock.oversleep = 300us;  // every wake-up comes 0.3 ms late
  const Duration start = clock.t;
  std::vector<Duration> at;
  std::atomic<bool> stop{false};
  Replayer r(
      trace_of("#@ mode=loop end=9s\ntime,rate\n0s,50Mbit\n3s,10Mbit\n6s,30Mbit\n"),
      [&](const Step&) {
        at.push_back(clock.t - start);
        clock.t += 20us;  // what a step costs
        if (at.size() == 7) stop = true;
      },
      clock);
  r.run(stop);
  REQUIRE(at.size() == 7);
  // The schedule is anchored at the start: lateness does not accumulate.
  const std::vector<Duration> expected{0s, 3s, 6s, 9s, 12s, 15s, 18s};
  for (std::size_t i = 1; i < at.size(); ++i) CHECK(at[i] == expected[i] + 300us);
  const auto p = r.progress();
  CHECK(p.state == ReplayState::stopped);
  CHECK(p.last == Due{0, 2, 18s});
  CHECK(p.next == Due{1, 2, 21s});
  CHECK(p.lateness.count == 7);
  CHECK(p.lateness.p50 == 320us);  // oversleep + the step's cost
  CHECK(p.lateness.p99 == 320us);
  CHECK(p.lateness.max == 320us);
  // Split into the wake-up and the step's own cost.
  CHECK(p.wake_time.p50 == 300us);
  CHECK(p.wake_time.max == 300us);
  CHECK(p.apply_time.p50 == 20us);
  CHECK(p.apply_time.max == 20us);
}

TEST_CASE("replayer: a runner late by whole steps merges them and keeps to the schedule", "[unit][replay]") {
  VirtualClock clock;
  const Duration start = clock.t;
  std::vector<Applied> applied;
  // Steps every 10 ms; the step at 20 ms sets the delay only and will be skipped.
  const auto trace = trace_of(
      "time,rate,delay\n0s,10Mbit,5ms\n0.01s,20Mbit,\n0.02s,,7ms\n0.03s,40Mbit,\n0.04s,50Mbit,\n0.05s,60Mbit,\n");
  Replayer r(
      trace,
      [&](const Step& s) {
        applied.push_back({clock.t - start, s});
        if (applied.size() == 2) clock.t += 25ms;  // one step stalls for 25 ms
      },
      clock);
  std::atomic<bool> stop{false};
  r.run(stop);
  // 0 and 10 ms on time; the stall ends at 35 ms: the 20 and 30 ms steps land at once,
  // merged (the delay of the one, the rate of the other); then 40 and 50 ms on time.
  REQUIRE(applied.size() == 5);
  CHECK(applied[2].at == 35ms);
  CHECK(applied[2].step.rate == Rate{40'000'000});
  CHECK(applied[2].step.delay == 7ms);
  CHECK(applied[2].step.at == 30ms);
  CHECK(applied[3].at == 40ms);
  CHECK(applied[4].at == 50ms);
  const auto p = r.progress();
  CHECK(p.applied == 5);
  CHECK(p.skipped == 1);
  CHECK(p.lateness.max == 25ms);  // the stalled step itself: applied 25 ms after its time
  CHECK(p.lateness.count == 5);
  CHECK(p.state == ReplayState::finished);
}

TEST_CASE("replayer: a stall over many loops costs one pass", "[unit][replay]") {
  // Stops the replay (sleep_until answers false) once three steps are in.
  struct StopAfterThree final : Clock {
    VirtualClock inner;
    const std::vector<Applied>* applied = nullptr;
    Duration now() override { return inner.now(); }
    bool sleep_until(Duration d, const std::atomic<bool>& s) override {
      return applied->size() < 3 && inner.sleep_until(d, s);
    }
  } clock;
  std::vector<Applied> applied;
  clock.applied = &applied;
  const Duration start = clock.now();
  Replayer r(
      trace_of("#@ mode=loop end=3s\ntime,rate,loss\n0s,10Mbit,\n1s,,1%\n2s,30Mbit,\n"),
      [&](const Step& s) {
        applied.push_back({clock.now() - start, s});
        if (applied.size() == 1) clock.inner.t += 1h + 1500ms;  // asleep for an hour
      },
      clock);
  std::atomic<bool> stop{false};
  r.run(stop);
  REQUIRE(applied.size() == 3);
  // Due at 3601.5 s: the step at 1 s of loop 1200, carrying what the pass before it set:
  // the rate of the step at 3600 s, the loss of its own.
  CHECK(applied[1].at == 1h + 1500ms);
  CHECK(applied[1].step.rate == Rate{10'000'000});
  CHECK(applied[1].step.loss == Probability{10'000'000});
  CHECK(applied[2].at == 1h + 2s);
  CHECK(applied[2].step.rate == Rate{30'000'000});
  const auto p = r.progress();
  CHECK(p.skipped == 3600);
  CHECK(p.last == Due{2, 1200, 1h + 2s});
  CHECK(p.state == ReplayState::stopped);
}

TEST_CASE("replayer: a failing step is counted and the replay goes on", "[unit][replay]") {
  VirtualClock clock;
  int calls = 0;
  Replayer r(
      trace_of(kSteps),
      [&](const Step&) {
        if (++calls == 2) throw std::runtime_error("netlink said no");
      },
      clock);
  std::atomic<bool> stop{false};
  r.run(stop);
  const auto p = r.progress();
  CHECK(calls == 3);
  CHECK(p.applied == 3);
  CHECK(p.failed == 1);
  CHECK(p.last_error == "netlink said no");
  CHECK(p.state == ReplayState::finished);
}

TEST_CASE("replayer: stopped before its first step", "[unit][replay]") {
  VirtualClock clock;
  int calls = 0;
  Replayer r(
      trace_of("time,rate\n5s,1Mbit\n"), [&](const Step&) { ++calls; }, clock);
  std::atomic<bool> stop{true};
  r.run(stop);
  CHECK(calls == 0);
  CHECK(r.progress().state == ReplayState::stopped);
  CHECK(r.progress().applied == 0);
}

TEST_CASE("replay thread: the monotonic clock and stop", "[unit][replay]") {
  std::atomic<int> calls{0};
  MonotonicClock mono;
  const Duration t0 = mono.now();
  {
    ReplayThread t(trace_of("#@ mode=loop end=0.02s\ntime,rate\n0s,1Mbit\n0.01s,2Mbit\n"),
                   [&](const Step&) { ++calls; });
    while (calls < 5) std::this_thread::sleep_for(1ms);
    t.stop();  // idempotent with the destructor
    const auto p = t.progress();
    CHECK(p.state == ReplayState::stopped);
    CHECK(p.applied >= 5);
    CHECK(p.lateness.count == p.applied);
    CHECK(p.lateness.max < 200ms);  // a loaded CI machine; the benchmark measures it properly
  }
  CHECK(mono.now() - t0 >= 40ms);
  // A hold trace ends by itself and calls on_done.
  std::atomic<bool> done{false};
  ReplayThread h(
      trace_of("time,rate\n0s,1Mbit\n0.005s,2Mbit\n"), [](const Step&) {}, [&] { done = true; });
  for (int i = 0; i < 2000 && !done; ++i) std::this_thread::sleep_for(1ms);
  CHECK(done);
  CHECK(h.progress().state == ReplayState::finished);
}

TEST_CASE("lateness histogram: nearest-rank percentiles to 1 us below 10 ms", "[unit][replay]") {
  LatenessHistogram h;
  CHECK(h.summary().count == 0);
  CHECK(h.percentile(99) == 0us);
  for (int i = 1; i <= 100; ++i) h.add(std::chrono::microseconds(i * 10));  // 10 us .. 1 ms
  CHECK(h.count() == 100);
  CHECK(h.percentile(50) == 500us);
  CHECK(h.percentile(99) == 990us);
  CHECK(h.percentile(100) == 1000us);
  CHECK(h.max() == 1000us);
  h.add(1234567ns);  // 1.234567 ms lands in the 1234 us bucket
  CHECK(h.percentile(100) == 1234567ns);
  h.add(-5us);  // counts as 0
  CHECK(h.percentile(0.5) == 0us);
  // Beyond 10 ms: 1 ms buckets; beyond 10 s: the maximum.
  LatenessHistogram big;
  big.add(25'600us);
  big.add(30s);
  CHECK(big.percentile(50) == 25ms);
  CHECK(big.percentile(100) == 30s);
  CHECK(big.summary().max == 30s);
}
