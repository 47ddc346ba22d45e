// The userspace engine's link model on a virtual clock: serialization, delay, jitter
// without reordering, drop-tail limits, loss models, and in-place changes.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <vector>

#include "wanlab/shaping/link_model.hpp"

using namespace wanlab;
using namespace wanlab::shaping;
using namespace std::chrono_literals;

namespace {
constexpr Nanos kMs = 1'000'000;

LinkModelParams params(Rate rate, Duration delay, Duration jitter = {}, LossModel loss = {},
                       QueueLimit q = {QueueLimit::Unit::packets, 1000}) {
  return {rate, delay, jitter, loss, q};
}

// Drives the model like the engine: every event up to `end` at its own time, releases
// recorded with their time.
void step_to(LinkModel& m, Nanos end, std::map<std::uint32_t, Nanos>& out) {
  for (;;) {
    const Nanos t = m.next_event();
    if (t > end) break;
    m.advance(t);
    m.lost().clear();
    while (auto h = m.release(t)) out[*h] = t;
  }
  m.advance(end);
}

std::map<std::uint32_t, Nanos> run_until(LinkModel& m, Nanos end) {
  std::map<std::uint32_t, Nanos> out;
  step_to(m, end, out);
  return out;
}
}  // namespace

TEST_CASE("serialization is byte-accurate and back to back, then delay", "[unit][engine]") {
  LinkModel m(params(Rate{10'000'000}, 25ms), 100, 1);
  for (std::uint32_t i = 0; i < 10; ++i) CHECK(m.arrive(i, 1250, 0) == LinkModel::Verdict::queued);  // 1 ms each
  const auto rel = run_until(m, 1000 * kMs);
  REQUIRE(rel.size() == 10);
  for (std::uint32_t i = 0; i < 10; ++i) CHECK(rel.at(i) == (i + 1) * kMs + 25 * kMs);
  CHECK(m.counters().packets_out == 10);
  CHECK(m.counters().bytes_out == 12'500);
  CHECK(m.counters().queued_packets == 0);
}

TEST_CASE("an idle serializer starts at the arrival time", "[unit][engine]") {
  LinkModel m(params(Rate{1'000'000'000}, 10ms), 100, 1);
  m.arrive(0, 1500, 0);
  run_until(m, 5 * kMs);
  m.advance(7 * kMs);
  m.arrive(1, 1500, 7 * kMs);
  const auto rel = run_until(m, 100 * kMs);
  CHECK(rel.at(0) == 12'000 + 10 * kMs);
  CHECK(rel.at(1) == 7 * kMs + 12'000 + 10 * kMs);
}

TEST_CASE("drop-tail limits in packets and in bytes", "[unit][engine]") {
  SECTION("packets: the one on the serializer counts") {
    LinkModel m(params(Rate{1'000'000}, 0ms, {}, {}, {QueueLimit::Unit::packets, 5}), 100, 1);
    int dropped = 0;
    for (std::uint32_t i = 0; i < 10; ++i) dropped += m.arrive(i, 1000, 0) == LinkModel::Verdict::dropped_queue;
    CHECK(dropped == 5);
    CHECK(m.counters().dropped_queue == 5);
    CHECK(m.counters().queued_packets == 5);
    CHECK(m.counters().queued_bytes == 5000);
  }
  SECTION("bytes") {
    LinkModel m(params(Rate{1'000'000}, 0ms, {}, {}, {QueueLimit::Unit::bytes, 4500}), 100, 1);
    int dropped = 0;
    for (std::uint32_t i = 0; i < 10; ++i) dropped += m.arrive(i, 1000, 0) == LinkModel::Verdict::dropped_queue;
    CHECK(dropped == 6);
  }
  SECTION("the model's capacity bounds queue plus propagation") {
    LinkModel m(params(Rate{1'000'000'000}, 100ms), 8, 1);
    int dropped = 0;
    for (std::uint32_t i = 0; i < 20; ++i) {
      m.advance(i * kMs);
      dropped += m.arrive(i, 100, i * kMs) == LinkModel::Verdict::dropped_queue;
    }
    CHECK(dropped == 12);
  }
}

TEST_CASE("jitter stays within bounds, averages to the delay, and never reorders", "[unit][engine]") {
  LinkModel m(params(Rate{100'000'000}, 20ms, 5ms), 100'000, 42);
  const int n = 20'000;
  std::map<std::uint32_t, Nanos> rel;
  for (int i = 0; i < n; ++i) {
    const Nanos t = static_cast<Nanos>(i) * 200'000;  // one packet every 0.2 ms
    step_to(m, t, rel);
    m.arrive(static_cast<std::uint32_t>(i), 1000, t);
  }
  step_to(m, 10'000 * kMs, rel);
  REQUIRE(rel.size() == static_cast<std::size_t>(n));
  Nanos prev = 0;
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    const Nanos r = rel.at(static_cast<std::uint32_t>(i));
    CHECK(r >= prev);  // in order
    prev = r;
    const Nanos sent = static_cast<Nanos>(i) * 200'000 + 80'000;  // + serialization of 1000 B at 100 Mbit/s
    const Nanos d = r - sent;
    REQUIRE(d >= 15 * kMs);
    REQUIRE(d <= 25 * kMs);
    sum += static_cast<double>(d);
  }
  CHECK(sum / n / kMs == Approx(20.0).epsilon(0.03));
}

TEST_CASE("sparse packets (pings) see delays across the whole jitter range", "[unit][engine]") {
  LinkModel m(params(Rate{100'000'000}, 20ms, 5ms), 100, 3);
  std::map<std::uint32_t, Nanos> rel;
  const int n = 2000;
  for (int i = 0; i < n; ++i) {
    const Nanos t = static_cast<Nanos>(i) * 1000 * kMs;  // one per second
    step_to(m, t, rel);
    m.arrive(static_cast<std::uint32_t>(i), 100, t);
  }
  step_to(m, static_cast<Nanos>(n + 1) * 1000 * kMs, rel);
  double lo = 1e18, hi = 0, sum = 0;
  for (int i = 0; i < n; ++i) {
    const double d = static_cast<double>(rel.at(static_cast<std::uint32_t>(i)) - static_cast<Nanos>(i) * 1000 * kMs - 8000);
    lo = std::min(lo, d);
    hi = std::max(hi, d);
    sum += d;
  }
  CHECK(lo < 15.5 * kMs);
  CHECK(hi > 24.5 * kMs);
  CHECK(sum / n / kMs == Approx(20.0).epsilon(0.02));
}

TEST_CASE("Bernoulli loss matches its rate; Gilbert-Elliott its stationary mean and burst length",
          "[unit][engine]") {
  SECTION("Bernoulli 1%") {
    LinkModel m(params(Rate{10'000'000'000ULL}, 0ms, {}, LossModel::bernoulli(Probability{10'000'000})), 16, 7);
    const int n = 200'000;
    for (int i = 0; i < n; ++i) {
      const Nanos t = static_cast<Nanos>(i) * 10'000;
      m.advance(t);
      m.lost().clear();
      while (m.release(t)) {
      }
      m.arrive(0, 100, t);
    }
    run_until(m, kNever - 1);
    const double rate = static_cast<double>(m.counters().dropped_loss) / n;
    CHECK(rate == Approx(0.01).epsilon(0.1));  // 200k samples: sigma = 0.022% absolute
  }
  SECTION("Gilbert-Elliott: p=1%, r=20%, all lost in the bad state") {
    LossModel ge{Probability{10'000'000}, Probability{200'000'000}, {}, Probability{Probability::kOne}};
    CHECK(ge.mean() == Approx(0.01 / 0.21));
    LinkModel m(params(Rate{10'000'000'000ULL}, 0ms, {}, ge), 16, 9);
    const int n = 300'000;
    int lost = 0, bursts = 0;
    bool prev_lost = false;
    for (int i = 0; i < n; ++i) {
      const Nanos t = static_cast<Nanos>(i) * 10'000;
      m.advance(t);
      const bool l = !m.lost().empty();
      m.lost().clear();
      while (m.release(t)) {
      }
      if (l) {
        ++lost;
        if (!prev_lost) ++bursts;
      }
      prev_lost = l;
      m.arrive(0, 100, t);
    }
    CHECK(static_cast<double>(lost) / n == Approx(ge.mean()).epsilon(0.1));
    CHECK(static_cast<double>(lost) / bursts == Approx(1 / 0.2).epsilon(0.1));  // mean burst 1/r
  }
}

TEST_CASE("Gilbert-Elliott: the measured loss fraction spreads as sd_of_mean says, wider than binomial",
          "[unit][engine]") {
  // p = 5 %, r = 25 %, everything lost in the bad state (the kernel tier's bursty-loss
  // test): mean 1/6, sd over 2,000 packets 1.98 points against a binomial 0.83.
  LossModel ge{Probability{50'000'000}, Probability{250'000'000}, {}, Probability{Probability::kOne}};
  const std::uint64_t n = 2000;
  CHECK(ge.sd_of_mean(n) == Approx(0.0198).epsilon(0.01));
  CHECK(LossModel::bernoulli(Probability{100'000'000}).sd_of_mean(1000) == Approx(std::sqrt(0.09 / 1000)));
  CHECK(LossModel{}.sd_of_mean(n) == 0);
  // 500 consecutive blocks of 2,000 packets through the link model: the blocks' sd.
  LinkModel m(params(Rate{10'000'000'000ULL}, 0ms, {}, ge), 16, 11);
  const int blocks = 500;
  std::vector<double> fractions;
  int lost = 0;
  for (std::uint64_t i = 0; i < blocks * n; ++i) {
    const Nanos t = static_cast<Nanos>(i) * 10'000;
    m.advance(t);
    lost += static_cast<int>(m.lost().size());
    m.lost().clear();
    while (m.release(t)) {
    }
    if (i > 0 && i % n == 0) {
      fractions.push_back(static_cast<double>(lost) / n);
      lost = 0;
    }
    m.arrive(0, 100, t);
  }
  double mean = 0, var = 0;
  for (double f : fractions) mean += f / static_cast<double>(fractions.size());
  for (double f : fractions) var += (f - mean) * (f - mean) / static_cast<double>(fractions.size() - 1);
  INFO("blocks' mean " << mean << " sd " << std::sqrt(var) << ", predicted " << ge.sd_of_mean(n));
  CHECK(mean == Approx(ge.mean()).epsilon(0.05));
  // The sd of 500 blocks' fractions is itself within ~3 % (1 sigma) of the truth.
  CHECK(std::sqrt(var) == Approx(ge.sd_of_mean(n)).epsilon(0.15));
}

TEST_CASE("in-place changes keep queued and propagating packets", "[unit][engine]") {
  SECTION("a rate change applies to the rest of the packet on the wire") {
    LinkModel m(params(Rate{8'000'000}, 0ms), 100, 1);  // 1000 B = 1 ms
    m.arrive(0, 1000, 0);
    m.arrive(1, 1000, 0);
    m.set_params(params(Rate{4'000'000}, 0ms), kMs / 2);  // half sent; the other half at half rate: +1 ms
    const auto rel = run_until(m, 100 * kMs);
    CHECK(rel.at(0) == kMs / 2 + kMs);
    CHECK(rel.at(1) == kMs / 2 + kMs + 2 * kMs);
  }
  SECTION("an outage (rate 0) holds the queue, which drains when the rate returns") {
    LinkModel m(params(Rate{8'000'000}, 10ms, {}, {}, {QueueLimit::Unit::packets, 3}), 100, 1);
    m.set_params(params(Rate{0}, 10ms, {}, {}, {QueueLimit::Unit::packets, 3}), 0);
    int dropped = 0;
    for (std::uint32_t i = 0; i < 5; ++i) dropped += m.arrive(i, 1000, 0) == LinkModel::Verdict::dropped_queue;
    CHECK(dropped == 2);
    CHECK(m.next_event() == kNever);
    CHECK(run_until(m, 1000 * kMs).empty());
    m.set_params(params(Rate{8'000'000}, 10ms, {}, {}, {QueueLimit::Unit::packets, 3}), 1000 * kMs);
    const auto rel = run_until(m, 2000 * kMs);
    REQUIRE(rel.size() == 3);
    CHECK(rel.at(2) == 1000 * kMs + 3 * kMs + 10 * kMs);
  }
  SECTION("a delay change applies to packets leaving the serializer after it") {
    LinkModel m(params(Rate{8'000'000}, 50ms), 100, 1);
    m.arrive(0, 1000, 0);
    m.arrive(1, 1000, 0);
    m.arrive(2, 1000, 0);
    m.advance(kMs + kMs / 2);  // packet 0 is propagating with 50 ms
    m.set_params(params(Rate{8'000'000}, 5ms), kMs + kMs / 2);
    const auto rel = run_until(m, 1000 * kMs);
    CHECK(rel.at(0) == 51 * kMs);
    // Packets 1 and 2 would leave at 7 and 8 ms, but never before packet 0.
    CHECK(rel.at(1) == 51 * kMs);
    CHECK(rel.at(2) == 51 * kMs);
  }
}

TEST_CASE("capacity grows for a larger rate x delay, keeping what is held", "[unit][engine]") {
  LinkModel m(params(Rate{1'000'000'000}, 100ms), 8, 1);
  for (std::uint32_t i = 0; i < 8; ++i) CHECK(m.arrive(i, 100, i * 1000) == LinkModel::Verdict::queued);
  CHECK(m.arrive(8, 100, 9000) == LinkModel::Verdict::dropped_queue);
  m.reserve(64);
  CHECK(m.capacity() == 64);
  for (std::uint32_t i = 9; i < 20; ++i) CHECK(m.arrive(i, 100, i * 1000) == LinkModel::Verdict::queued);
  const auto rel = run_until(m, 1000 * kMs);
  CHECK(rel.size() == 19);
  Nanos prev = 0;
  for (const auto& [h, t] : rel) {
    if (h == 8) continue;
    CHECK(t >= prev);
    prev = t;
  }
}
