// Mahimahi link traces imported as rate steps: binning, the loop period, errors.
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "wanlab/replay/mahimahi.hpp"

using namespace wanlab;
using namespace wanlab::replay;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

// n delivery opportunities at each of the timestamps from `from` to `to` (ms), one per ms.
std::string every_ms(int from, int to, int n = 1) {
  std::string out;
  for (int t = from; t <= to; ++t)
    for (int i = 0; i < n; ++i) out += std::to_string(t) + "\n";
  return out;
}

std::string problem(const std::string& text, const MahimahiOptions& o = {}) {
  try {
    import_mahimahi(text, "m.mahi", o);
  } catch (const core::ConfigError& e) {
    REQUIRE(e.diagnostics().size() >= 1);
    const auto& d = e.diagnostics()[0];
    return d.path.empty() ? d.reason : d.path + ": " + d.reason;
  }
  FAIL("expected a ConfigError");
  return {};
}

}  // namespace

TEST_CASE("Mahimahi: one 1500-byte packet per ms is 12 Mbit/s", "[unit][trace][mahimahi]") {
  // 1 ms .. 1000 ms: 1000 opportunities in a 1000 ms period.
  const auto t = import_mahimahi(every_ms(1, 1000), "m.mahi");
  CHECK(t.mode == EndMode::loop);  // Mahimahi traces loop by nature
  CHECK(t.end == 1000ms);          // the period is the last timestamp
  REQUIRE(t.steps.size() == 1);    // ten equal windows merge into one step
  CHECK(t.steps[0].at == 0ms);
  CHECK(t.steps[0].rate == Rate{12'000'000});
  CHECK_FALSE(t.steps[0].delay);
  CHECK_FALSE(t.steps[0].loss);
}

