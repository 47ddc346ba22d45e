#include "wanlab/replay/generator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <numbers>
#include <random>
#include <set>
#include <stdexcept>

#include "text.hpp"

namespace wanlab::replay {
namespace {

constexpr std::string_view kColA = "region_a", kColB = "region_b", kColRtt = "rtt_ms_median",
                           kColRate = "iperf3_64conn_gbps_median";

std::optional<double> number(std::string_view s) {
  s = text::trim(s);
  if (s.empty()) return std::nullopt;
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v) || v < 0) return std::nullopt;
  return v;
}

// A seed per stream: splitmix64 of the seed mixed with the stream's tag.
std::uint64_t stream_seed(std::uint64_t seed, std::uint64_t tag) {
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (tag + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Draws defined here, not by <random>'s distributions, whose output differs between
// standard libraries.
class Stream {
 public:
  explicit Stream(std::uint64_t seed) : rng_(seed) {}
  double uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }  // [0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  double exponential(double mean) { return -mean * std::log1p(-uniform()); }
  double normal() {                     // Box-Muller, one value per call
    const double u1 = 1.0 - uniform();  // (0, 1]
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  std::mt19937_64 rng_;
};

double seconds(Duration d) {
  return std::chrono::duration<double>(d).count();
}

Duration on_grid(double secs, Duration step) {
  const double steps = std::round(secs / seconds(step));
  return step * static_cast<std::int64_t>(std::max(0.0, steps));
}

}  // namespace

PairMeasurement find_pair(std::string_view csv, const std::string& file, std::string_view a, std::string_view b) {
  Problems p(file);
  const auto lines = text::lines(csv);
  std::map<std::string, std::size_t> col;
  std::size_t header_line = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto l = text::trim(lines[i]);
    if (l.empty() || l.starts_with('#')) continue;
    header_line = i + 1;
    const auto fields = text::split(l, ',');
    for (std::size_t c = 0; c < fields.size(); ++c) col[std::string(text::trim(fields[c]))] = c;
    break;
  }
  for (auto name : {kColA, kColB, kColRtt, kColRate})
    if (!col.contains(std::string(name)))
      p.add(header_line ? location(header_line) : "",
            fmt::format("missing column \"{}\" (expected {}, {}, {}, {})", name, kColA, kColB, kColRtt, kColRate));
  p.throw_if_any();

  std::set<std::string> regions;
  for (std::size_t i = header_line; i < lines.size(); ++i) {
    const auto l = text::trim(lines[i]);
    if (l.empty() || l.starts_with('#')) continue;
    const auto f = text::split(l, ',');
    auto cell = [&](std::string_view name) {
      const auto c = col.at(std::string(name));
      return c < f.size() ? text::trim(f[c]) : std::string_view{};
    };
    const auto ra = cell(kColA), rb = cell(kColB);
    regions.emplace(ra);
    regions.emplace(rb);
    if (!((ra == a && rb == b) || (ra == b && rb == a))) continue;
    const std::size_t lineno = i + 1;
    const auto rtt = number(cell(kColRtt));
    const auto gbps = number(cell(kColRate));
    if (!rtt || *rtt <= 0)
      p.add(location(lineno, col.at(std::string(kColRtt)) + 1, kColRtt),
            fmt::format("the pair {} / {} has no usable RTT ('{}')", a, b, cell(kColRtt)));
    if (!gbps || *gbps <= 0)
      p.add(location(lineno, col.at(std::string(kColRate)) + 1, kColRate),
            fmt::format("the pair {} / {} has no usable rate ('{}')", a, b, cell(kColRate)));
    p.throw_if_any();
    PairMeasurement m;
    m.region_a = std::string(a);
    m.region_b = std::string(b);
    m.rtt = Duration{static_cast<std::int64_t>(std::llround(*rtt * 1e6))};
    m.rate = Rate{static_cast<std::uint64_t>(std::llround(*gbps * 1e9))};
    m.file = file;
    m.line = lineno;
    return m;
  }
  bool unknown = false;
  for (auto r : {a, b}) {
    if (regions.contains(std::string(r))) continue;
    unknown = true;
    // Regions are "provider:name"; a bare name is a likely slip.
    std::vector<std::string> meant;
    for (const auto& known : regions)
      if (const auto colon = known.find(':'); colon != std::string::npos && known.substr(colon + 1) == r)
        meant.push_back(known);
    p.add("", fmt::format("unknown region '{}'{}", r,
                          meant.empty() ? std::string{}
                                        : fmt::format(" (did you mean '{}'?)", fmt::join(meant, "' or '"))));
  }
  // The list once, not once per unknown region.
  if (unknown) p.add("", fmt::format("regions in this file: {}", fmt::join(regions, ", ")));
  if (p.empty()) p.add("", fmt::format("the pair {} / {} was not measured (no row has both)", a, b));
  p.throw_if_any();
  return {};
}

