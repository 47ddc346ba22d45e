// BubbleTea: the prefill cost model, arrivals, the dispatcher's bubble prediction and
// admission, and GPU sharing with preemption at layer boundaries.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <optional>
#include <random>
#include <thread>

#include "prefill.hpp"
#include "wanlab/bubbletea/dispatcher.hpp"
#include "wanlab/workload/prefill.hpp"

using namespace wanlab;
using bubbletea::Dispatcher;
using bubbletea::Interval;
using bubbletea::Ns;

namespace {

constexpr Ns kMs = 1'000'000;

bubbletea::Request req(int id, Ns at, double flops, Ns deadline = 10'000 * kMs) {
  return {id, at, 1024, flops, at + deadline};
}

// Starts `runner` and gives it job 1 of `layers` layers, its prompt already arrived.
void run_one_job(agent::PrefillRunner& runner, int layers, double flops_per_layer) {
  runner.start(agent::Clock::now());
  agent::PrefillJob job;
  job.id = 1;
  job.layers = layers;
  job.flops_per_layer = flops_per_layer;
  runner.add(job);
  runner.prompt_arrived(1);
}

// What a runner reported: its last outcome and how many.
struct Reports {
  agent::PrefillOutcome last;
  std::atomic<int> done{0};
  agent::PrefillRunner::Done callback() {
    return [this](const agent::PrefillJob&, const agent::PrefillOutcome& o) {
      last = o;
      ++done;
    };
  }
};

// A runner's one outcome, awaited from the test's thread.
struct Awaited {
  std::mutex m;
  std::condition_variable cv;
  std::optional<agent::PrefillOutcome> outcome;
  agent::PrefillRunner::Done callback() {
    return [this](const agent::PrefillJob&, const agent::PrefillOutcome& o) {
      std::lock_guard lock(m);
      outcome = o;
      cv.notify_all();
    };
  }
  bool has() {
    std::lock_guard lock(m);
    return outcome.has_value();
  }
  bool wait(std::chrono::seconds limit) {
    std::unique_lock lock(m);
    return cv.wait_for(lock, limit, [&] { return outcome.has_value(); });
  }
};

// A GPU shared by training and one modeled prefill runner, at 1e12 FLOP/s.
struct SharedGpu {
  agent::GpuShare share;
  Awaited done;
  agent::PrefillRunner runner{share, 1e12, -1, done.callback()};
  std::optional<agent::PrefillOutcome>& outcome = done.outcome;
};

}  // namespace

TEST_CASE("prefill cost of Llama-2-7B over 2048 tokens", "[bubbletea]") {
  const auto& m = *workload::find_preset("7b");
  const auto c = workload::prefill_cost(m, 2048);
  const double T = 2048, h = 4096, f = 11008, v = 32000;
  // QKV + output + gated MLP (3 matrices) + scores and context over one sequence of T.
  const double per_layer = 2 * T * h * (3 * h) + 2 * T * h * h + 3 * 2 * T * h * f + 2 * 2 * T * T * h;
  CHECK(c.flops_per_layer == Approx(per_layer).epsilon(1e-12));
  CHECK(c.flops == Approx(32 * per_layer + 2 * h * v).epsilon(1e-12));
  CHECK(c.kv_bytes == 2ull * 32 * 32 * 128 * 2048 * 2);  // 1 GiB
  CHECK(c.prompt_bytes == 4 * 2048);
  // Grouped-query attention shrinks the KV cache by heads / kv_heads.
  CHECK(workload::prefill_cost(*workload::find_preset("8b"), 2048).kv_bytes == c.kv_bytes / 4);
}

