// Unit strings parsed at the edge: exact values, refusals with their reasons, canonical
// spellings that parse back to the same value.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include "wanlab/common/units.hpp"

using namespace wanlab;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {
template <class T>
T ok(const Parsed<T>& p) {
  INFO(p.error);
  REQUIRE(p);
  return p.value;
}
template <class T>
std::string error(const Parsed<T>& p) {
  REQUIRE_FALSE(p);
  return p.error;
}
}  // namespace

TEST_CASE("parse_rate: decimal prefixes, exact bit/s", "[unit][units]") {
  CHECK(ok(parse_rate("4.35Gbit")).bps == 4'350'000'000ULL);
  CHECK(ok(parse_rate("100Mbit")).bps == 100'000'000ULL);
  CHECK(ok(parse_rate("10gbit/s")).bps == 10'000'000'000ULL);
  CHECK(ok(parse_rate("500kbit")).bps == 500'000ULL);
  CHECK(ok(parse_rate("1000bit")).bps == 1'000ULL);
  CHECK(ok(parse_rate("1Tbit")).bps == 1'000'000'000'000ULL);
  CHECK(ok(parse_rate(" 2.5 Gbit ")).bps == 2'500'000'000ULL);
  CHECK(ok(parse_rate("0bit")).bps == 0);
  CHECK(ok(parse_rate("4.35Gbit")).bytes_per_second() == 543'750'000ULL);
}

TEST_CASE("parse_rate: refusals say why", "[unit][units]") {
  CHECK(error(parse_rate("-4Gbit")) == "'-4Gbit': must not be negative");
  CHECK_THAT(error(parse_rate("4")), StartsWith("'4': missing unit"));
  CHECK_THAT(error(parse_rate("4Gbps")), StartsWith("'4Gbps': 'bps' is ambiguous"));
  CHECK_THAT(error(parse_rate("4MBps")), Contains("'bps' is ambiguous"));
  CHECK_THAT(error(parse_rate("4b")), Contains("unit 'b' is ambiguous"));
  CHECK_THAT(error(parse_rate("4furlongs")), Contains("unknown rate unit 'furlongs'"));
  CHECK_THAT(error(parse_rate("")), Contains("empty value"));
  CHECK_THAT(error(parse_rate("fast")), Contains("does not start with a number"));
  CHECK_THAT(error(parse_rate("1.2.3Gbit")), Contains("is not a number"));
  CHECK_THAT(error(parse_rate("2000Tbit")), Contains("larger than 1000 Tbit"));
}

TEST_CASE("parse_duration: exact nanoseconds", "[unit][units]") {
  CHECK(ok(parse_duration("68.4ms")) == 68'400'000ns);
  CHECK(ok(parse_duration("0.25ms")) == 250us);
  CHECK(ok(parse_duration("250us")) == 250us);
  CHECK(ok(parse_duration("3µs")) == 3us);
  CHECK(ok(parse_duration("1s")) == 1s);
  CHECK(ok(parse_duration("15ns")) == 15ns);
  CHECK(ok(parse_duration("0")) == 0ns);
  CHECK(ok(parse_duration("0ms")) == 0ns);
  CHECK(ok(parse_duration("3600s")) == 3600s);
}

TEST_CASE("parse_duration: refusals say why", "[unit][units]") {
  CHECK(error(parse_duration("-1ms")) == "'-1ms': must not be negative");
  CHECK_THAT(error(parse_duration("5")), StartsWith("'5': missing unit"));
  CHECK_THAT(error(parse_duration("5min")), Contains("unknown time unit 'min'"));
  CHECK_THAT(error(parse_duration("3601s")), Contains("longer than one hour"));
  CHECK_THAT(error(parse_duration("ms")), Contains("does not start with a number"));
}

TEST_CASE("parse_bytes: decimal and binary prefixes", "[unit][units]") {
  CHECK(ok(parse_bytes("1500")).value == 1500);
  CHECK(ok(parse_bytes("1500B")).value == 1500);
  CHECK(ok(parse_bytes("64KB")).value == 64'000);
  CHECK(ok(parse_bytes("64KiB")).value == 65'536);
  CHECK(ok(parse_bytes("4MB")).value == 4'000'000);
  CHECK(ok(parse_bytes("2MiB")).value == 2'097'152);
  CHECK(ok(parse_bytes("1GiB")).value == 1'073'741'824ULL);
  CHECK_THAT(error(parse_bytes("4XB")), Contains("unknown size unit 'xb'"));
  CHECK(error(parse_bytes("-1B")) == "'-1B': must not be negative");
  CHECK_THAT(error(parse_bytes("2PB")), Contains("unknown size unit"));
}

TEST_CASE("parse_percent: parts per billion", "[unit][units]") {
  CHECK(ok(parse_percent("0.1%")).ppb == 1'000'000);
  CHECK(ok(parse_percent("0%")).ppb == 0);
  CHECK(ok(parse_percent("100%")).ppb == Probability::kOne);
  CHECK(ok(parse_percent("0.0001%")).ppb == 1'000);
  CHECK(ok(parse_percent("2.5%")).fraction() == Approx(0.025));
  CHECK_THAT(error(parse_percent("101%")), Contains("more than 100%"));
  CHECK_THAT(error(parse_percent("0.1")), Contains("write a percentage"));
  CHECK(error(parse_percent("-1%")) == "'-1%': must not be negative");
}

TEST_CASE("parse_loss_burst: P R [BAD]", "[unit][units]") {
  const auto b = ok(parse_loss_burst("0.5%  25%"));
  CHECK(b.p.ppb == 5'000'000);
  CHECK(b.r.ppb == 250'000'000);
  CHECK(b.bad.ppb == Probability::kOne);
  CHECK(ok(parse_loss_burst("1% 30% 50%")).bad.ppb == 500'000'000);
  CHECK(to_string(ok(parse_loss_burst("1% 30% 50%"))) == "1% 30% 50%");
  CHECK_FALSE(parse_loss_burst(""));
  CHECK_FALSE(parse_loss_burst("1% 2% 3% 4%"));
  CHECK_THAT(parse_loss_burst("1% 0%").error, Catch::Contains("never end"));
  CHECK_THAT(parse_loss_burst("1 2%").error, Catch::Contains("P (good->bad)"));
}

TEST_CASE("parse_queue_limit: packets or bytes", "[unit][units]") {
  auto q = ok(parse_queue_limit("1000p"));
  CHECK(q.unit == QueueLimit::Unit::packets);
  CHECK(q.value == 1000);
  CHECK(ok(parse_queue_limit("1000pkt")) == QueueLimit{QueueLimit::Unit::packets, 1000});
  CHECK(ok(parse_queue_limit("1000packets")) == QueueLimit{QueueLimit::Unit::packets, 1000});
  CHECK(ok(parse_queue_limit("4MB")) == QueueLimit{QueueLimit::Unit::bytes, 4'000'000});
  CHECK(ok(parse_queue_limit("512KiB")) == QueueLimit{QueueLimit::Unit::bytes, 524'288});
  CHECK_THAT(error(parse_queue_limit("1000")), Contains("missing unit"));
  CHECK_THAT(error(parse_queue_limit("1.5p")), Contains("must be whole"));
  CHECK_THAT(error(parse_queue_limit("0p")), Contains("between 1 and 1e9"));
  CHECK_THAT(error(parse_queue_limit("1000B")), Contains("below one 1500-byte packet"));
  CHECK_THAT(error(parse_queue_limit("4XB")), Contains("use packets"));
}

TEST_CASE("to_string: canonical spellings", "[unit][units]") {
  CHECK(to_string(Rate{4'350'000'000ULL}) == "4.35Gbit");
  CHECK(to_string(Rate{100'000'000ULL}) == "100Mbit");
  CHECK(to_string(Rate{2'000'000'000'000ULL}) == "2Tbit");
  CHECK(to_string(Rate{1'234'000}) == "1.234Mbit");
  CHECK(to_string(Rate{1500}) == "1500bit");
  CHECK(to_string(Rate{500'000}) == "500kbit");
  CHECK(to_string(Rate{0}) == "0bit");
  CHECK(to_string(Duration{34'200'000}) == "34.2ms");
  CHECK(to_string(Duration{250'000}) == "250us");
  CHECK(to_string(Duration{1'500}) == "1.5us");
  CHECK(to_string(Duration{1'000'000'000}) == "1s");
  CHECK(to_string(Duration{1'500'000'000}) == "1500ms");
  CHECK(to_string(Duration{15}) == "15ns");
  CHECK(to_string(Duration{0}) == "0ms");
  CHECK(to_string(Bytes{64'000}) == "64000B");
  CHECK(to_string(Probability{1'000'000}) == "0.1%");
  CHECK(to_string(Probability{0}) == "0%");
  CHECK(to_string(Probability{Probability::kOne}) == "100%");
  CHECK(to_string(Probability{1'000}) == "0.0001%");
  CHECK(to_string(Probability{1}) == "0.0000001%");
  CHECK(to_string(QueueLimit{QueueLimit::Unit::packets, 1000}) == "1000p");
  CHECK(to_string(QueueLimit{QueueLimit::Unit::bytes, 4'000'000}) == "4000000B");
}

TEST_CASE("to_string round-trips through the parsers", "[unit][units]") {
  for (std::uint64_t bps : {0ULL, 1ULL, 999ULL, 1'000ULL, 1'500ULL, 4'350'000'000ULL, 4'351'234'000ULL, 1'234'567ULL,
                            1'000'000'000'000ULL, 1'000'500'000'000ULL, 999'999'999'999'999ULL}) {
    INFO(bps);
    CHECK(ok(parse_rate(to_string(Rate{bps}))).bps == bps);
  }
  for (std::int64_t ns : {0LL, 1LL, 999LL, 1'000LL, 1'001LL, 12'345LL, 250'000LL, 1'000'001LL, 1'234'567LL,
                          34'200'000LL, 68'400'001LL, 1'000'000'000LL, 1'500'000'000LL, 3'599'999'999'999LL}) {
    INFO(ns);
    CHECK(ok(parse_duration(to_string(Duration{ns}))) == Duration{ns});
  }
  for (std::uint32_t ppb : {0U, 1U, 999U, 1'000U, 10'000U, 1'000'000U, 123'456'789U, 999'999'999U, Probability::kOne}) {
    INFO(ppb);
    CHECK(ok(parse_percent(to_string(Probability{ppb}))).ppb == ppb);
  }
  for (std::uint64_t b : {0ULL, 1ULL, 65'536ULL, 4'000'000ULL}) CHECK(ok(parse_bytes(to_string(Bytes{b}))).value == b);
  for (auto q : {QueueLimit{QueueLimit::Unit::packets, 1}, QueueLimit{QueueLimit::Unit::packets, 36'849},
                 QueueLimit{QueueLimit::Unit::bytes, 1'500}, QueueLimit{QueueLimit::Unit::bytes, 4'194'304}})
    CHECK(ok(parse_queue_limit(to_string(q))) == q);
}

TEST_CASE("serialization_time and bytes_in", "[unit][units]") {
  CHECK(serialization_time(Bytes{1500}, Rate{1'000'000'000}) == 12us);
  CHECK(serialization_time(Bytes{1}, Rate{3}) == Duration{2'666'666'667});  // rounded up
  CHECK(serialization_time(Bytes{0}, Rate{1'000}) == 0ns);
  CHECK(serialization_time(Bytes{1500}, Rate{0}) == Duration::max());
  // 128-bit intermediate: 1 TB at 8 Gbit/s (8e21 overflows 64 bits).
  CHECK(serialization_time(Bytes{1'000'000'000'000ULL}, Rate{8'000'000'000ULL}) == 1000s);
  CHECK(bytes_in(1ms, Rate{1'000'000'000}) == Bytes{125'000});
  CHECK(bytes_in(1s, Rate{4'350'000'000ULL}) == Bytes{543'750'000});
  CHECK(bytes_in(Duration{-5}, Rate{1'000'000'000}) == Bytes{0});
  CHECK(bytes_in(3600s, Rate{1'000'000'000'000'000ULL}) == Bytes{450'000'000'000'000'000ULL});
  CHECK(bytes_in(serialization_time(Bytes{1500}, Rate{4'350'000'000ULL}), Rate{4'350'000'000ULL}) == Bytes{1500});
}
