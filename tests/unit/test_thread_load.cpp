// The engine's time off the CPU: schedstat's run delay and the steal of one CPU in /proc/stat.
#include <catch2/catch.hpp>

#include <pthread.h>
#include <sched.h>

#include <chrono>
#include <thread>

#include "wanlab/shaping/thread_load.hpp"

using namespace wanlab::shaping;

TEST_CASE("thread load: schedstat's run delay and one CPU's steal, parsed", "[unit][shaping]") {
  CHECK(parse_schedstat_run_delay("123456789 4242 17\n") == 4242u);
  CHECK_FALSE(parse_schedstat_run_delay("123456789\n").has_value());
  CHECK_FALSE(parse_schedstat_run_delay("").has_value());
  CHECK_FALSE(parse_schedstat_run_delay("x 1 2").has_value());

  const std::string stat =
      "cpu  100 0 50 1000 5 0 3 70 0 0\n"
      "cpu0 50 0 25 500 2 0 1 30 0 0\n"
      "cpu1 50 0 25 500 3 0 2 40 0 0\n"
      "cpu10 1 1 1 1 1 1 1 99 0 0\n"
      "intr 12345\n";
  CHECK(parse_cpu_steal_ticks(stat, 0) == 30u);
  CHECK(parse_cpu_steal_ticks(stat, 1) == 40u);
  CHECK(parse_cpu_steal_ticks(stat, 10) == 99u);  // "cpu1 " is not "cpu10 "
  CHECK_FALSE(parse_cpu_steal_ticks(stat, 2).has_value());
  CHECK_FALSE(parse_cpu_steal_ticks(stat, -1).has_value());
  CHECK_FALSE(parse_cpu_steal_ticks("cpu0 1 2 3\n", 0).has_value());  // too short for steal
}

TEST_CASE("thread load: a thread kept off its only CPU by a busy sibling shows run delay", "[unit][shaping]") {
  ThreadLoadMeter meter;
  if (!meter.available()) {
    WARN("SKIPPED: no /proc/thread-self/schedstat here (kernel without CONFIG_SCHED_INFO)");
    return;
  }
  meter.sample(0);
  const auto before = meter.run_delay_ns();
  // Two threads pinned to this thread's CPU: while the sibling spins, this one yields and
  // waits on the run queue. Run delay only grows.
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu(), &one);
  cpu_set_t old;
  REQUIRE(pthread_getaffinity_np(pthread_self(), sizeof old, &old) == 0);
  REQUIRE(pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0);
  std::thread sibling([&] {
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    while (std::chrono::steady_clock::now() < end) {
    }
  });
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (std::chrono::steady_clock::now() < end) std::this_thread::yield();
  sibling.join();
  pthread_setaffinity_np(pthread_self(), sizeof old, &old);
  meter.sample(1'000'000'000);
  CHECK(meter.run_delay_ns() > before);
  CHECK(meter.cpu() >= 0);
}
