#include "wanlab/shaping/thread_load.hpp"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <charconv>
#include <string>
#include <vector>

namespace wanlab::shaping {
namespace {

// Reads a /proc file from its start into `buf`; the text, or empty on an error.
std::string_view read_at_start(int fd, std::vector<char>& buf) {
  if (fd < 0) return {};
  std::size_t n = 0;
  for (;;) {
    if (n == buf.size()) buf.resize(buf.size() * 2);
    const auto r = ::pread(fd, buf.data() + n, buf.size() - n, static_cast<off_t>(n));
    if (r < 0) return {};
    if (r == 0) break;
    n += static_cast<std::size_t>(r);
  }
  return {buf.data(), n};
}

// The next unsigned number in `s` from `pos` (skipping spaces); advances `pos`.
std::optional<std::uint64_t> next_number(std::string_view s, std::size_t& pos) {
  while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\t')) ++pos;
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data() + pos, s.data() + s.size(), v);
  if (ec != std::errc{}) return std::nullopt;
  pos = static_cast<std::size_t>(end - s.data());
  return v;
}

}  // namespace

std::optional<std::uint64_t> parse_schedstat_run_delay(std::string_view text) {
  std::size_t pos = 0;
  if (!next_number(text, pos)) return std::nullopt;
  return next_number(text, pos);
}

std::optional<std::uint64_t> parse_cpu_steal_ticks(std::string_view proc_stat, int cpu) {
  if (cpu < 0) return std::nullopt;
  const std::string label = "cpu" + std::to_string(cpu) + " ";
  std::size_t at = 0;
  for (;;) {
    if (proc_stat.substr(at, label.size()) == label) break;
    const auto nl = proc_stat.find('\n', at);
    if (nl == std::string_view::npos) return std::nullopt;
    at = nl + 1;
  }
  auto line = proc_stat.substr(at + label.size());
  line = line.substr(0, line.find('\n'));
  std::size_t pos = 0;
  std::optional<std::uint64_t> v;
  for (int field = 0; field < 8; ++field)  // user nice system idle iowait irq softirq steal
    if (!(v = next_number(line, pos))) return std::nullopt;
  return v;
}

ThreadLoadMeter::ThreadLoadMeter()
    : schedstat_(::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC)),
      proc_stat_(::open("/proc/stat", O_RDONLY | O_CLOEXEC)) {}

void ThreadLoadMeter::sample(std::int64_t now_ns, std::int64_t steal_every_ns) {
  thread_local std::vector<char> buf(4096);
  if (const auto d = parse_schedstat_run_delay(read_at_start(schedstat_.get(), buf))) run_delay_ns_ = *d;
  if (steal_read_once_ && now_ns - last_steal_read_ns_ < steal_every_ns) return;
  steal_read_once_ = true;
  last_steal_read_ns_ = now_ns;
  const int cpu = ::sched_getcpu();
  const auto ticks = parse_cpu_steal_ticks(read_at_start(proc_stat_.get(), buf), cpu);
  if (ticks && last_steal_ticks_ && cpu == cpu_ && *ticks >= *last_steal_ticks_) {
    static const long hz = ::sysconf(_SC_CLK_TCK);
    steal_ns_ += (*ticks - *last_steal_ticks_) * (1'000'000'000ULL / static_cast<std::uint64_t>(hz > 0 ? hz : 100));
  }
  last_steal_ticks_ = ticks;
  cpu_ = cpu;
}

}  // namespace wanlab::shaping
