#include "wanlab/shaping/link_model.hpp"

#include <algorithm>
#include <cmath>

namespace wanlab::shaping {

double LossModel::mean() const {
  const double pp = p.fraction(), rr = r.fraction();
  const double bad = pp + rr > 0 ? pp / (pp + rr) : 0.0;
  return (1 - bad) * loss_good.fraction() + bad * loss_bad.fraction();
}

double LossModel::sd_of_mean(std::uint64_t packets) const {
  if (packets == 0) return 0;
  const double m = mean();
  double per_packet = m * (1 - m);
  const double pp = p.fraction(), rr = r.fraction();
  if (pp + rr > 0) {
    const double bad = pp / (pp + rr), lambda = 1 - pp - rr;
    const double step = loss_bad.fraction() - loss_good.fraction();
    if (lambda < 1) per_packet += 2 * step * step * bad * (1 - bad) * lambda / (1 - lambda);
  }
  return std::sqrt(std::max(per_packet, 0.0) / static_cast<double>(packets));
}

LinkModel::LinkModel(const LinkModelParams& params, std::size_t capacity, std::uint64_t seed)
    : params_(params), capacity_(capacity), queue_(capacity), flight_(capacity), rng_(seed) {
  lost_.reserve(capacity);
}

void LinkModel::reserve(std::size_t capacity) {
  if (capacity <= capacity_) return;
  queue_.grow(capacity);
  flight_.grow(capacity);
  lost_.reserve(capacity);
  capacity_ = capacity;
}

Nanos LinkModel::serialization_end(std::uint32_t bits, Nanos start) const {
  if (params_.rate.bps == 0) return kNever;
  __extension__ using u128 = unsigned __int128;
  const auto ns = (static_cast<u128>(bits) * 1'000'000'000u + params_.rate.bps - 1) / params_.rate.bps;
  return start + static_cast<Nanos>(ns);
}

void LinkModel::start_service(Nanos start) {
  busy_ = true;
  service_start_ = start;
  service_bits_left_at_start_ = static_cast<double>(queue_.front().bytes) * 8.0;
  service_end_ = serialization_end(queue_.front().bytes * 8u, start);
}

void LinkModel::set_params(const LinkModelParams& params, Nanos now) {
  advance(now);
  if (params.jitter != params_.jitter) knot_t1_ = knot_t0_ - 1;  // new knots at the new amplitude
  if (busy_ && params.rate != params_.rate) {
    // The packet on the wire keeps the bits already sent at the old rate.
    const double sent = params_.rate.bps == 0
                            ? 0.0
                            : static_cast<double>(now - service_start_) * static_cast<double>(params_.rate.bps) / 1e9;
    const double left = std::max(0.0, service_bits_left_at_start_ - sent);
    service_start_ = now;
    service_bits_left_at_start_ = left;
    params_ = params;
    service_end_ = serialization_end(static_cast<std::uint32_t>(std::ceil(left)), now);
    return;
  }
  params_ = params;
}

LinkModel::Verdict LinkModel::arrive(std::uint32_t handle, std::uint32_t bytes, Nanos now, std::uint32_t segments) {
  if (segments == 0) segments = 1;
  counters_.packets_in += segments;
  counters_.bytes_in += bytes;
  const auto& q = params_.queue;
  const bool over = q.unit == QueueLimit::Unit::packets ? counters_.queued_packets + segments > q.value
                                                        : counters_.queued_bytes + bytes > q.value;
  // Beyond the configured limit, the model's own capacity (the engine's pool) bounds it.
  if (over || queue_.size() + flight_.size() + 1 > capacity_) {
    counters_.dropped_queue += segments;
    return Verdict::dropped_queue;
  }
  queue_.push({handle, bytes, segments, now});
  counters_.queued_packets += segments;
  counters_.queued_bytes += bytes;
  // An arrival stamped before the serializer finished its previous packet (frames are read
  // in batches) still waits for it.
  if (!busy_) start_service(std::max(now, last_service_end_));
  return Verdict::queued;
}

bool LinkModel::lose() {
  const auto& l = params_.loss;
  if (l.lossless() && !bad_state_) return false;
  std::uniform_int_distribution<std::uint32_t> u(0, Probability::kOne - 1);
  const bool lost = u(rng_) < (bad_state_ ? l.loss_bad.ppb : l.loss_good.ppb);
  if (bad_state_) {
    if (u(rng_) < l.r.ppb) bad_state_ = false;
  } else if (l.p.ppb > 0 && u(rng_) < l.p.ppb) {
    bad_state_ = true;
  }
  return lost;
}

bool LinkModel::lose(std::uint32_t segments) {
  bool lost = false;
  for (std::uint32_t i = 0; i < segments; ++i) lost |= lose();
  return lost;
}

Nanos LinkModel::knot_value() {
  const Nanos j = params_.jitter.count();
  return std::uniform_int_distribution<Nanos>(-j, j)(rng_);
}

Nanos LinkModel::propagation_delay(Nanos at) {
  const Nanos d = params_.delay.count();
  const Nanos j = params_.jitter.count();
  if (j <= 0) return d;
  const Nanos spacing = 4 * j;
  if (knot_t1_ < knot_t0_ || at > knot_t1_ + spacing || at < knot_t0_) {
    knot_t0_ = at;  // (re)start: first use, a long idle gap, or a jitter change
    knot_v0_ = knot_value();
    knot_t1_ = at + spacing;
    knot_v1_ = knot_value();
  }
  while (at >= knot_t1_) {
    knot_t0_ = knot_t1_;
    knot_v0_ = knot_v1_;
    knot_t1_ += spacing;
    knot_v1_ = knot_value();
  }
  const double f = static_cast<double>(at - knot_t0_) / static_cast<double>(spacing);
  const auto v = static_cast<Nanos>(static_cast<double>(knot_v0_) + f * static_cast<double>(knot_v1_ - knot_v0_));
  return std::max<Nanos>(0, d + v);
}

void LinkModel::advance(Nanos now) {
  while (busy_ && service_end_ <= now) {
    const Queued q = queue_.front();
    queue_.pop();
    counters_.queued_packets -= q.segments;
    counters_.queued_bytes -= q.bytes;
    const Nanos done = service_end_;
    last_service_end_ = done;
    busy_ = false;
    if (lose(q.segments)) {
      counters_.dropped_loss += q.segments;
      lost_.push_back(q.handle);
    } else {
      const Nanos release = std::max(done + propagation_delay(done), last_release_);
      last_release_ = release;
      flight_.push({q.handle, q.bytes, q.segments, release});
      counters_.in_flight_packets += q.segments;
    }
    if (!queue_.empty()) start_service(std::max(done, queue_.front().arrival));
  }
}

std::optional<std::uint32_t> LinkModel::release(Nanos now) {
  if (flight_.empty() || flight_.front().release > now) return std::nullopt;
  const Flying f = flight_.front();
  flight_.pop();
  counters_.in_flight_packets -= f.segments;
  counters_.packets_out += f.segments;
  counters_.bytes_out += f.bytes;
  return f.handle;
}

Nanos LinkModel::next_event() const {
  Nanos t = busy_ ? service_end_ : kNever;
  if (!flight_.empty()) t = std::min(t, flight_.front().release);
  return t;
}

}  // namespace wanlab::shaping
