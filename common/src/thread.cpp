#include "wanlab/common/thread.hpp"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fmt/format.h>

namespace wanlab {

void name_this_thread(const std::string& name) {
  ::pthread_setname_np(::pthread_self(), name.substr(0, 15).c_str());
}

std::string set_this_thread_nice(int nice) {
  if (::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), nice) == 0) return {};
  return std::strerror(errno);
}

namespace {

std::optional<int> parse_int(std::string_view s) {
  int v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::string duration_text(Duration d) {
  const auto ns = d.count();
  if (ns % 1'000'000'000 == 0) return fmt::format("{}s", ns / 1'000'000'000);
  if (ns % 1'000'000 == 0) return fmt::format("{}ms", ns / 1'000'000);
  if (ns % 1'000 == 0) return fmt::format("{}us", ns / 1'000);
  return fmt::format("{}ns", ns);
}

// SCHED_DEADLINE's parameters (sched_setattr(2); glibc has no wrapper before 2.41).
struct SchedAttr {
  std::uint32_t size = sizeof(SchedAttr);
  std::uint32_t sched_policy = 0;
  std::uint64_t sched_flags = 0;
  std::int32_t sched_nice = 0;
  std::uint32_t sched_priority = 0;
  std::uint64_t sched_runtime = 0, sched_deadline = 0, sched_period = 0;
};
#ifndef SCHED_DEADLINE
#define SCHED_DEADLINE 6
#endif

// Sets the policy part of `s` on the calling thread; "" or why not.
std::string set_policy(const ThreadSched& s) {
  switch (s.policy) {
    case ThreadSched::Policy::off:
      return {};
    case ThreadSched::Policy::nice:
      return set_this_thread_nice(s.priority);
    case ThreadSched::Policy::fifo:
    case ThreadSched::Policy::rr: {
      sched_param sp{};
      sp.sched_priority = s.priority;
      const int rc = ::pthread_setschedparam(::pthread_self(), s.policy == ThreadSched::Policy::fifo ? SCHED_FIFO : SCHED_RR, &sp);
      return rc == 0 ? std::string() : std::string(std::strerror(rc));
    }
    case ThreadSched::Policy::deadline: {
      SchedAttr a;
      a.sched_policy = SCHED_DEADLINE;
      a.sched_runtime = static_cast<std::uint64_t>(s.runtime.count());
      a.sched_deadline = a.sched_period = static_cast<std::uint64_t>(s.period.count());
      if (::syscall(SYS_sched_setattr, 0, &a, 0) == 0) return {};
      const int e = errno;
      // EBUSY: the kernel's admission test (the root domain's RT bandwidth) refused it.
      return e == EBUSY ? std::string("the kernel's admission test refused it (not enough real-time bandwidth left)")
                        : std::string(std::strerror(e));
    }
  }
  return "unknown policy";
}

std::string describe_now(const std::optional<int>& cpu) {
  std::string what;
  const int policy = ::sched_getscheduler(0);
  if (policy == SCHED_FIFO || policy == SCHED_RR) {
    sched_param sp{};
    ::sched_getparam(0, &sp);
    what = fmt::format("{} {}", policy == SCHED_FIFO ? "SCHED_FIFO" : "SCHED_RR", sp.sched_priority);
  } else if (policy == SCHED_DEADLINE) {
    SchedAttr a;
    if (::syscall(SYS_sched_getattr, 0, &a, sizeof a, 0) == 0)
      what = fmt::format("SCHED_DEADLINE {}/{}", duration_text(Duration(a.sched_runtime)),
                         duration_text(Duration(a.sched_period)));
    else
      what = "SCHED_DEADLINE";
  } else {
    errno = 0;
    const int n = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()));
    what = n == 0 ? std::string("normal") : fmt::format("nice {}", n);
  }
  if (cpu) what += fmt::format(" on CPU {}", *cpu);
  return what;
}

}  // namespace

std::string ThreadSched::to_string() const {
  std::string s;
  switch (policy) {
    case Policy::off: s = "off"; break;
    case Policy::nice: s = fmt::format("nice:{}", priority); break;
    case Policy::fifo: s = fmt::format("fifo:{}", priority); break;
    case Policy::rr: s = fmt::format("rr:{}", priority); break;
    case Policy::deadline: s = fmt::format("deadline:{}/{}", duration_text(runtime), duration_text(period)); break;
  }
  if (cpu) s += fmt::format(" cpu {}", *cpu);
  return s;
}

