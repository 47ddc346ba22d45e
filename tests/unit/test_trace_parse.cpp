// Trace files: the format, every error class (with line, column and reason, all at once),
// the canonical form, how steps change a link, and the shipped traces.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "wanlab/replay/trace.hpp"

using namespace wanlab;
using namespace wanlab::replay;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

const std::string kSource = WANLAB_SOURCE_DIR;

// The problems parse_trace reports for `text` ("where: reason" each), or {} if it parses.
std::vector<std::string> problems(const std::string& text) {
  try {
    parse_trace(text, "t.csv");
  } catch (const core::ConfigError& e) {
    std::vector<std::string> out;
    for (const auto& d : e.diagnostics()) {
      CHECK(d.file == "t.csv");
      out.push_back(d.path.empty() ? d.reason : d.path + ": " + d.reason);
    }
    return out;
  }
  return {};
}

// The single problem reported (fails the test if there is not exactly one).
std::string problem(const std::string& text) {
  const auto p = problems(text);
  INFO(text);
  REQUIRE(p.size() == 1);
  return p[0];
}

}  // namespace

TEST_CASE("trace times: whole milliseconds with a unit, up to 30 days", "[unit][trace]") {
  CHECK(parse_trace_time("0").value == 0ms);
  CHECK(parse_trace_time("0s").value == 0ms);
  CHECK(parse_trace_time("250ms").value == 250ms);
  CHECK(parse_trace_time("1.5s").value == 1500ms);
  CHECK(parse_trace_time("0.001s").value == 1ms);
  CHECK(parse_trace_time(".5s").value == 500ms);
  CHECK(parse_trace_time("2min").value == 120s);
  CHECK(parse_trace_time("2m").value == 120s);
  CHECK(parse_trace_time("2h").value == 7200s);
  CHECK(parse_trace_time("720h").value == std::chrono::hours(720));
  CHECK(parse_trace_time(" 3 s ").value == 3s);
  CHECK_THAT(parse_trace_time("1.5").error, Contains("missing unit"));
  CHECK_THAT(parse_trace_time("0.0005s").error, Contains("whole milliseconds"));
  CHECK_THAT(parse_trace_time("1.5ms").error, Contains("whole milliseconds"));
  CHECK_THAT(parse_trace_time("500us").error, Contains("whole milliseconds"));
  CHECK_THAT(parse_trace_time("721h").error, Contains("30 days"));
  CHECK_THAT(parse_trace_time("-1s").error, Contains("negative"));
  CHECK_THAT(parse_trace_time("soon").error, Contains("number"));
  CHECK_THAT(parse_trace_time("3days").error, Contains("unknown time unit"));
  CHECK_THAT(parse_trace_time("1.2.3s").error, Contains("unknown time unit"));

  CHECK(format_trace_time(0ms) == "0s");
  CHECK(format_trace_time(1500ms) == "1.5s");
  CHECK(format_trace_time(10ms) == "0.01s");
  CHECK(format_trace_time(3599s) == "3599s");
  for (auto t : {0ms, 1ms, 999ms, 1001ms, 123456789ms}) CHECK(parse_trace_time(format_trace_time(t)).value == t);
}

TEST_CASE("a trace: directives, header, steps that set some parameters", "[unit][trace]") {
  const auto t = parse_trace(
      "# a comment\n"
      "#@ mode=loop end=9s\n"
      "\n"
      "Time, Rate ,delay,jitter,loss\r\n"
      "0s,50Mbit,10ms,1ms,0%\n"
      "3s,10Mbit\n"         // fewer fields: the rest unchanged
      "6s,,20ms,,\n"        // empty cells: unchanged
      "7.5s,0bit,,,100%\n"  // an outage
      "# trailing comment\n",
      "t.csv");
  CHECK(t.mode == EndMode::loop);
  CHECK(t.end == 9s);
  CHECK(t.length() == 9s);
  REQUIRE(t.steps.size() == 4);
  CHECK(t.steps[0].at == 0s);
  CHECK(t.steps[0].rate == Rate{50'000'000});
  CHECK(t.steps[0].delay == 10ms);
  CHECK(t.steps[0].jitter == 1ms);
  CHECK(t.steps[0].loss == Probability{0});
  CHECK(t.steps[0].line == 5);
  CHECK(t.steps[1].rate == Rate{10'000'000});
  CHECK_FALSE(t.steps[1].delay);
  CHECK(t.steps[2].delay == 20ms);
  CHECK_FALSE(t.steps[2].rate);
  CHECK(t.steps[3].at == 7500ms);
  CHECK(t.steps[3].rate == Rate{0});
  CHECK(t.steps[3].loss == Probability{Probability::kOne});

  const auto s = summarize(t);
  CHECK(s.steps == 4);
  CHECK(s.min_rate == Rate{0});
  CHECK(s.max_rate == Rate{50'000'000});
  CHECK(s.outages == 1);

  // Hold is the default; without an end the trace lasts until its last step.
  const auto h = parse_trace("time,delay\n0s,5ms\n2s,7ms\n", "h.csv");
  CHECK(h.mode == EndMode::hold);
  CHECK_FALSE(h.end);
  CHECK(h.length() == 2s);
  // A first step after 0 is fine: the link keeps its values until then.
  CHECK(parse_trace("time,rate\n1s,5Mbit\n", "x.csv").steps[0].at == 1s);
}