TEST_CASE("prefill arrivals: seeded Poisson at the asked rate, traces looped", "[bubbletea]") {
  workload::PrefillSpec spec;
  spec.rate_per_s = 200;
  spec.prompt = {workload::PromptTokens::Kind::lognormal, 0, 64, 8192, 1024, 0.5};
  const auto a = workload::prefill_arrivals(spec, 7, 100);
  CHECK(static_cast<double>(a.size()) == Approx(20000).epsilon(0.03));
  CHECK(a == workload::prefill_arrivals(spec, 7, 100));
  CHECK(a != workload::prefill_arrivals(spec, 8, 100));
  for (std::size_t i = 1; i < a.size(); ++i) REQUIRE(a[i].at_s >= a[i - 1].at_s);
  std::vector<double> tokens;
  for (const auto& r : a) {
    REQUIRE(r.prompt_tokens >= 64);
    REQUIRE(r.prompt_tokens <= 8192);
    tokens.push_back(r.prompt_tokens);
  }
  std::sort(tokens.begin(), tokens.end());
  CHECK(tokens[tokens.size() / 2] == Approx(1024).epsilon(0.05));  // the median

  workload::PrefillSpec trace;
  trace.arrival = workload::PrefillSpec::Arrival::trace;
  trace.trace = {{0.0, 100}, {0.5, 200}, {1.0, 300}};
  CHECK(workload::prefill_arrivals(trace, 1, 10).size() == 3);
  trace.loop = true;
  const auto looped = workload::prefill_arrivals(trace, 1, 2.6);
  // The period is the last row's time: 0, .5, 1 | 1, 1.5, 2 | 2, 2.5.
  REQUIRE(looped.size() == 8);
  CHECK(looped[3].at_s == Approx(1.0));
  CHECK(looped[3].prompt_tokens == 100);
  CHECK(looped[4].at_s == Approx(1.5));
  CHECK(looped[4].prompt_tokens == 200);
}

