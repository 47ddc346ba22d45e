#pragma once
// Strong unit types. Strings such as "68ms", "4Gbit" or "0.1%" are parsed only at the
// edge (config files, CLI flags, API requests); everything inside uses these types.
#include <chrono>
#include <compare>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace wanlab {

using Duration = std::chrono::nanoseconds;

/// A time on a clock (the simulator's virtual one, the arbiter's injected one, the packet
/// engine's steady one) or a span between two, in nanoseconds: the one integer time that
/// event queues, the arbiter and the engine compute with in their inner loops. Duration is
/// the same unit as a chrono type, at the edges (configuration, threads, sleeps).
using Nanos = std::int64_t;
/// No such time: an event that is not due, a flow that never sends.
inline constexpr Nanos kNever = std::numeric_limits<Nanos>::max();
/// Not yet: a time that has not come (a window not granted, a loss not seen). Clocks start
/// at 0, so it sorts before every time on them. (Where a type is better than a sentinel,
/// off the inner loops, a time that may not have come is a std::optional<Nanos>.)
inline constexpr Nanos kNotYet = -1;

/// A data rate in bit/s.
struct Rate {
  std::uint64_t bps = 0;
  constexpr std::uint64_t bytes_per_second() const { return bps / 8; }
  constexpr auto operator<=>(const Rate&) const = default;
};

/// A size in bytes.
struct Bytes {
  std::uint64_t value = 0;
  constexpr auto operator<=>(const Bytes&) const = default;
};

/// A probability in [0, 1], stored in parts per billion so it compares exactly.
struct Probability {
  std::uint32_t ppb = 0;
  static constexpr std::uint32_t kOne = 1'000'000'000;
  constexpr double fraction() const { return ppb / 1e9; }
  constexpr auto operator<=>(const Probability&) const = default;
};

/// A queue limit, in packets or in bytes.
struct QueueLimit {
  enum class Unit { packets, bytes };
  Unit unit = Unit::packets;
  std::uint64_t value = 0;
  constexpr auto operator<=>(const QueueLimit&) const = default;
};

/// Bursty loss (Gilbert-Elliott, netem's "loss gemodel p r 1-h 1-k"): a two-state Markov
/// chain stepped per packet. `p` = P(good -> bad), `r` = P(bad -> good), `bad` = the loss
/// rate in the bad state; the good state's loss rate is the link's own `loss`. Mean burst
/// length in the bad state 1/r packets; mean loss (with 0 in the good state) bad x p/(p+r).
struct LossBurst {
  Probability p{};
  Probability r{};
  Probability bad{Probability::kOne};
  constexpr auto operator<=>(const LossBurst&) const = default;
};

/// Result of parsing a unit string: a value or a reason (without the field name, which
/// the caller knows).
template <class T>
struct Parsed {
  T value{};
  std::string error;  // empty on success
  explicit operator bool() const { return error.empty(); }
};

// "100Mbit", "4.35Gbit", "10gbit/s", "500kbit", "1000bit". Decimal prefixes (k = 1000).
// Byte-per-second spellings ("Gbps", "MBps") are refused: tc reads "bps" as bytes/s and
// many people as bits/s, so we ask for the unambiguous form.
Parsed<Rate> parse_rate(std::string_view text);
// "68ms", "0.25ms", "250us", "1s", "0", "15ns".
Parsed<Duration> parse_duration(std::string_view text);
// "1500", "1500B", "64KB", "64KiB", "4MB", "1GiB".
Parsed<Bytes> parse_bytes(std::string_view text);
// "0.1%", "0%", "100%".
Parsed<Probability> parse_percent(std::string_view text);
// "1000p" / "1000pkt" / "1000packets" (packets) or a byte size as in parse_bytes.
Parsed<QueueLimit> parse_queue_limit(std::string_view text);
// "P R" or "P R BAD", percentages separated by spaces: "0.5% 25%", "1% 30% 50%" (BAD
// defaults to 100%). R must be above 0 (a bad state that is never left loses everything
// from then on).
Parsed<LossBurst> parse_loss_burst(std::string_view text);

// Canonical spellings, round-trippable through the parsers.
std::string to_string(Rate r);         // "4.35Gbit", "100Mbit", "1500bit"
std::string to_string(Duration d);     // "34.2ms", "250us", "1s", "0ms"
std::string to_string(Bytes b);        // "64000B" (exact)
std::string to_string(Probability p);  // "0.1%"
std::string to_string(QueueLimit q);   // "1000p" or "4000000B"
std::string to_string(const LossBurst& b);  // "0.5% 25% 100%"

/// Time to put `bytes` on a wire of rate `r` (rounded up to whole nanoseconds).
Duration serialization_time(Bytes bytes, Rate r);
/// Bytes that fit in `d` at rate `r`.
Bytes bytes_in(Duration d, Rate r);

}  // namespace wanlab
