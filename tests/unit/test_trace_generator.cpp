// The WAN trace generator: measured levels looked up by region pair, determinism (same
// seed, same trace), and the model's properties over long traces.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "wanlab/core/diagnostics.hpp"
#include "wanlab/replay/generator.hpp"

using namespace wanlab;
using namespace wanlab::replay;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

const std::string kData = std::string(WANLAB_SOURCE_DIR) + "/traces/data/wan_pairs_skyplane_2022.csv";

PairMeasurement use_euw() {
  return load_pair(kData, "aws:us-east-1", "aws:eu-west-1");
}

// The link's parameters at every point of the step grid (a step is written only when a
// value changes).
struct Series {
  std::vector<double> bps, delay_ms, loss;
};
Series replay_values(const Trace& t) {
  Series s;
  double bps = 0, delay = 0, loss = 0;
  std::size_t i = 0;
  // The grid: every multiple of the smallest gap between steps, up to the trace's end.
  Duration grid = t.length();
  for (std::size_t k = 1; k < t.steps.size(); ++k) grid = std::min(grid, t.steps[k].at - t.steps[k - 1].at);
  for (Duration at{}; at < t.length(); at += grid) {
    while (i < t.steps.size() && t.steps[i].at <= at) {
      const auto& st = t.steps[i++];
      if (st.rate) bps = static_cast<double>(st.rate->bps);
      if (st.delay) delay = std::chrono::duration<double, std::milli>(*st.delay).count();
      if (st.loss) loss = st.loss->fraction();
    }
    s.bps.push_back(bps);
    s.delay_ms.push_back(delay);
    s.loss.push_back(loss);
  }
  return s;
}

double mean(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

}  // namespace