TEST_CASE("bubbles are predicted from the last iteration's waits", "[bubbletea]") {
  Dispatcher d({{1e15, 0, false}}, {0.1, 1 * kMs, 2});
  // Iteration 0 ran [0, 100 ms) and waited in [10, 40) and [60, 90); a 0.5 ms wait is noise.
  d.learn(0, 0, 100 * kMs, {{10 * kMs, 40 * kMs}, {60 * kMs, 90 * kMs}, {95 * kMs, 95 * kMs + 500'000}});
  const std::vector<Interval> expected{
      {110 * kMs, 140 * kMs}, {160 * kMs, 190 * kMs}, {210 * kMs, 240 * kMs}, {260 * kMs, 290 * kMs}};
  CHECK(d.free_bubbles(0, 100 * kMs) == expected);
  // From 120 ms on, the first bubble is what is left of it.
  CHECK(d.free_bubbles(0, 120 * kMs).front() == Interval{120 * kMs, 140 * kMs});
}

TEST_CASE("admission never places a prefill that cannot fit", "[bubbletea]") {
  // Four GPUs at 1e15 FLOP/s: 1e13 FLOPs = 10 ms, reserved 11 ms with the 10 % margin.
  std::vector<bubbletea::Gpu> gpus(4, {1e15, 2 * kMs, false});
  Dispatcher d(gpus, {0.1, 1 * kMs, 3});
  std::mt19937 rng(3);
  std::vector<std::vector<Interval>> bubbles(4);
  for (int g = 0; g < 4; ++g) {
    std::vector<Interval> idle;
    Ns t = 0;
    for (int i = 0; i < 12; ++i) {
      t += static_cast<Ns>(rng() % 20 + 1) * kMs;
      const Ns len = static_cast<Ns>(rng() % 30 + 1) * kMs;
      idle.push_back({t, t + len});
      t += len;
    }
    d.learn(g, 0, t + kMs, idle);
    bubbles[static_cast<std::size_t>(g)] = d.free_bubbles(g, 0);
  }
  std::vector<bubbletea::Placement> placed;
  Ns now = 0;
  for (int i = 0; i < 200; ++i) {
    now += static_cast<Ns>(rng() % 3) * kMs;
    const double flops = static_cast<double>(rng() % 20 + 1) * 1e12;  // 1-20 ms
    if (auto p = d.request(req(i, now, flops), now)) {
      placed.push_back(*p);
      const auto need = static_cast<Ns>(std::ceil(flops / 1e15 * 1e9 * 1.1));
      REQUIRE(p->end_ns - p->start_ns == need);
      REQUIRE(p->start_ns >= now + 2 * kMs);  // not before the prompt can be there
      bool inside = false;
      for (const auto& b : bubbles[static_cast<std::size_t>(p->gpu)])
        inside = inside || (p->start_ns >= b.start && p->end_ns <= b.end);
      REQUIRE(inside);
    }
  }
  REQUIRE(placed.size() > 20);
  for (const auto& a : placed)
    for (const auto& b : placed)
      if (a.request != b.request && a.gpu == b.gpu) REQUIRE((a.end_ns <= b.start_ns || b.end_ns <= a.start_ns));
}

TEST_CASE("under overload requests queue, expire at their deadline and count as misses", "[bubbletea]") {
  Dispatcher d({{1e15, 0, false}}, {0.0, 1 * kMs, 1});
  d.learn(0, 0, 100 * kMs, {{0, 20 * kMs}});  // one 20 ms bubble per 100 ms iteration: [100, 120)
  // 10 ms each: two fit; the rest queue.
  for (int i = 0; i < 6; ++i) d.request(req(i, 90 * kMs, 1e13, 150 * kMs), 90 * kMs);
  CHECK(d.queued() == 4);
  d.finished(0, 111 * kMs, 0);
  d.finished(1, 121 * kMs, 1);
  // The next iteration: room for two more, before their deadline (240 ms).
  d.learn(0, 100 * kMs, 200 * kMs, {{100 * kMs, 120 * kMs}});
  CHECK(d.retry(200 * kMs).size() == 2);
  CHECK(d.queued() == 2);
  // Those left pass their deadline while queued.
  CHECK(d.retry(250 * kMs).empty());
  CHECK(d.queued() == 0);
  const auto s = d.summary(0, 300 * kMs);
  CHECK(s["requests"] == 6);
  CHECK(s["placed"] == 4);
  CHECK(s["completed"] == 2);
  CHECK(s["expired"] == 2);
  CHECK(s["unfinished"] == 2);  // placed at 200 ms, never reported done
  CHECK(s["deadline_misses"] == 4);
  CHECK(s["preemptions"] == 1);
}

TEST_CASE("a dedicated inference GPU takes what fits in no bubble", "[bubbletea]") {
  Dispatcher d({{1e15, 0, false}, {1e15, 0, true}}, {0.0, 1 * kMs, 1});
  d.learn(0, 0, 100 * kMs, {{0, 5 * kMs}});
  const auto p = d.request(req(0, 0, 1e13), 0);  // 10 ms: no 5 ms bubble holds it
  REQUIRE(p);
  CHECK(p->gpu == 1);
  CHECK(p->start_ns == 0);
}

TEST_CASE("training preempts a running prefill at the next layer boundary", "[bubbletea]") {
  using namespace std::chrono;
  SharedGpu gpu;
  auto& [share, done, runner, outcome] = gpu;
  // 20 layers of 5 ms (modeled at 1e12 FLOP/s).
  run_one_job(runner, 20, 5e9);
  share.training_idle();  // no expectation of when training returns
  std::this_thread::sleep_for(milliseconds(22));
  const auto t0 = agent::Clock::now();
  const auto free = share.training_busy();  // waits for the layer in progress only
  const auto waited = agent::Clock::now() - t0;
  CHECK(waited < milliseconds(40));  // one 5 ms layer, not the 80+ ms of prefill left
  // The GPU was free at the layer's boundary, by the clock, however late this thread woke.
  CHECK(free >= t0);
  CHECK(free - t0 <= milliseconds(5));
  std::this_thread::sleep_for(milliseconds(30));  // training computes: no layer may run
  CHECK(!done.has());
  share.training_idle();
  REQUIRE(done.wait(seconds(2)));
  runner.stop();
  CHECK(outcome->complete);
  CHECK(outcome->preemptions == 1);
  REQUIRE(outcome->spans.size() == 2);
  // GPU time used: 20 layers of 5 ms, in two runs around the 30 ms training gap.
  const auto used = (outcome->spans[0].end_ns - outcome->spans[0].start_ns) +
                    (outcome->spans[1].end_ns - outcome->spans[1].start_ns);
  // Modeled layers end on their boundaries by the clock, however late the runner's thread
  // wakes: each run is a whole number of layers, and the GPU time is exactly 20 of them.
  CHECK((outcome->spans[0].end_ns - outcome->spans[0].start_ns) % 5'000'000 == 0);
  CHECK(used == 100'000'000);
  CHECK(outcome->spans[1].start_ns - outcome->spans[0].end_ns >= 30'000'000);
}

TEST_CASE("training whose data was in before its thread woke cuts the prefill at the boundary after that time",
          "[bubbletea]") {
  using namespace std::chrono;
  SharedGpu gpu;
  auto& [share, done, runner, outcome] = gpu;
  // 20 layers of 5 ms (modeled at 1e12 FLOP/s).
  const auto start = agent::Clock::now();
  run_one_job(runner, 20, 5e9);
  share.training_idle();
  std::this_thread::sleep_for(milliseconds(40));
  // The message was in 12 ms ago; the worker's thread only now asks for its GPU.
  const auto wanted = agent::Clock::now() - milliseconds(12);
  const auto free = share.training_busy(wanted);
  const auto back = agent::Clock::now();
  // The layer under way at `wanted` ended; none after it ran. That boundary has passed:
  // training waits for nothing more.
  CHECK(free >= wanted);
  CHECK(free - wanted < milliseconds(5));
  CHECK(back - free < milliseconds(12));
  std::this_thread::sleep_for(milliseconds(20));
  CHECK(!done.has());
  share.training_idle();
  REQUIRE(done.wait(seconds(2)));
  runner.stop();
  CHECK(outcome->complete);
  REQUIRE(outcome->spans.size() == 2);
  // Where the first run began is the runner thread's business (a busy machine may start
  // it late): its end is the boundary training got, and all 20 layers ran exactly once.
  const auto ns = [&](agent::Clock::time_point t) { return duration_cast<nanoseconds>(t - start).count(); };
  // run_one_job() started the runner a little after `start`: allow that much.
  CHECK(std::abs(outcome->spans[0].end_ns - ns(free)) < 1'000'000);
  CHECK((outcome->spans[0].end_ns - outcome->spans[0].start_ns) % 5'000'000 == 0);
  CHECK((outcome->spans[0].end_ns - outcome->spans[0].start_ns) + (outcome->spans[1].end_ns -
                                                                    outcome->spans[1].start_ns) ==
        100'000'000);
  CHECK(outcome->preemptions == 1);
}

TEST_CASE("a prefill begun after training wanted its GPU back runs no layer there", "[bubbletea]") {
  using namespace std::chrono;
  SharedGpu gpu;  // 5 ms layers below
  auto& [share, done, runner, outcome] = gpu;
  const auto wanted = agent::Clock::now();  // training's data is in from here on
  run_one_job(runner, 20, 5e9);
  std::this_thread::sleep_for(milliseconds(2));
  share.training_idle();  // the worker's thread, late, still lends the GPU: a segment begins
  std::this_thread::sleep_for(milliseconds(15));
  const auto free = share.training_busy(wanted);
  // The GPU was training's since `wanted`: the segment is cut before its first layer.
  CHECK(free == wanted);
  CHECK(!done.has());
  share.training_idle();
  REQUIRE(done.wait(seconds(2)));
  runner.stop();
  CHECK(outcome->complete);
  // One run of all 20 layers; the cut segment left no span and was no preemption.
  REQUIRE(outcome->spans.size() == 1);
  CHECK(outcome->spans[0].end_ns - outcome->spans[0].start_ns == 100'000'000);
  CHECK(outcome->spans[0].start_ns >= 0);
  CHECK(outcome->preemptions == 0);
}

TEST_CASE("a prefill does not start a layer that would run into training's expected return", "[bubbletea]") {
  using namespace std::chrono;
  agent::GpuShare share;
  Reports reports;
  auto& [last, done] = reports;
  agent::PrefillRunner runner(share, 1e12, -1, reports.callback());
  run_one_job(runner, 4, 200e9);  // 200 ms layers
  share.training_idle(agent::Clock::now() + milliseconds(100));  // back in 100 ms: no layer fits
  std::this_thread::sleep_for(milliseconds(20));
  const auto t0 = agent::Clock::now();
  share.training_busy();
  CHECK(agent::Clock::now() - t0 < milliseconds(100));  // no 200 ms layer to wait for
  CHECK(done == 0);
  runner.stop();  // the job is reported, incomplete, having never run
  CHECK(done == 1);
  CHECK(!last.complete);
  CHECK(last.spans.empty());
}

TEST_CASE("a prefill stopped while preempted reports each span once", "[bubbletea]") {
  using namespace std::chrono;
  agent::GpuShare share;
  Reports reports;
  auto& [last, done] = reports;
  agent::PrefillRunner runner(share, 1e12, -1, reports.callback());
  run_one_job(runner, 50, 2e9);  // 2 ms layers
  share.training_idle();
  std::this_thread::sleep_for(milliseconds(10));
  share.training_busy();  // preempted with layers left
  std::this_thread::sleep_for(milliseconds(10));
  runner.stop();  // the run ends while it waits
  REQUIRE(done == 1);
  CHECK(!last.complete);
  CHECK(last.preemptions == 1);
  CHECK(last.spans.size() == 1);
}

TEST_CASE("a prefill stops by the time the awaited message's bytes say it will be in", "[bubbletea]") {
  using namespace std::chrono;
  agent::GpuShare share;
  Awaited done;
  auto& outcome = done.outcome;
  agent::PrefillRunner runner(share, 1e12, -1, done.callback());
  run_one_job(runner, 40, 10e9);  // 40 layers of 10 ms
  const auto idle_at = agent::Clock::now();
  share.training_idle();  // no expectation of when training returns
  const auto epoch = share.idle_epoch();
  std::this_thread::sleep_for(milliseconds(13));
  // The message is arriving: all in 12 ms from now. The layer in progress (10-20 ms) ends;
  // the next would end after that moment, so none starts.
  const auto at = agent::Clock::now() + milliseconds(12);
  share.expect(at, epoch);
  const auto expected_after = agent::Clock::now() - idle_at;
  share.expect(at - hours(1), epoch + 1);  // a stale estimate (another idle time): ignored
  std::this_thread::sleep_until(at);
  const auto t0 = agent::Clock::now();
  share.training_busy();  // the message is in: the GPU is free already
  CHECK(agent::Clock::now() - t0 < milliseconds(2));
  share.training_idle();
  REQUIRE(done.wait(seconds(5)));
  runner.stop();
  CHECK(outcome->complete);
  CHECK(outcome->preemptions == 1);
  REQUIRE(outcome->spans.size() == 2);
  // Whole layers, stopped at the end of the layer in progress when the expectation came: the
  // second layer when this thread woke on time (13 ms after idle); a later one when it woke
  // late, for until then nothing said training would return.
  const auto span = outcome->spans[0].end_ns - outcome->spans[0].start_ns;
  const std::int64_t in_progress_end = (expected_after / milliseconds(10) + 1) * 10'000'000;
  using Millis = duration<double, std::milli>;
  const double expected_after_ms = Millis(expected_after).count();
  INFO("expectation set " << expected_after_ms << " ms after idle; span " << span / 1e6 << " ms");
  CHECK(span % 10'000'000 == 0);
  CHECK(span <= in_progress_end);
}
