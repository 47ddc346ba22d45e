// Mahimahi link traces imported as rate steps: binning, the loop period, errors.
#include <catch2/catch.hpp>

#include <string>

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
  CHECK_THAT(problem("1\n2\nthree\n4\n"),
             Contains("line 3, column 1: 'three': expected a whole number of milliseconds"));
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