TEST_CASE("Mahimahi: windows become rate steps", "[unit][trace][mahimahi]") {
  // 0-199 ms: 2 packets/ms (24 Mbit/s); 200-299 ms: none (an outage); 300-400: 1/ms.
  const auto text = every_ms(0, 199, 2) + every_ms(300, 400);
  const auto t = import_mahimahi(text, "m.mahi");
  CHECK(t.end == 400ms);
  REQUIRE(t.steps.size() == 4);
  // The opportunity at 400 ms (the period) is the next loop's 0 ms: 201 in [0, 100).
  CHECK(t.steps[0].at == 0ms);
  CHECK(t.steps[0].rate == Rate{24'120'000});
  CHECK(t.steps[1].at == 100ms);
  CHECK(t.steps[1].rate == Rate{24'000'000});
  CHECK(t.steps[2].at == 200ms);
  CHECK(t.steps[2].rate == Rate{0});
  CHECK(t.steps[3].at == 300ms);
  CHECK(t.steps[3].rate == Rate{12'000'000});

  // Another window; a partial last window is divided by its own length.
  MahimahiOptions o;
  o.window = 30ms;
  const auto fine = import_mahimahi(every_ms(1, 94) + every_ms(95, 99, 2) + "100\n", "m.mahi", o);
  // [0,30): 100 (as 0) and 1..29; [30,60) and [60,90): 30 each; [90,100): 90..99 and 95..99
  // again, 15 in 10 ms.
  CHECK(fine.end == 100ms);
  REQUIRE(fine.steps.size() == 2);
  CHECK(fine.steps[0].rate == Rate{12'000'000});
  CHECK(fine.steps[1].at == 90ms);
  CHECK(fine.steps[1].rate == Rate{15 * 12'000 * 1000 / 10});

  // The packet size is an option (Mahimahi uses 1500 bytes).
  o = {};
  o.packet_bytes = 1000;
  CHECK(import_mahimahi(every_ms(1, 100), "m.mahi", o).steps[0].rate == Rate{8'000'000});

  // The result is a valid trace that writes and reads back.
  const auto back = parse_trace(to_csv(t), "back.csv");
  CHECK(back.steps.size() == 4);
  CHECK(back.mode == EndMode::loop);
  CHECK(back.end == 400ms);
}

TEST_CASE("Mahimahi errors name the line", "[unit][trace][mahimahi]") {
  CHECK_THAT(problem(""), Contains("no delivery opportunities"));
  CHECK_THAT(problem("\n\n"), Contains("no delivery opportunities"));
  // Text that is not a number is not quoted: the file may not be a trace at all.
  CHECK_THAT(problem("1\n2\nthree\n4\n"), Contains("line 3, column 1: expected a whole number of milliseconds"));
  CHECK_THAT(problem("root:$6$salt$hash:19000::\n"),
             Contains("line 1, column 1: expected a whole number of milliseconds"));
  CHECK_THAT(problem("root:$6$salt$hash:19000::\n"), !Contains("root"));
  CHECK_THAT(problem("1\n2.5\n"), Contains("line 2, column 1: '2.5'"));
  CHECK_THAT(problem("1\n-2\n"), Contains("line 2, column 1: '-2'"));
  CHECK_THAT(problem("5\n7\n6\n"), Contains("line 3, column 1: 6 ms is before the previous line's 7 ms (line 2)"));
  CHECK_THAT(problem("0\n0\n"), Contains("line 2, column 1: the last timestamp is 0"));
  MahimahiOptions o;
  o.window = 1500us;
  CHECK_THAT(problem("1\n", o), Contains("whole number of milliseconds"));
  o.window = 0ms;
  CHECK_THAT(problem("1\n", o), Contains("positive"));
  CHECK_THROWS_WITH(load_mahimahi("/nonexistent.mahi"), Contains("/nonexistent.mahi: cannot read the file"));
}

namespace {
// The importer as it was, one counter per window: the reference for the sparse walk.
std::vector<std::pair<std::int64_t, std::uint64_t>> dense_steps(const std::vector<std::uint64_t>& stamps,
                                                                 std::uint64_t w) {
  const std::uint64_t period = stamps.back();
  const std::uint64_t windows = (period + w - 1) / w;
  std::vector<std::uint64_t> count(windows, 0);
  for (auto t : stamps) ++count[(t % period) / w];
  std::vector<std::pair<std::int64_t, std::uint64_t>> out;
  for (std::uint64_t k = 0; k < windows; ++k) {
    const std::uint64_t len = std::min(w, period - k * w);
    const std::uint64_t bps = count[k] * 1500 * 8 * 1000 / len;
    if (!out.empty() && out.back().second == bps) continue;
    out.emplace_back(static_cast<std::int64_t>(k * w), bps);
  }
  return out;
}
}  // namespace

TEST_CASE("Mahimahi: the steps are those of one counter per window, whatever the gaps", "[unit][trace][mahimahi]") {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 300; ++round) {
    std::vector<std::uint64_t> stamps;
    std::uint64_t t = rng() % 3;
    const int n = 1 + static_cast<int>(rng() % 60);
    for (int i = 0; i < n; ++i) {
      stamps.push_back(t);
      const auto r = rng() % 10;
      t += r < 4 ? 0 : r < 8 ? rng() % 7 : rng() % 400;  // repeats, close ones, gaps
    }
    if (stamps.back() == 0) stamps.back() = 1 + rng() % 50;
    std::string text;
    for (auto s : stamps) text += std::to_string(s) + "\n";
    const std::uint64_t w = 1 + rng() % 120;
    MahimahiOptions o;
    o.window = std::chrono::milliseconds(w);
    const auto trace = import_mahimahi(text, "m.mahi", o);
    std::vector<std::pair<std::int64_t, std::uint64_t>> got;
    for (const auto& s : trace.steps)
      got.emplace_back(std::chrono::duration_cast<std::chrono::milliseconds>(s.at).count(), s.rate->bps);
    INFO("round " << round << ", window " << w << " ms, trace:\n" << text);
    REQUIRE(got == dense_steps(stamps, w));
  }
}

TEST_CASE("Mahimahi: memory follows the file, not its last timestamp", "[unit][trace][mahimahi][security]") {
  // 11 bytes, 30 days less 1 ms: 259 million 10 ms windows. One counter each took 2 GB.
  MahimahiOptions o;
  o.window = 10ms;
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // In a child with 256 MiB of address space to spare, so that the old way fails rather
  // than taking the machine's memory.
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    rlimit as{};
    ::getrlimit(RLIMIT_AS, &as);
    std::ifstream maps("/proc/self/statm");
    std::size_t pages = 0;
    maps >> pages;
    as.rlim_cur = static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE)) + (256u << 20);
    ::setrlimit(RLIMIT_AS, &as);
    try {
      const auto t = import_mahimahi("2591999999\n", "m.mahi", o);
      ::_exit(t.steps.size() == 2 ? 0 : 2);
    } catch (...) {
      ::_exit(1);
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);  // else not here either: it would take the gigabytes
#endif
  const auto t = import_mahimahi("2591999999\n", "m.mahi", o);
  REQUIRE(t.steps.size() == 2);  // the one opportunity (at the period: time 0), then nothing
  CHECK(t.steps[0].at == 0ms);
  CHECK(t.steps[0].rate == Rate{1'200'000});  // 1500 bytes in 10 ms
  CHECK(t.steps[1].at == 10ms);
  CHECK(t.steps[1].rate == Rate{0});
  CHECK(t.end == 2591999999ms);
}