TEST_CASE("region pairs come from the measurements, in either order", "[unit][trace][generator]") {
  const auto m = use_euw();
  CHECK(m.rtt == 84'900us);
  CHECK(m.rate == Rate{4'310'000'000});
  CHECK(m.line == 5);
  CHECK(m.region_a == "aws:us-east-1");
  const auto r = load_pair(kData, "aws:eu-west-1", "aws:us-east-1");
  CHECK(r.rtt == m.rtt);
  CHECK(r.region_a == "aws:eu-west-1");  // as asked: the link's source

  CHECK_THROWS_WITH(load_pair(kData, "aws:us-east-1", "aws:mars-1"),
                    Contains("unknown region 'aws:mars-1'") && Contains("aws:eu-west-1"));
  // Bare region names: each gets its provider-qualified name suggested, and the regions are
  // listed once (they were listed once per unknown region).
  try {
    (void)load_pair(kData, "us-east-1", "eu-west-1");
    FAIL("expected a ConfigError");
  } catch (const core::ConfigError& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Contains("unknown region 'us-east-1' (did you mean 'aws:us-east-1'?)"));
    CHECK_THAT(what, Contains("unknown region 'eu-west-1' (did you mean 'aws:eu-west-1'?)"));
    const auto first = what.find("aws:ap-");
    REQUIRE(first != std::string::npos);
    CHECK(what.find("aws:ap-", what.find("regions in this file")) == first);
    CHECK(what.find("regions in this file") == what.rfind("regions in this file"));
  }
  CHECK_THROWS_WITH(
      load_pair(kData, "aws:us-east-1", "azure:westus2"),
      Contains("line 10, column 3 (rtt_ms_median): the pair aws:us-east-1 / azure:westus2 has no usable RTT"));
  CHECK_THROWS_WITH(
      find_pair("region_a,region_b,rtt_ms_median,iperf3_64conn_gbps_median\na,b,10,1\nc,d,10,1\n", "x.csv", "a", "c"),
      Contains("the pair a / c was not measured"));
  CHECK_THROWS_WITH(find_pair("region_a,region_b,rtt\na,b,10\n", "x.csv", "a", "b"),
                    Contains("x.csv: line 1: missing column \"iperf3_64conn_gbps_median\""));
  CHECK_THROWS_WITH(load_pair("/nonexistent.csv", "a", "b"), Contains("cannot read the measurements"));
}

TEST_CASE("same seed, same trace; another seed, another trace", "[unit][trace][generator]") {
  GeneratorOptions o;
  o.duration = 2h;
  o.outages_per_hour = 2;
  o.brownouts_per_hour = 2;
  const auto a = generate(use_euw(), o);
  const auto b = generate(use_euw(), o);
  CHECK(to_csv(a.trace) == to_csv(b.trace));
  CHECK(a.notes == b.notes);
  o.seed = 2;
  const auto c = generate(use_euw(), o);
  CHECK(to_csv(a.trace) != to_csv(c.trace));

  // Events come from their own stream: changing the noise leaves them where they were.
  o.seed = 1;
  o.rate_noise = 0.1;
  const auto d = generate(use_euw(), o);
  REQUIRE(d.events.size() == a.events.size());
  for (std::size_t i = 0; i < a.events.size(); ++i) {
    CHECK(d.events[i].start == a.events[i].start);
    CHECK(d.events[i].length == a.events[i].length);
  }
}

TEST_CASE("a generated trace is a valid trace on the step grid", "[unit][trace][generator]") {
  GeneratorOptions o;
  o.duration = 10min;
  o.step = 250ms;
  o.loop = true;
  const auto g = generate(use_euw(), o);
  CHECK(g.trace.mode == EndMode::loop);
  CHECK(g.trace.end == 10min);
  REQUIRE(!g.trace.steps.empty());
  CHECK(g.trace.steps.front().at == 0ms);
  CHECK(g.trace.steps.front().rate);
  CHECK(g.trace.steps.front().delay);
  CHECK(g.trace.steps.front().loss);
  for (const auto& s : g.trace.steps) CHECK(s.at % 250ms == 0ms);
  // Written and read back, unchanged.
  const auto back = parse_trace(to_csv(g.trace, g.notes), "gen.csv");
  CHECK(back.steps.size() == g.trace.steps.size());
  CHECK(to_csv(back) == to_csv(g.trace));
  CHECK_THAT(g.notes[0], Contains("84.9ms") && Contains("4.31Gbit") && Contains("line 5"));
}

TEST_CASE("the model: level, diurnal swing, noise, brownouts and outages", "[unit][trace][generator]") {
  const auto m = use_euw();
  SECTION("without events or noise, the level and the diurnal swing") {
    GeneratorOptions o;
    o.duration = 24h;
    o.step = 60s;
    o.rate_noise = 0;
    o.delay_noise = 0ms;
    o.outages_per_hour = 0;
    o.brownouts_per_hour = 0;
    o.start_hour = 0;
    const auto s = replay_values(generate(m, o).trace);
    REQUIRE(s.bps.size() == 24 * 60);
    const auto [lo, hi] = std::minmax_element(s.bps.begin(), s.bps.end());
    CHECK(*hi == Approx(4.31e9).epsilon(0.001));                              // 03:00: the quietest hour
    CHECK(*lo == Approx(4.31e9 * (1 - o.diurnal_amplitude)).epsilon(0.001));  // 15:00: the busiest
    CHECK(s.bps[15 * 60] == *lo);
    CHECK(s.delay_ms[15 * 60] == Approx(42.45 + 0.5).margin(0.01));
    CHECK(s.delay_ms[3 * 60] == Approx(42.45).margin(0.01));
    CHECK(*std::max_element(s.loss.begin(), s.loss.end()) == 0);
  }
  SECTION("a compressed day shows the whole swing in one hour") {
    GeneratorOptions o;
    o.duration = 1h;
    o.diurnal_period = 1h;
    o.rate_noise = 0;
    o.outages_per_hour = 0;
    o.brownouts_per_hour = 0;
    const auto s = replay_values(generate(m, o).trace);
    const auto [lo, hi] = std::minmax_element(s.bps.begin(), s.bps.end());
    CHECK(*hi / *lo == Approx(1 / (1 - o.diurnal_amplitude)).epsilon(0.002));
  }
  SECTION("noise wanders around the level") {
    GeneratorOptions o;
    o.duration = 24h;
    o.diurnal_amplitude = 0;
    o.outages_per_hour = 0;
    o.brownouts_per_hour = 0;
    const auto s = replay_values(generate(m, o).trace);
    std::vector<double> logs;
    for (double v : s.bps) logs.push_back(std::log(v / 4.31e9));
    const double mu = mean(logs);
    double var = 0;
    for (double v : logs) var += (v - mu) * (v - mu);
    const double sd = std::sqrt(var / static_cast<double>(logs.size()));
    CHECK(std::abs(mu) < 0.01);
    CHECK(sd == Approx(o.rate_noise).epsilon(0.15));
    // Slow: neighbouring seconds differ by far less than the spread.
    double step_sd = 0;
    for (std::size_t i = 1; i < logs.size(); ++i) step_sd += (logs[i] - logs[i - 1]) * (logs[i] - logs[i - 1]);
    step_sd = std::sqrt(step_sd / static_cast<double>(logs.size() - 1));
    CHECK(step_sd < sd / 3);
    // The delay never drops below the propagation delay.
    CHECK(*std::min_element(s.delay_ms.begin(), s.delay_ms.end()) >= 42.45 - 1e-9);
  }
  SECTION("events arrive at their rates, and show in the values") {
    GeneratorOptions o;
    o.duration = 200h;
    o.step = 10s;
    o.outages_per_hour = 0.5;
    o.brownouts_per_hour = 1;
    const auto g = generate(m, o);
    std::size_t outages = 0, brownouts = 0;
    for (const auto& e : g.events) {
      (e.kind == GeneratedEvent::Kind::outage ? outages : brownouts)++;
      CHECK(e.length >= o.step);
      CHECK(e.start % o.step == 0ms);
      if (e.kind == GeneratedEvent::Kind::brownout) {
        CHECK(e.rate_factor >= o.brownout_rate_min);
        CHECK(e.rate_factor <= o.brownout_rate_max);
        CHECK(e.extra_delay >= o.brownout_delay_min);
        CHECK(e.extra_delay <= o.brownout_delay_max);
      }
    }
    // Poisson: 100 and 200 expected; 4 standard deviations.
    CHECK(outages > 60);
    CHECK(outages < 140);
    CHECK(brownouts > 144);
    CHECK(brownouts < 256);
    const auto s = replay_values(g.trace);
    const auto zero = std::count(s.bps.begin(), s.bps.end(), 0.0);
    CHECK(zero > 0);
    // The time in outage is about rate x mean length / hour (30 s x 0.5 per hour = 0.4 %).
    const double share = static_cast<double>(zero) / static_cast<double>(s.bps.size());
    CHECK(share > 0.001);
    CHECK(share < 0.01);
    CHECK(*std::max_element(s.loss.begin(), s.loss.end()) > 0);
    CHECK(*std::max_element(s.loss.begin(), s.loss.end()) <= o.brownout_loss_max);
  }
}

TEST_CASE("generator options are checked", "[unit][trace][generator]") {
  GeneratorOptions o;
  CHECK(check(o).empty());
  o.step = 1500us;
  o.diurnal_amplitude = 1;
  o.brownout_rate_min = 0.7;
  o.brownout_rate_max = 0.5;
  const auto p = check(o);
  CHECK(p.size() == 3);
  CHECK_THROWS_AS(generate(use_euw(), o), std::invalid_argument);
}