TEST_CASE("trace errors name the line, the column and the reason", "[unit][trace]") {
  SECTION("file level") {
    CHECK_THAT(problem(""), Contains("no header line"));
    CHECK_THAT(problem("# only comments\n"), Contains("no header line"));
    CHECK_THAT(problem("time,rate\n"), Contains("no steps"));
    CHECK_THAT(problem("0s,10Mbit\n"), Contains("line 1: missing header line"));
    // A Mahimahi link trace (one delivery time in ms per line) given without --format mahimahi.
    CHECK_THAT(problem("0\n12\n12\n25\n"), Contains("line 1: not a CSV trace: it looks like a Mahimahi link trace") &&
                                                  Contains("--format mahimahi"));
    // Before its header the file may be no trace at all: its text is not quoted.
    CHECK_THAT(problem("when,rate\n0s,1Mbit\n"), Contains("line 1, column 1: the first column must be \"time\""));
    CHECK_THAT(problem("root:$6$salt$hash:19000:0:99999:7:::\n"), !Contains("root"));
    // Bytes that are not UTF-8 are escaped, so the message can go into JSON and terminals.
    CHECK_THAT(problem("time,rate\n0s,1M\xff\x1b[2Jbit\n"), Contains("1M\\xff\\x1b[2Jbit"));
    CHECK_THAT(problem("time\n0s\n"), Contains("line 1: no parameter columns"));
  }
  SECTION("header") {
    CHECK_THAT(problem("time,rate_mbit\n0s,1\n"),
               Contains("line 1, column 2 (rate_mbit): unknown column \"rate_mbit\" (did you mean \"rate\"?)"));
    CHECK_THAT(problem("time,dealy\n0s,1ms\n"), Contains("(did you mean \"delay\"?)"));
    CHECK_THAT(problem("time,rate,rate\n0s,1Mbit,2Mbit\n"),
               Contains("line 1, column 3 (rate): column \"rate\" appears twice"));
  }
  SECTION("directives") {
    CHECK_THAT(problem("#@ mode=forever\ntime,rate\n0s,1Mbit\n"),
               Contains("line 1 (#@ mode): 'forever': mode is hold (keep the last values) or loop"));
    CHECK_THAT(problem("#@ speed=2\ntime,rate\n0s,1Mbit\n"), Contains("line 1: unknown directive 'speed'"));
    CHECK_THAT(problem("#@ loop\ntime,rate\n0s,1Mbit\n"), Contains("write directives as key=value"));
    CHECK_THAT(problem("#@ end=5s\n#@ end=6s\ntime,rate\n0s,1Mbit\n"),
               Contains("line 2 (#@ end): 'end' already given at line 1"));
    CHECK_THAT(problem("#@ end=0s\ntime,rate\n0s,1Mbit\n"), Contains("end must be after the start"));
    CHECK_THAT(problem("#@ end=5us\ntime,rate\n0s,1Mbit\n"), Contains("whole milliseconds"));
    CHECK_THAT(problem("time,rate\n#@ mode=loop\n0s,1Mbit\n"),
               Contains("line 2: directives (#@ ...) go before the header"));
    CHECK_THAT(problem("#@ mode=loop\ntime,rate\n0s,1Mbit\n"),
               Contains("line 1 (#@ mode): mode=loop needs the loop's period: add end=<time>"));
    CHECK_THAT(problem("#@ mode=loop end=3s\ntime,rate\n0s,1Mbit\n3s,2Mbit\n"),
               Contains("line 1 (#@ end): end 3s must be after the last step (3s at line 4)"));
  }
  SECTION("rows") {
    CHECK_THAT(problem("time,rate\n0s,1Mbit,2ms\n"),
               Contains("line 2, column 3: 3 fields, but the header names 2 columns"));
    CHECK_THAT(problem("time,rate\n\"0s\",1Mbit\n"), Contains("line 2: quoted fields are not supported"));
    CHECK_THAT(problem("time,rate\n,1Mbit\n"), Contains("line 2, column 1 (time): missing time"));
    CHECK_THAT(problem("time,rate\nsoon,1Mbit\n"),
               Contains("line 2, column 1 (time): 'soon': does not start with a number"));
    CHECK_THAT(problem("time,rate\n0.0005s,1Mbit\n"),
               Contains("line 2, column 1 (time): '0.0005s': trace times are whole milliseconds"));
    CHECK_THAT(problem("time,rate\n1s,1Mbit\n1s,2Mbit\n"),
               Contains("line 3, column 1 (time): time 1s is not after the previous step's 1s (line 2): times must "
                        "strictly increase"));
    CHECK_THAT(problem("time,rate\n2s,1Mbit\n1s,2Mbit\n"), Contains("strictly increase"));
    CHECK_THAT(problem("time,rate\n0s,\n"), Contains("line 2: the step sets nothing"));
  }
  SECTION("values, through the unit parsers") {
    CHECK_THAT(problem("time,rate\n0s,10Mbps\n"), Contains("line 2, column 2 (rate): '10Mbps': 'bps' is ambiguous"));
    CHECK_THAT(problem("time,rate\n0s,10\n"), Contains("line 2, column 2 (rate): '10': missing unit"));
    CHECK_THAT(problem("time,delay\n0s,-4ms\n"), Contains("line 2, column 2 (delay): '-4ms': must not be negative"));
    CHECK_THAT(problem("time,delay,jitter\n0s,1ms,2 fortnights\n"),
               Contains("line 2, column 3 (jitter): '2 fortnights'"));
    CHECK_THAT(problem("time,loss\n0s,0.1\n"), Contains("line 2, column 2 (loss): '0.1': write a percentage"));
    CHECK_THAT(problem("time,loss\n0s,101%\n"), Contains("more than 100%"));
    CHECK_THAT(problem("time,delay,jitter\n0s,1ms,2ms\n"),
               Contains("line 2, column 3 (jitter): jitter 2ms exceeds the delay 1ms of the same step"));
  }
  SECTION("every problem at once, in file order") {
    const auto p = problems(
        "#@ mode=loop\n"
        "time,rate,delay\n"
        "0s,10Mbps,1ms\n"
        "1s,5Mbit,soon\n"
        "1s,5Mbit,2ms\n");
    REQUIRE(p.size() == 4);
    CHECK_THAT(p[0], Contains("line 3, column 2 (rate)"));
    CHECK_THAT(p[1], Contains("line 4, column 3 (delay)"));
    CHECK_THAT(p[2], Contains("line 5, column 1 (time)"));
    CHECK_THAT(p[3], Contains("mode=loop needs"));
  }
  SECTION("a very broken file lists the first 50 problems and counts the rest") {
    std::string text = "time,rate\n";
    for (int i = 0; i < 80; ++i) text += std::to_string(i) + "s,fast\n";
    const auto p = problems(text);
    REQUIRE(p.size() == kMaxDiagnostics + 1);
    CHECK_THAT(p.back(), Contains("... and 30 more problems not listed"));
  }
  SECTION("unreadable file") {
    CHECK_THROWS_WITH(load_trace("/nonexistent/trace.csv"),
                      Contains("/nonexistent/trace.csv: cannot read the file: No such file or directory"));
    CHECK_THROWS_WITH(load_trace(fs::temp_directory_path()), Contains("folder"));
  }
}

