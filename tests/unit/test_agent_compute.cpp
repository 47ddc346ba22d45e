// The agent's modeled GPU: ops run on the GPU's clock, not the host thread's wake-ups.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "worker.hpp"

using namespace wanlab;
using namespace std::chrono;
using agent::Clock;

namespace {

program::Op compute_op(double flops) {
  program::Op op;
  op.kind = program::OpKind::forward;
  op.flops = flops;
  return op;
}

}  // namespace

TEST_CASE("agent: a modeled op runs from the time its GPU was ready, however late the thread asks", "[agent]") {
  std::mutex m;
  std::condition_variable cv;
  agent::ModeledCompute gpu(1e12, m, cv);  // 2e9 FLOP: 2 ms
  const std::atomic<bool> abort{false};
  const program::StageShape shape;

  // Ready 1.5 ms ago (the thread woke late): the op ends 0.5 ms from now, not 2 ms.
  const auto now = Clock::now();
  const auto late = gpu.run(compute_op(2e9), shape, abort, now - microseconds(1500));
  REQUIRE(late);
  CHECK(late->start == now - microseconds(1500));
  CHECK(late->end == now + microseconds(500));
  CHECK(Clock::now() >= late->end);  // it waited for the end

  // Ready in the future: it starts then.
  const auto ahead = Clock::now() + milliseconds(3);
  const auto next = gpu.run(compute_op(2e9), shape, abort, ahead);
  REQUIRE(next);
  CHECK(next->start == ahead);
  CHECK(next->end == ahead + milliseconds(2));
  CHECK(Clock::now() >= next->end);

  // Ten ops back to back, each ready when the last ended: exactly ten op times in all, the
  // threads' wake-up delays not added up.
  const auto t0 = Clock::now();
  auto ready = t0;
  for (int i = 0; i < 10; ++i) {
    const auto r = gpu.run(compute_op(2e9), shape, abort, ready);
    REQUIRE(r);
    CHECK(r->start == ready);
    ready = r->end;
  }
  CHECK(ready == t0 + milliseconds(20));
  CHECK(Clock::now() >= t0 + milliseconds(20));
}

TEST_CASE("agent: a modeled op returns nothing once aborted", "[agent]") {
  std::mutex m;
  std::condition_variable cv;
  agent::ModeledCompute gpu(1e12, m, cv);
  std::atomic<bool> abort{false};
  const program::StageShape shape;
  std::thread stopper([&] {
    std::this_thread::sleep_for(milliseconds(20));
    {
      std::lock_guard lock(m);
      abort = true;
    }
    cv.notify_all();
  });
  const auto t0 = Clock::now();
  const auto r = gpu.run(compute_op(10e12), shape, abort, t0);  // 10 s of work
  stopper.join();
  CHECK(!r);
  CHECK(Clock::now() - t0 < seconds(5));
}

TEST_CASE("agent: TP ranks start an op together, at the latest rank's ready time", "[agent]") {
  agent::TpSync sync(3);
  const std::atomic<bool> abort{false};
  const auto base = Clock::now();
  const std::vector<Clock::time_point> ready{base, base + milliseconds(1), base + milliseconds(5)};
  for (int round = 0; round < 3; ++round) {  // the barrier is reused op after op
    std::vector<Clock::time_point> started(3);
    std::vector<std::thread> ranks;
    for (int r = 0; r < 3; ++r)
      ranks.emplace_back([&, r] {
        const auto s = sync.arrive_and_wait(ready[static_cast<std::size_t>(r)] + milliseconds(round), abort);
        if (s) started[static_cast<std::size_t>(r)] = *s;
      });
    for (auto& t : ranks) t.join();
    for (const auto& s : started) CHECK(s == base + milliseconds(5 + round));
  }
}
