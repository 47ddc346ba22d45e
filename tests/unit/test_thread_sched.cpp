// Thread scheduling (`wanlab up --engine-sched`, `--engine-cpu`): the option's spellings and
// refusals, and applying it to a thread, including the fallback where the kernel refuses a
// real-time policy (a container without CAP_SYS_NICE).
#include <catch2/catch.hpp>

#include <linux/capability.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "wanlab/common/thread.hpp"

using namespace wanlab;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using Policy = ThreadSched::Policy;

namespace {

ThreadSched ok(std::string_view text) {
  const auto p = parse_thread_sched(text);
  INFO(text << ": " << p.error);
  REQUIRE(p);
  return p.value;
}
std::string error(std::string_view text) {
  const auto p = parse_thread_sched(text);
  INFO(text);
  REQUIRE_FALSE(p);
  return p.error;
}

// Runs `f` on a thread of its own (whose scheduling it may change) and returns its result.
template <class F>
auto on_a_thread(F f) {
  decltype(f()) out{};
  std::thread t([&] { out = f(); });
  t.join();
  return out;
}

// Takes CAP_SYS_NICE out of the calling thread's effective capabilities (capabilities are
// per thread; the test process keeps its own), as in a container that was not given it.
void drop_sys_nice_here() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  REQUIRE(::syscall(SYS_capget, &hdr, data) == 0);
  data[CAP_TO_INDEX(CAP_SYS_NICE)].effective &= ~CAP_TO_MASK(CAP_SYS_NICE);
  REQUIRE(::syscall(SYS_capset, &hdr, data) == 0);
}

}  // namespace

TEST_CASE("engine sched: the spellings of --engine-sched", "[unit][sched]") {
  const auto f = ok("fifo:50");
  CHECK(f.policy == Policy::fifo);
  CHECK(f.priority == 50);
  CHECK(f.realtime());
  CHECK(ok("rr:1").policy == Policy::rr);
  CHECK(ok("rr:99").priority == 99);
  const auto d = ok("deadline:600us/1ms");
  CHECK(d.policy == Policy::deadline);
  CHECK(d.runtime == 600us);
  CHECK(d.period == 1ms);
  CHECK(ok("nice").policy == Policy::nice);
  CHECK(ok("nice").priority == -20);
  CHECK(ok("nice:-5").priority == -5);
  CHECK(ok("nice:19").priority == 19);
  CHECK(ok("off").policy == Policy::off);
  CHECK_FALSE(ok("off").realtime());
  CHECK_FALSE(ok("nice").realtime());
  // What to_string() writes parses back to the same.
  for (const char* s : {"fifo:50", "rr:7", "deadline:600us/1ms", "deadline:1500ns/2ms", "nice:-20", "nice:3", "off"}) {
    const auto a = ok(s);
    CHECK(a.to_string() == s);
    const auto b = ok(a.to_string());
    CHECK(b.policy == a.policy);
    CHECK(b.priority == a.priority);
    CHECK(b.runtime == a.runtime);
    CHECK(b.period == a.period);
  }
  ThreadSched pinned = f;
  pinned.cpu = 1;
  CHECK(pinned.to_string() == "fifo:50 cpu 1");
}

TEST_CASE("engine sched: refusals say what is wrong", "[unit][sched]") {
  CHECK_THAT(error("fifo"), Contains("needs a priority, e.g. fifo:50"));
  CHECK_THAT(error("fifo:0"), Contains("not an integer in 1..99"));
  CHECK_THAT(error("fifo:100"), Contains("not an integer in 1..99"));
  CHECK_THAT(error("rr:high"), Contains("'high' is not an integer in 1..99"));
  CHECK_THAT(error("fifo:50x"), Contains("not an integer"));
  CHECK_THAT(error("nice:-21"), Contains("not an integer in -20..19"));
  CHECK_THAT(error("nice:"), Contains("not an integer in -20..19"));
  CHECK_THAT(error("off:1"), Contains("'off' takes no value"));
  CHECK_THAT(error("deadline"), Contains("needs RUNTIME/PERIOD"));
  CHECK_THAT(error("deadline:600us"), Contains("needs RUNTIME/PERIOD"));
  CHECK_THAT(error("deadline:2ms/1ms"), Contains("longer than its period"));
  CHECK_THAT(error("deadline:100ns/1ms"), Contains("under the kernel's 1024 ns"));
  CHECK_THAT(error("deadline:1ms/2s"), Contains("over 1 s"));
  CHECK_THAT(error("deadline:abc/1ms"), Contains("deadline runtime"));
  CHECK_THAT(error("deadline:1ms/x"), Contains("deadline period"));
  CHECK_THAT(error("realtime"), Contains("not one of fifo:PRIORITY, rr:PRIORITY, deadline:RUNTIME/PERIOD, nice[:N], off"));
  CHECK_THAT(error(""), Contains("not one of"));
}