TEST_CASE("the canonical CSV reads back the same trace", "[unit][trace]") {
  const auto t = parse_trace(
      "#@ mode=loop end=10.5s\n"
      "time,loss,rate,jitter,delay\n"
      "0s,0.01%,4.35Gbit,0.2ms,34.2ms\n"
      "0.25s,,1500bit,,\n"
      "9s,100%,0bit,,\n",
      "in.csv");
  const auto csv = to_csv(t, {"first line", "", "third"});
  CHECK_THAT(csv, Contains("# first line\n#\n# third\n#@ mode=loop end=10.5s\ntime,rate,delay,jitter,loss\n"));
  CHECK_THAT(csv, Contains("0.25s,1500bit,,,\n"));
  auto back = parse_trace(csv, "out.csv");
  CHECK(back.mode == t.mode);
  CHECK(back.end == t.end);
  REQUIRE(back.steps.size() == t.steps.size());
  for (std::size_t i = 0; i < t.steps.size(); ++i) {
    auto a = t.steps[i], b = back.steps[i];
    a.line = b.line = 0;
    CHECK(a == b);
  }
  // Only the columns used are written.
  const auto only_rate = to_csv(parse_trace("time,rate,delay\n0s,1Mbit,\n", "r.csv"));
  CHECK_THAT(only_rate, Contains("time,rate\n0s,1Mbit\n"));
}