PairMeasurement load_pair(const std::filesystem::path& csv_file, std::string_view a, std::string_view b) {
  std::string text;
  if (auto err = text::read_file(csv_file, text); !err.empty()) {
    core::Diagnostics d(csv_file.string());
    d.add("", fmt::format("cannot read the measurements: {}", err));
    d.throw_if_any();
  }
  return find_pair(text, csv_file.string(), a, b);
}

std::vector<std::string> check(const GeneratorOptions& o) {
  std::vector<std::string> out;
  if (o.step < kGranularity || o.step % kGranularity != Duration{0})
    out.push_back("step: must be a whole number of milliseconds, at least 1 ms");
  if (o.duration <= Duration{0} || o.duration > kMaxTraceTime) out.push_back("duration: must be in (0, 30 days]");
  if (o.duration % kGranularity != Duration{0}) out.push_back("duration: must be whole milliseconds");
  if (o.step > Duration{0} && o.duration / std::max(o.step, Duration{1}) > 10'000'000)
    out.push_back("duration / step: more than 10 million steps");
  if (o.diurnal_amplitude < 0 || o.diurnal_amplitude >= 1) out.push_back("diurnal amplitude: must be in [0, 1)");
  if (o.diurnal_delay < Duration{0}) out.push_back("diurnal delay: must not be negative");
  if (o.diurnal_period <= Duration{0}) out.push_back("diurnal period: must be positive");
  if (o.start_hour < 0 || o.start_hour >= 24) out.push_back("start hour: must be in [0, 24)");
  if (o.peak_hour < 0 || o.peak_hour >= 24) out.push_back("peak hour: must be in [0, 24)");
  if (o.rate_noise < 0 || o.rate_noise > 1) out.push_back("rate noise: must be in [0, 1]");
  if (o.delay_noise < Duration{0}) out.push_back("delay noise: must not be negative");
  if (o.noise_correlation <= Duration{0}) out.push_back("noise correlation: must be positive");
  if (o.outages_per_hour < 0 || o.outages_per_hour > 3600) out.push_back("outages per hour: must be in [0, 3600]");
  if (o.brownouts_per_hour < 0 || o.brownouts_per_hour > 3600)
    out.push_back("brownouts per hour: must be in [0, 3600]");
  if (o.outage_mean <= Duration{0}) out.push_back("outage mean: must be positive");
  if (o.brownout_mean <= Duration{0}) out.push_back("brownout mean: must be positive");
  if (!(0 < o.brownout_rate_min && o.brownout_rate_min <= o.brownout_rate_max && o.brownout_rate_max <= 1))
    out.push_back("brownout rate factors: need 0 < min <= max <= 1");
  if (!(Duration{0} <= o.brownout_delay_min && o.brownout_delay_min <= o.brownout_delay_max))
    out.push_back("brownout extra delay: need 0 <= min <= max");
  if (!(0 <= o.brownout_loss_min && o.brownout_loss_min <= o.brownout_loss_max && o.brownout_loss_max <= 1))
    out.push_back("brownout loss: need 0 <= min <= max <= 1");
  return out;
}

