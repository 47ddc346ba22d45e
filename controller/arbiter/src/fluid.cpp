#include "wanlab/arbiter/fluid.hpp"

#include <algorithm>
#include <cmath>
#include <map>

namespace wanlab::arbiter {

FluidResult run_fluid(Arbiter& arb, const std::vector<FluidTransfer>& transfers, Nanos delay,
                      const std::vector<CapacityStep>& steps, Nanos horizon, Nanos sample) {
  const std::size_t n = transfers.size();
  FluidResult r{std::vector<TransferId>(n, 0), std::vector<Nanos>(n, -1)};
  std::vector<double> sent(n, 0.0);
  std::vector<bool> asked(n, false);
  std::vector<Nanos> finished(n, -1);  // last byte left
  std::map<TransferId, std::size_t> index;
  std::vector<CapacityStep> pending_steps = steps;
  std::sort(pending_steps.begin(), pending_steps.end(), [](const auto& a, const auto& b) { return a.at < b.at; });
  std::size_t next_step = 0;

  const auto sending = [&](std::size_t i, Nanos now) {
    if (!asked[i] || finished[i] >= 0 || now < transfers[i].silent_until) return false;
    return arb.transfer(r.ids[i]).state == State::granted || arb.transfer(r.ids[i]).state == State::drained;
  };

  Nanos now = 0;
  for (int guard = 0; guard < 10'000'000; ++guard) {
    // Events at `now`: capacity steps, arrivals, deliveries, arbiter deadlines.
    while (next_step < pending_steps.size() && pending_steps[next_step].at <= now) {
      const auto& s = pending_steps[next_step++];
      arb.set_capacity(s.link, s.rate_bps, now);
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (!asked[i] && transfers[i].ready <= now) {
        r.ids[i] = arb.request(transfers[i].spec, now);
        index[r.ids[i]] = i;
        asked[i] = true;
      }
      if (finished[i] >= 0 && r.delivered[i] < 0 && finished[i] + delay <= now) {
        r.delivered[i] = now;
        arb.complete(r.ids[i], now);
      }
    }
    arb.advance(now);
    (void)arb.take_events();
    if (std::all_of(r.delivered.begin(), r.delivered.end(), [](Nanos d) { return d >= 0; })) break;

    // Rates now: the link's capacity shared equally among its sending transfers.
    std::map<LinkId, int> senders;
    for (std::size_t i = 0; i < n; ++i)
      if (sending(i, now)) ++senders[transfers[i].spec.link];
    std::vector<double> rate(n, 0.0);  // bytes per ns
    for (std::size_t i = 0; i < n; ++i)
      if (sending(i, now)) rate[i] = arb.capacity(transfers[i].spec.link) / 8e9 / senders[transfers[i].spec.link];

    // The next event.
    Nanos next = horizon;
    if (next_step < pending_steps.size()) next = std::min(next, pending_steps[next_step].at);
    if (const auto d = arb.next_deadline()) next = std::min(next, std::max(*d, now + 1));
    for (std::size_t i = 0; i < n; ++i) {
      if (!asked[i]) next = std::min(next, transfers[i].ready);
      if (finished[i] >= 0 && r.delivered[i] < 0) next = std::min(next, finished[i] + delay);
      if (asked[i] && finished[i] < 0 && now < transfers[i].silent_until && transfers[i].silent_until != kNever)
        next = std::min(next, transfers[i].silent_until);
      if (rate[i] > 0) {
        const double left = static_cast<double>(transfers[i].spec.bytes) - sent[i];
        next = std::min(next, now + std::max<Nanos>(1, static_cast<Nanos>(std::ceil(left / rate[i]))));
      }
    }
    if (sample > 0 && std::any_of(rate.begin(), rate.end(), [](double x) { return x > 0; }))
      next = std::min(next, now + sample);
    if (next >= horizon) break;
    // Move the bytes.
    for (std::size_t i = 0; i < n; ++i) {
      if (rate[i] <= 0) continue;
      const double bytes = static_cast<double>(transfers[i].spec.bytes);
      sent[i] = std::min(bytes, sent[i] + rate[i] * static_cast<double>(next - now));
      if (bytes - sent[i] < 0.5) {
        sent[i] = bytes;
        finished[i] = next;
      }
      arb.progress(r.ids[i], static_cast<std::uint64_t>(sent[i]), next);
    }
    now = next;
  }
  return r;
}

}  // namespace wanlab::arbiter