Parsed<ThreadSched> parse_thread_sched(std::string_view text) {
  Parsed<ThreadSched> out;
  ThreadSched& s = out.value;
  const auto colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  const std::string_view arg = colon == std::string_view::npos ? std::string_view() : text.substr(colon + 1);
  const bool has_arg = colon != std::string_view::npos;
  const auto fail = [&](std::string why) {
    out.error = std::move(why);
    return out;
  };
  if (name == "off" || name == "nice") {
    if (name == "off") {
      if (has_arg) return fail(fmt::format("'off' takes no value (got '{}')", text));
      return out;
    }
    s.policy = ThreadSched::Policy::nice;
    s.priority = -20;
    if (!has_arg) return out;
    const auto n = parse_int(arg);
    if (!n || *n < -20 || *n > 19) return fail(fmt::format("nice value '{}' is not an integer in -20..19", arg));
    s.priority = *n;
    return out;
  }
  if (name == "fifo" || name == "rr") {
    s.policy = name == "fifo" ? ThreadSched::Policy::fifo : ThreadSched::Policy::rr;
    if (!has_arg) return fail(fmt::format("'{}' needs a priority, e.g. {}:50", name, name));
    const auto p = parse_int(arg);
    if (!p || *p < 1 || *p > 99) return fail(fmt::format("real-time priority '{}' is not an integer in 1..99", arg));
    s.priority = *p;
    return out;
  }
  if (name == "deadline") {
    s.policy = ThreadSched::Policy::deadline;
    const auto slash = arg.find('/');
    if (!has_arg || slash == std::string_view::npos)
      return fail("'deadline' needs RUNTIME/PERIOD, e.g. deadline:600us/1ms");
    const auto r = parse_duration(arg.substr(0, slash));
    if (!r) return fail(fmt::format("deadline runtime: {}", r.error));
    const auto p = parse_duration(arg.substr(slash + 1));
    if (!p) return fail(fmt::format("deadline period: {}", p.error));
    s.runtime = r.value;
    s.period = p.value;
    // The kernel's own limits: runtime at least 1024 ns, at most the period; period under 2^63 ns.
    if (s.runtime < Duration(1024)) return fail(fmt::format("deadline runtime '{}' is under the kernel's 1024 ns", arg.substr(0, slash)));
    if (s.runtime > s.period)
      return fail(fmt::format("deadline runtime {} is longer than its period {}", duration_text(s.runtime), duration_text(s.period)));
    if (s.period > Duration(std::chrono::seconds(1)))
      return fail(fmt::format("deadline period {} is over 1 s", duration_text(s.period)));
    return out;
  }
  return fail(fmt::format("'{}' is not one of fifo:PRIORITY, rr:PRIORITY, deadline:RUNTIME/PERIOD, nice[:N], off", text));
}

ThreadSchedResult apply_thread_sched(const ThreadSched& want, const ThreadSched& fallback) {
  ThreadSchedResult r;
  std::optional<int> cpu;
  if (want.cpu) {
    if (want.policy == ThreadSched::Policy::deadline) {
      // The kernel refuses SCHED_DEADLINE to a thread that may not run on every CPU.
      r.warnings.push_back(fmt::format("CPU {} not used: a SCHED_DEADLINE thread cannot be pinned", *want.cpu));
      r.as_asked = false;
    } else {
      cpu_set_t set;
      CPU_ZERO(&set);
      if (*want.cpu >= 0 && *want.cpu < CPU_SETSIZE) CPU_SET(*want.cpu, &set);
      if (const int rc = ::pthread_setaffinity_np(::pthread_self(), sizeof set, &set); rc == 0) {
        cpu = want.cpu;
      } else {
        r.warnings.push_back(fmt::format("cannot run on CPU {} only ({})", *want.cpu, std::strerror(rc)));
        r.as_asked = false;
      }
    }
  }
  if (const auto why = set_policy(want); !why.empty()) {
    r.as_asked = false;
    std::string warning = fmt::format("cannot use {} ({})", ThreadSched{want.policy, want.priority, want.runtime, want.period, {}}.to_string(), why);
    if (fallback.policy != ThreadSched::Policy::off) {
      if (const auto why2 = set_policy(fallback); why2.empty())
        warning += fmt::format("; using {} instead", fallback.to_string());
      else
        warning += fmt::format("; {} not either ({})", fallback.to_string(), why2);
    }
    r.warnings.push_back(std::move(warning));
  }
  r.applied = describe_now(cpu);
  return r;
}

}  // namespace wanlab