TEST_CASE("engine sched: a refused real-time policy falls back, with a warning", "[unit][sched]") {
  ThreadSched fifo = ok("fifo:50");
  // Lowering one's own priority needs no privilege: the fallback takes.
  const auto r = on_a_thread([&] {
    drop_sys_nice_here();
    auto res = apply_thread_sched(fifo, ok("nice:5"));
    CHECK(::sched_getscheduler(0) == SCHED_OTHER);
    return res;
  });
  CHECK_FALSE(r.as_asked);
  CHECK(r.applied == "nice 5");
  REQUIRE(r.warnings.size() == 1);
  CHECK_THAT(r.warnings[0], Contains("cannot use fifo:50 (Operation not permitted)"));
  CHECK_THAT(r.warnings[0], Contains("using nice:5 instead"));
  // Raising it (nice -20) needs CAP_SYS_NICE too: neither, and the thread stays as it was.
  const auto r2 = on_a_thread([&] {
    drop_sys_nice_here();
    return apply_thread_sched(fifo, ok("nice"));
  });
  CHECK_FALSE(r2.as_asked);
  CHECK(r2.applied == "normal");
  REQUIRE(r2.warnings.size() == 1);
  CHECK_THAT(r2.warnings[0], Contains("nice:-20 not either (Permission denied)"));
  // No fallback: left as it was.
  const auto r3 = on_a_thread([&] {
    drop_sys_nice_here();
    return apply_thread_sched(ok("deadline:500us/1ms"), ok("off"));
  });
  CHECK_FALSE(r3.as_asked);
  CHECK(r3.applied == "normal");
  REQUIRE(r3.warnings.size() == 1);
  CHECK_THAT(r3.warnings[0], Contains("cannot use deadline:500us/1ms"));
}

TEST_CASE("engine sched: applied where permitted, pinned to a CPU", "[unit][sched]") {
  const auto nice = on_a_thread([] { return apply_thread_sched(ok("nice:4"), ok("off")); });
  CHECK(nice.as_asked);
  CHECK(nice.applied == "nice 4");
  CHECK(nice.warnings.empty());
  ThreadSched pinned = ok("nice:3");
  pinned.cpu = 0;
  const auto p = on_a_thread([&] {
    auto res = apply_thread_sched(pinned, ok("off"));
    CHECK(::sched_getcpu() == 0);
    return res;
  });
  CHECK(p.as_asked);
  CHECK(p.applied == "nice 3 on CPU 0");
  // A deadline thread cannot be pinned: the CPU is left out, said so.
  ThreadSched dl = ok("deadline:200us/10ms");
  dl.cpu = 0;
  const auto d = on_a_thread([&] { return apply_thread_sched(dl, ok("off")); });
  CHECK_FALSE(d.as_asked);
  CHECK_THAT(d.warnings.at(0), Contains("a SCHED_DEADLINE thread cannot be pinned"));
  // A real-time policy, where this process may (root, CAP_SYS_NICE, RT bandwidth left).
  const auto f = on_a_thread([] { return apply_thread_sched(ok("fifo:10"), ok("off")); });
  if (!f.as_asked) {
    WARN("SCHED_FIFO not permitted here: " << f.warnings.at(0));
    return;
  }
  CHECK(f.applied == "SCHED_FIFO 10");
  const auto rr = on_a_thread([] { return apply_thread_sched(ok("rr:3"), ok("off")); });
  CHECK(rr.applied == "SCHED_RR 3");
  const auto dd = on_a_thread([] { return apply_thread_sched(ok("deadline:100us/10ms"), ok("off")); });
  if (dd.as_asked) CHECK(dd.applied == "SCHED_DEADLINE 100us/10ms");
}
