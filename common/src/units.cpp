#include "wanlab/common/units.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <fmt/format.h>
#include <limits>
#include <vector>

namespace wanlab {
__extension__ using u128 = unsigned __int128;
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Splits "4.35Gbit" into 4.35 and "gbit". The number is non-negative decimal, no exponent.
struct NumberAndSuffix {
  double number = 0;
  std::string suffix;
  std::string error;
};

NumberAndSuffix split(std::string_view text) {
  NumberAndSuffix out;
  text = trim(text);
  if (text.empty()) {
    out.error = "empty value";
    return out;
  }
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) {
    out.error = text.front() == '-' ? "must not be negative" : "does not start with a number";
    return out;
  }
  auto num = text.substr(0, i);
  auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), out.number);
  if (ec != std::errc() || ptr != num.data() + num.size() || !std::isfinite(out.number)) {
    out.error = fmt::format("'{}' is not a number", num);
    return out;
  }
  out.suffix = lower(trim(text.substr(i)));
  return out;
}

template <class T>
Parsed<T> fail(std::string_view text, std::string reason) {
  Parsed<T> p;
  p.error = fmt::format("'{}': {}", text, reason);
  return p;
}

// Renders value/unit with up to 3 decimals, trailing zeros trimmed ("4.35", "100").
std::string decimal(double v) {
  auto s = fmt::format("{:.3f}", v);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

Parsed<Rate> parse_rate(std::string_view text) {
  auto ns = split(text);
  if (!ns.error.empty()) return fail<Rate>(text, ns.error);
  std::string u = ns.suffix;
  if (u.size() > 2 && u.ends_with("/s")) u.resize(u.size() - 2);
  double mult = 0;
  if (u == "bit") mult = 1;
  if (u == "b") return fail<Rate>(text, "unit 'b' is ambiguous; write bit, kbit, Mbit, Gbit or Tbit");
  if (u == "kbit") mult = 1e3;
  if (u == "mbit") mult = 1e6;
  if (u == "gbit") mult = 1e9;
  if (u == "tbit") mult = 1e12;
  if (u.ends_with("bps"))
    return fail<Rate>(text, "'bps' is ambiguous (tc reads it as bytes/s); write bit, kbit, Mbit, Gbit or Tbit");
  if (u.empty()) return fail<Rate>(text, "missing unit; write e.g. \"100Mbit\" or \"4Gbit\"");
  if (mult == 0) return fail<Rate>(text, fmt::format("unknown rate unit '{}'; use bit, kbit, Mbit, Gbit or Tbit", ns.suffix));
  double bps = std::round(ns.number * mult);
  if (bps > 1e15) return fail<Rate>(text, "larger than 1000 Tbit");
  return {Rate{static_cast<std::uint64_t>(bps)}, {}};
}

Parsed<Duration> parse_duration(std::string_view text) {
  auto ns = split(text);
  if (!ns.error.empty()) return fail<Duration>(text, ns.error);
  double mult = 0;
  const auto& u = ns.suffix;
  if (u.empty()) {
    if (ns.number == 0) return {Duration{0}, {}};
    return fail<Duration>(text, "missing unit; write e.g. \"34ms\" or \"250us\"");
  }
  if (u == "ns") mult = 1;
  if (u == "us" || u == "µs") mult = 1e3;
  if (u == "ms") mult = 1e6;
  if (u == "s") mult = 1e9;
  if (mult == 0) return fail<Duration>(text, fmt::format("unknown time unit '{}'; use ns, us, ms or s", u));
  double v = std::round(ns.number * mult);
  if (v > 3600e9) return fail<Duration>(text, "longer than one hour");
  return {Duration{static_cast<std::int64_t>(v)}, {}};
}

Parsed<Bytes> parse_bytes(std::string_view text) {
  auto ns = split(text);
  if (!ns.error.empty()) return fail<Bytes>(text, ns.error);
  const auto& u = ns.suffix;
  double mult = 0;
  if (u.empty() || u == "b") mult = 1;
  if (u == "kb") mult = 1e3;
  if (u == "mb") mult = 1e6;
  if (u == "gb") mult = 1e9;
  if (u == "kib") mult = 1024.0;
  if (u == "mib") mult = 1024.0 * 1024;
  if (u == "gib") mult = 1024.0 * 1024 * 1024;
  if (mult == 0) return fail<Bytes>(text, fmt::format("unknown size unit '{}'; use B, KB, MB, GB, KiB, MiB or GiB", u));
  double v = std::round(ns.number * mult);
  if (v > 1e15) return fail<Bytes>(text, "too large");
  return {Bytes{static_cast<std::uint64_t>(v)}, {}};
}

Parsed<Probability> parse_percent(std::string_view text) {
  auto ns = split(text);
  if (!ns.error.empty()) return fail<Probability>(text, ns.error);
  if (ns.suffix != "%") return fail<Probability>(text, "write a percentage, e.g. \"0.1%\"");
  if (ns.number > 100) return fail<Probability>(text, "more than 100%");
  return {Probability{static_cast<std::uint32_t>(std::llround(ns.number * 1e7))}, {}};
}

Parsed<QueueLimit> parse_queue_limit(std::string_view text) {
  auto ns = split(text);
  if (!ns.error.empty()) return fail<QueueLimit>(text, ns.error);
  const auto& u = ns.suffix;
  if (u == "p" || u == "pkt" || u == "pkts" || u == "packets") {
    if (ns.number != std::floor(ns.number)) return fail<QueueLimit>(text, "a packet count must be whole");
    if (ns.number < 1 || ns.number > 1e9) return fail<QueueLimit>(text, "packet count must be between 1 and 1e9");
    return {QueueLimit{QueueLimit::Unit::packets, static_cast<std::uint64_t>(ns.number)}, {}};
  }
  if (u.empty()) return fail<QueueLimit>(text, "missing unit; write packets as \"1000p\" or bytes as \"4MB\"");
  auto b = parse_bytes(text);
  if (!b) return fail<QueueLimit>(text, "use packets (\"1000p\") or bytes (\"4MB\", \"512KiB\")");
  if (b.value.value < 1500) return fail<QueueLimit>(text, "a byte limit below one 1500-byte packet drops everything");
  return {QueueLimit{QueueLimit::Unit::bytes, b.value.value}, {}};
}

Parsed<LossBurst> parse_loss_burst(std::string_view text) {
  std::vector<std::string_view> words;
  for (std::size_t i = 0; i < text.size();) {
    while (i < text.size() && text[i] == ' ') ++i;
    const std::size_t j = std::min(text.find(' ', i), text.size());
    if (j > i) words.push_back(text.substr(i, j - i));
    i = j;
  }
  if (words.size() < 2 || words.size() > 3)
    return fail<LossBurst>(text, "write \"P R\" or \"P R BAD\": percentages for good->bad, bad->good and the loss "
                                 "in the bad state, e.g. \"0.5% 25%\"");
  LossBurst b;
  Probability* fields[] = {&b.p, &b.r, &b.bad};
  const char* names[] = {"P (good->bad)", "R (bad->good)", "BAD (loss in the bad state)"};
  for (std::size_t i = 0; i < words.size(); ++i) {
    auto v = parse_percent(words[i]);
    if (!v) return fail<LossBurst>(text, fmt::format("{}: {}", names[i], v.error));
    *fields[i] = v.value;
  }
  if (b.r.ppb == 0) return fail<LossBurst>(text, "R (bad->good) must be above 0%: the bad state would never end");
  return {b, {}};
}

std::string to_string(const LossBurst& b) {
  return fmt::format("{} {} {}", to_string(b.p), to_string(b.r), to_string(b.bad));
}

std::string to_string(Rate r) {
  const double b = static_cast<double>(r.bps);
  if (r.bps >= 1'000'000'000'000ULL && r.bps % 1'000'000'000ULL == 0) return decimal(b / 1e12) + "Tbit";
  if (r.bps >= 1'000'000'000ULL && r.bps % 1'000'000ULL == 0) return decimal(b / 1e9) + "Gbit";
  if (r.bps >= 1'000'000ULL && r.bps % 1'000ULL == 0) return decimal(b / 1e6) + "Mbit";
  if (r.bps >= 1'000ULL && r.bps % 1ULL == 0 && r.bps % 1000 == 0) return decimal(b / 1e3) + "kbit";
  return fmt::format("{}bit", r.bps);
}

std::string to_string(Duration d) {
  const auto n = d.count();
  if (n == 0) return "0ms";
  if (n % 1'000'000'000 == 0) return fmt::format("{}s", n / 1'000'000'000);
  if (n >= 1'000'000 && n % 1'000 == 0) return decimal(static_cast<double>(n) / 1e6) + "ms";
  if (n >= 1'000 && n % 1 == 0 && n % 1000 == 0) return fmt::format("{}us", n / 1000);
  if (n >= 1'000) return decimal(static_cast<double>(n) / 1e3) + "us";
  return fmt::format("{}ns", n);
}

std::string to_string(Bytes b) { return fmt::format("{}B", b.value); }

std::string to_string(Probability p) {
  // Percent = ppb / 1e7: all 7 decimals are kept, so small losses ("0.0001%") survive a
  // round trip through parse_percent.
  auto s = fmt::format("{}.{:07}", p.ppb / 10'000'000, p.ppb % 10'000'000);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s + "%";
}

std::string to_string(QueueLimit q) {
  return q.unit == QueueLimit::Unit::packets ? fmt::format("{}p", q.value) : fmt::format("{}B", q.value);
}

Duration serialization_time(Bytes bytes, Rate r) {
  if (r.bps == 0) return Duration::max();
  // ns = bytes * 8 * 1e9 / bps, in 128-bit to avoid overflow, rounded up.
  u128 num = static_cast<u128>(bytes.value) * 8u * 1'000'000'000u;
  auto ns = (num + r.bps - 1) / r.bps;
  return Duration{static_cast<std::int64_t>(ns)};
}

Bytes bytes_in(Duration d, Rate r) {
  if (d.count() <= 0) return Bytes{0};
  u128 num = static_cast<u128>(d.count()) * r.bps;
  return Bytes{static_cast<std::uint64_t>(num / 8u / 1'000'000'000u)};
}

}  // namespace wanlab