TEST_CASE("a step sets its fields over the link's current parameters", "[unit][trace]") {
  core::LinkParams cur;
  cur.rate = Rate{100'000'000};
  cur.delay = 10ms;
  cur.jitter = 1ms;
  cur.queue = QueueLimit{QueueLimit::Unit::packets, 500};
  Step s;
  s.rate = Rate{5'000'000};
  s.loss = Probability{10'000'000};
  const auto p = apply_step(cur, s);
  CHECK(p.rate == Rate{5'000'000});
  CHECK(p.loss == Probability{10'000'000});
  CHECK(p.delay == 10ms);
  CHECK(p.jitter == 1ms);
  CHECK(p.queue == cur.queue);  // traces never touch the queue limit
}

TEST_CASE("a trace is checked against the link it will replay on", "[unit][trace]") {
  core::LinkParams link;
  link.delay = 10ms;
  link.jitter = 2ms;
  link.rate = Rate{1'000'000};
  // Lowers the delay below the link's jitter at line 3.
  const auto bad = parse_trace("time,delay\n0s,20ms\n1s,1ms\n", "d.csv");
  try {
    check_against(bad, link, "use->euw");
    FAIL("expected a ConfigError");
  } catch (const core::ConfigError& e) {
    REQUIRE(e.diagnostics().size() == 1);
    CHECK(e.diagnostics()[0].path == "line 3");
    CHECK_THAT(e.diagnostics()[0].reason, Contains("on link use->euw this step leaves jitter 2ms above delay 1ms"));
  }
  // Fine once the same step sets the jitter too.
  CHECK_NOTHROW(check_against(parse_trace("time,delay,jitter\n0s,20ms,\n1s,1ms,0ms\n", "d.csv"), link, "use->euw"));
  // A loop is checked on its second pass too: here line 3 sets jitter 5ms, which breaks
  // line 2 (delay 3ms) only when the trace starts over.
  const auto loop = parse_trace("#@ mode=loop end=3s\ntime,delay,jitter\n0s,3ms,\n1s,10ms,5ms\n", "l.csv");
  CHECK_NOTHROW(check_against(parse_trace("time,delay,jitter\n0s,3ms,\n1s,10ms,5ms\n", "h.csv"), link, "x"));
  CHECK_THROWS_WITH(check_against(loop, link, "use->euw"),
                    Contains("line 3: on link use->euw") && Contains("when the trace loops"));
}

TEST_CASE("every shipped trace is valid, and the README's example is", "[unit][trace]") {
  std::size_t csv = 0;
  for (const auto& e : fs::recursive_directory_iterator(kSource + "/traces")) {
    if (e.path().extension() != ".csv" || e.path().parent_path().filename() == "data") continue;
    INFO(e.path());
    CHECK_NOTHROW(load_trace(e.path()));
    ++csv;
  }
  CHECK(csv >= 8);
  // The fenced ```csv block of traces/README.md.
  std::ifstream readme(kSource + "/traces/README.md");
  std::stringstream ss;
  ss << readme.rdbuf();
  const auto text = ss.str();
  const auto start = text.find("```csv\n");
  REQUIRE(start != std::string::npos);
  const auto end = text.find("```", start + 7);
  const auto example = parse_trace(text.substr(start + 7, end - start - 7), "traces/README.md");
  CHECK(example.steps.size() >= 3);
}