Generated generate(const PairMeasurement& pair, const GeneratorOptions& o) {
  if (auto problems = check(o); !problems.empty())
    throw std::invalid_argument(fmt::format("generator options: {}", fmt::join(problems, "; ")));
  Generated g;
  g.trace.source = fmt::format("generated {} -> {} seed {}", pair.region_a, pair.region_b, o.seed);
  g.trace.mode = o.loop ? EndMode::loop : EndMode::hold;
  g.trace.end = o.duration;

  Stream noise(stream_seed(o.seed, 1));
  Stream events(stream_seed(o.seed, 2));
  const double total_s = seconds(o.duration);

  // Events first, on the step grid: Poisson arrivals, exponential lengths.
  auto draw = [&](GeneratedEvent::Kind kind, double per_hour, Duration mean, Duration cap) {
    if (per_hour <= 0) return;
    double t = 0;
    for (;;) {
      t += events.exponential(3600.0 / per_hour);
      if (t >= total_s) break;
      GeneratedEvent e;
      e.kind = kind;
      e.start = on_grid(t, o.step);
      e.length = std::clamp(on_grid(events.exponential(seconds(mean)), o.step), o.step, cap);
      if (kind == GeneratedEvent::Kind::brownout) {
        e.rate_factor = events.uniform(o.brownout_rate_min, o.brownout_rate_max);
        const double extra_ns = events.uniform(static_cast<double>(o.brownout_delay_min.count()),
                                               static_cast<double>(o.brownout_delay_max.count()));
        e.extra_delay = Duration{std::llround(extra_ns / 1e4) * 10'000};  // 10 us, as the delays
        // 0.001 % steps, as the trace writes loss.
        e.loss = Probability{static_cast<std::uint32_t>(
            std::llround(events.uniform(o.brownout_loss_min, o.brownout_loss_max) * 1e5) * 10'000)};
      }
      if (e.start < o.duration) g.events.push_back(e);
    }
  };
  draw(GeneratedEvent::Kind::outage, o.outages_per_hour, o.outage_mean, std::chrono::minutes(10));
  draw(GeneratedEvent::Kind::brownout, o.brownouts_per_hour, o.brownout_mean, std::chrono::hours(1));
  std::stable_sort(g.events.begin(), g.events.end(), [](const auto& x, const auto& y) { return x.start < y.start; });

  const double base_bps = static_cast<double>(pair.rate.bps);
  const Duration base_delay = pair.rtt / 2;
  const double rho = std::exp(-seconds(o.step) / seconds(o.noise_correlation));
  const double innovation = std::sqrt(1 - rho * rho);
  double x = o.rate_noise * noise.normal();                                // log-rate wander, stationary start
  double y = static_cast<double>(o.delay_noise.count()) * noise.normal();  // delay wander, ns
  const double period_s = seconds(o.diurnal_period);

  std::optional<Rate> last_rate;
  std::optional<Duration> last_delay;
  std::optional<Probability> last_loss;
  const std::int64_t n = o.duration / o.step;
  std::size_t next_event = 0;
  std::vector<const GeneratedEvent*> active;
  for (std::int64_t k = 0; k < n; ++k) {
    const Duration t = o.step * k;
    if (k > 0) {
      x = rho * x + innovation * o.rate_noise * noise.normal();
      y = rho * y + innovation * static_cast<double>(o.delay_noise.count()) * noise.normal();
    }
    // Time of day on a 24-"hour" clock that runs once per diurnal period.
    const double hour = std::fmod(o.start_hour + 24.0 * seconds(t) / period_s, 24.0);
    const double load = (1 + std::cos(2 * std::numbers::pi * (hour - o.peak_hour) / 24.0)) / 2;
    double bps = base_bps * (1 - o.diurnal_amplitude * load) * std::exp(x);
    double delay_ns = static_cast<double>(base_delay.count()) + static_cast<double>(o.diurnal_delay.count()) * load +
                      std::max(0.0, y);
    Probability loss{};
    bool outage = false;
    while (next_event < g.events.size() && g.events[next_event].start <= t) active.push_back(&g.events[next_event++]);
    std::erase_if(active, [&](const GeneratedEvent* e) { return t >= e->start + e->length; });
    for (const auto* e : active) {
      if (e->kind == GeneratedEvent::Kind::outage) {
        outage = true;
      } else {
        bps *= e->rate_factor;
        delay_ns += static_cast<double>(e->extra_delay.count());
        loss = std::max(loss, e->loss);
      }
    }
    const Rate rate =
        outage ? Rate{0} : Rate{static_cast<std::uint64_t>(std::max(1.0, std::round(bps / 1e6))) * 1'000'000};
    const Duration delay{static_cast<std::int64_t>(std::llround(delay_ns / 1e4)) * 10'000};
    loss.ppb = static_cast<std::uint32_t>((loss.ppb + 5'000) / 10'000 * 10'000);

    Step s;
    s.at = t;
    if (rate != last_rate) s.rate = last_rate = rate;
    if (delay != last_delay) s.delay = last_delay = delay;
    if (loss != last_loss) s.loss = last_loss = loss;
    if (!s.empty()) g.trace.steps.push_back(s);
  }

  g.notes.push_back(fmt::format("level: {} <-> {} measured median RTT {} and rate {} ({} line {})", pair.region_a,
                                pair.region_b, to_string(pair.rtt), to_string(pair.rate), pair.file, pair.line));
  g.notes.push_back(fmt::format("link {} -> {}: one-way delay {} = RTT / 2; seed {}; {} steps of {} over {} ({})",
                                pair.region_a, pair.region_b, to_string(base_delay), o.seed, n,
                                human_trace_time(o.step), human_trace_time(o.duration), to_string(g.trace.mode)));
  g.notes.push_back(
      fmt::format("diurnal: rate -{:.0f}% and delay +{} at {:g}:00 (busiest), period {}, trace starts at {:g}:00",
                  o.diurnal_amplitude * 100, to_string(o.diurnal_delay), o.peak_hour,
                  human_trace_time(o.diurnal_period), o.start_hour));
  g.notes.push_back(fmt::format("noise: AR(1), log-rate sd {:g}, delay sd {} (one-sided), correlation time {}",
                                o.rate_noise, to_string(o.delay_noise), human_trace_time(o.noise_correlation)));
  g.notes.push_back(fmt::format(
      "events: outages {:g}/h (mean {}), brownouts {:g}/h (mean {}; rate x[{:g}, {:g}], delay +[{}, {}], loss "
      "[{:g}%, {:g}%])",
      o.outages_per_hour, human_trace_time(o.outage_mean), o.brownouts_per_hour, human_trace_time(o.brownout_mean),
      o.brownout_rate_min, o.brownout_rate_max, to_string(o.brownout_delay_min), to_string(o.brownout_delay_max),
      o.brownout_loss_min * 100, o.brownout_loss_max * 100));
  if (g.events.empty()) g.notes.push_back("no outage or brownout was drawn");
  for (const auto& e : g.events) {
    if (e.kind == GeneratedEvent::Kind::outage)
      g.notes.push_back(
          fmt::format("  outage   at {} for {}", format_trace_time(e.start), format_trace_time(e.length)));
    else
      g.notes.push_back(fmt::format("  brownout at {} for {}: rate x{:.2f}, delay +{}, loss {}",
                                    format_trace_time(e.start), format_trace_time(e.length), e.rate_factor,
                                    to_string(e.extra_delay), to_string(e.loss)));
  }
  return g;
}

}  // namespace wanlab::replay
