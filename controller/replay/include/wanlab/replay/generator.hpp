#pragma once
// Synthetic traces of an inter-DC WAN link, anchored on measured figures.
//
// The model (one value per step of `step`, e.g. 1 s; traces/README.md has the rationale):
//   level     the measured median rate R and one-way delay D = RTT/2 of the region pair
//             (from a CSV such as traces/data/wan_pairs_skyplane_2022.csv);
//   diurnal   a load L(t) = (1 + cos(2 pi (tod(t) - peak) / period)) / 2 in [0, 1], 1 at the
//             busiest time of day: the rate loses diurnal_amplitude x R x L and the delay gains
//             diurnal_delay x L (queueing in busy hours);
//   noise     slow wander: the log of the rate follows an AR(1) process (a sampled
//             Ornstein-Uhlenbeck process) with standard deviation rate_noise and correlation
//             time noise_correlation; the delay gains max(0, y) with y a second AR(1) process
//             of standard deviation delay_noise (the propagation delay is a floor);
//   brownouts Poisson arrivals (brownouts_per_hour), exponential lengths (mean brownout_mean):
//             the rate drops to a factor in [brownout_rate_min, brownout_rate_max], the delay
//             gains [brownout_delay_min, brownout_delay_max] (a longer path) and loss is set
//             in [brownout_loss_min, brownout_loss_max] (uniform draws);
//   outages   Poisson arrivals (outages_per_hour), exponential lengths (mean outage_mean):
//             rate 0.
// Values are rounded (rate to 1 Mbit/s, at least 1 Mbit/s outside outages; delay to 10 us;
// loss to 0.001 %) and a step is written only when a value changes.
//
// Randomness: std::mt19937_64 (fully specified by the standard), two streams derived from
// the seed (one for noise, one for events, so the events do not move when a noise parameter
// changes), and hand-written uniform/normal/exponential draws (the standard distributions
// differ between standard libraries). Same seed and options, same trace.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "wanlab/replay/trace.hpp"

namespace wanlab::replay {

/// One measured region pair.
struct PairMeasurement {
  std::string region_a, region_b;  // as asked: a is the link's source
  Duration rtt{};
  Rate rate{};
  std::string file;      // where it came from
  std::size_t line = 0;  // 1-based, header = line 1
};

/// Finds a region pair ("aws:us-east-1", "aws:eu-west-1") in measurement CSV text with
/// columns region_a, region_b, rtt_ms_median, iperf3_64conn_gbps_median. Pairs are
/// symmetric: either order matches. Throws core::ConfigError (unknown region, pair not
/// measured, a row without RTT or rate, a malformed file).
PairMeasurement find_pair(std::string_view csv, const std::string& file, std::string_view a, std::string_view b);
PairMeasurement load_pair(const std::filesystem::path& csv_file, std::string_view a, std::string_view b);

struct GeneratorOptions {
  Duration duration = std::chrono::hours(1);
  Duration step = std::chrono::seconds(1);  // whole milliseconds
  std::uint64_t seed = 1;
  bool loop = false;  // mode=loop (period = duration) instead of hold

  double diurnal_amplitude = 0.15;  // fraction of the rate lost at the busiest time
  Duration diurnal_delay = std::chrono::microseconds(500);
  Duration diurnal_period = std::chrono::hours(24);  // shorter to compress a day
  double start_hour = 9;                             // time of day at the trace's start, in hours of a 24-hour day
  double peak_hour = 15;                             // busiest time of day

  double rate_noise = 0.03;  // standard deviation of log(rate)
  Duration delay_noise = std::chrono::microseconds(200);
  Duration noise_correlation = std::chrono::seconds(30);

  double outages_per_hour = 0.1;
  Duration outage_mean = std::chrono::seconds(30);
  double brownouts_per_hour = 0.5;
  Duration brownout_mean = std::chrono::seconds(120);
  double brownout_rate_min = 0.2, brownout_rate_max = 0.6;
  Duration brownout_delay_min = std::chrono::milliseconds(2), brownout_delay_max = std::chrono::milliseconds(15);
  double brownout_loss_min = 0.0005, brownout_loss_max = 0.01;  // fractions (0.05 % .. 1 %)
};

/// Checks the options; returns the problems (empty when fine), each naming the option.
std::vector<std::string> check(const GeneratorOptions& options);

struct GeneratedEvent {
  enum class Kind { outage, brownout };
  Kind kind = Kind::outage;
  Duration start{}, length{};
  double rate_factor = 0;  // brownout
  Duration extra_delay{};  // brownout
  Probability loss{};      // brownout
};

struct Generated {
  Trace trace;
  std::vector<GeneratedEvent> events;  // in time order, on the step grid
  std::vector<std::string> notes;      // what went in, for the file's header comment
};

/// Generates a trace for the link a -> b of `pair`. Throws std::invalid_argument when
/// check(options) finds problems.
Generated generate(const PairMeasurement& pair, const GeneratorOptions& options);

}  // namespace wanlab::replay
