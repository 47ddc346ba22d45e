#pragma once
// The simulator's TCP: what one (sender, receiver) pair's connections do with their
// window. Pure arithmetic on a virtual clock; the pair's tp x connections connections are
// alike, so one state stands for each of them.
//
//   - TcpWindow (SimOptions::Bursts::paced): Linux's CUBIC sender as far as the model needs
//     it: a congestion window that grows in slow start by what is ACKed while at least half
//     of it is in use (the rule for an application-limited sender), until HyStart ends it
//     as Linux and ns-3 do: by its delay test (the least RTT of a round's first 8 segments
//     against the least RTT the connection has seen) or its ACK train (the round's ACKs
//     keep coming for longer than that least RTT); then, while it is full, by CUBIC's
//     window function (tcp_cubic.c's bictcp_update: towards W_max + C (t - K)^3, at least
//     the TCP-friendly half segment per round trip); cut to kCubicBeta of itself once per
//     round trip on a loss (with fast convergence); a smoothed RTT; Linux's pacing rate.
//     What it keeps in flight is also held below the run's TCP window (the sender's
//     buffer), which does not cap the congestion window itself.
//   - SlowStartWindow (SimOptions::slow_start with the other burst models): a window that
//     starts at the initial window and doubles every RTT while the pair sends.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "wanlab/sim/flow_network.hpp"
#include "wanlab/sim/simulator.hpp"

namespace wanlab::sim {

inline constexpr double kCubicBeta = 0.7;  // CUBIC's window after a loss, as a fraction of before
/// CUBIC's TCP-friendly growth in congestion avoidance, segments per window ACKed:
/// 3 beta' / (2 - beta') with beta' = 1 - kCubicBeta.
inline constexpr double kRenoFriendly = 3 * (1 - kCubicBeta) / (2 - (1 - kCubicBeta));
inline constexpr double kCubicC = 0.4;  // CUBIC's C (bic_scale 41 / 1024 x 10): segments per second cubed
inline constexpr double kHystartLowWindow = 16;  // segments: HyStart waits for this window
inline constexpr double kHystartMinSamples = 8;  // segments: a round's RTT sample is the least of its first 8
inline constexpr Nanos kHystartAckDelta = 2'000'000;  // HyStart's ACK train: ACKs at most this far apart

/// One connection's congestion control (bytes and ns).
struct TcpWindow {
  double cwnd = 0;  // congestion window; 0: the pair has not sent yet
  double limit = std::numeric_limits<double>::infinity();  // the most in flight: the run's TCP window
  double ssthresh = std::numeric_limits<double>::infinity();  // infinity: in its first slow start
  double inflight = 0;      // sent, not yet ACKed or found lost
  double srtt = 0;          // smoothed RTT
  Nanos recovery_until = kNotYet;  // losses before then are the loss event already counted
  double resent = 0;        // lost to a full queue and sent again
  Nanos round_mark = kNotYet;      // HyStart: ACKs of what was sent from here on start a new round
  double round_acked = 0;          // HyStart: the round's segments sampled so far (bytes)
  double round_min = std::numeric_limits<double>::infinity();  // and their least RTT
  double delay_min = std::numeric_limits<double>::infinity();  // the least RTT seen yet
  Nanos round_start = kNotYet;     // HyStart's ACK train: when the round's first ACKs came back
  Nanos train_last = kNotYet;      // and the last ACKs of the train since (gaps of at most 2 ms)
  // CUBIC in congestion avoidance (tcp_cubic.c's struct bictcp):
  Nanos epoch_start = kNotYet;  // the epoch's first ACK (kNotYet: none since the last loss)
  double w_max = 0;             // last_max_cwnd: the window before the last loss (0: none yet)
  double origin = 0;            // bic_origin_point
  double k_s = 0;               // bic_K, seconds
  double reno = 0;              // tcp_cwnd: the TCP-friendly window estimate
  Nanos last_ack = kNotYet;     // the last ACKs taken in (an idle gap moves the epoch on)

  /// The first message of the pair: the initial window, `window` as the most a connection
  /// keeps in flight (its buffer), the path's RTT as the first SRTT. Later ones: nothing.
  void start(double window, double initial_window, Nanos path_rtt);
  /// Bytes it may still put in flight: below the congestion window and the buffer.
  double room() const { return std::min(cwnd, limit) - inflight; }
  /// Linux's pacing rate (bytes per ns): ratio x cwnd / SRTT, the ratio 2 in slow start
  /// below half the threshold, else `ca_ratio` (tcp_pacing_ca_ratio).
  double pacing_rate(double ca_ratio) const;
  /// ACKs of `acked` bytes: sent at `sent`, back from `first_back` (the first of them, as
  /// the link sent the bytes) to `back` (the RTT sample is back - sent), taken in at `at`.
  /// Slow start grows the window by what was ACKed while at least half of it was in use,
  /// until HyStart (tcp_cubic.c's hystart_update, ns-3's TcpCubic::HystartUpdate; from
  /// kHystartLowWindow segments on) ends it: the least RTT of a round's first
  /// kHystartMinSamples segments is more than delay_min / 8 (4 to 16 ms) above delay_min,
  /// the least RTT the connection has seen (a queue that stood when the connection began is
  /// in delay_min and ends no slow start), or the round's ACKs keep coming (gaps of at most
  /// kHystartAckDelta) for longer than delay_min (a paced sender's threshold). The
  /// buffer does not cap it (Linux's does not either): a sender its buffer holds to W in
  /// flight grows it in slow start to 2 W (tcp_is_cwnd_limited), and paces at ratio x that.
  /// In congestion avoidance, while full, CUBIC's window function: 1 segment per `cnt`
  /// segments ACKed, cnt = cwnd / (target - cwnd) towards target = origin + C (t - K)^3
  /// (t: since the epoch's first ACK, plus delay_min; origin and K from the window before
  /// the last loss), at most 1 per 2, at least the TCP-friendly estimate's pace; an idle
  /// gap (no ACK for longer than an SRTT) does not count in t (Linux's CA_EVENT_TX_START).
  void on_ack(double acked, Nanos at, Nanos sent, Nanos back, Nanos first_back);
  /// Bytes lost to a full queue at `now`: CUBIC's cut, once per round trip (true if this
  /// loss cut the window).
  bool on_loss(Nanos now);
  /// on_ack()'s growth in congestion avoidance, the window full (after this ACK's RTT
  /// sample).
  void cubic_grow(double acked, Nanos at);
};

/// Slow start for flows shared max-min (SimOptions::slow_start): the pair's window,
/// kept between messages.
struct SlowStartWindow {
  double cwnd = 0;  // 0: the pair has not sent yet
  Nanos last_active = kNotYet;

  /// A message starts at `now` on a path of `rtt`: the window it starts with (at most
  /// `window`). The pair's window starts over at `initial_window` the first time, and with
  /// `after_idle` (the scenario's tcp_slow_start_after_idle) when it was idle longer than
  /// an RTO, max(200 ms, RTT).
  double begin(Nanos now, Nanos rtt, double initial_window, double window, bool after_idle);
  /// The window one RTT later.
  static double next(double cwnd, double window) { return std::min(window, 2 * cwnd); }
  /// The message whose window reached `cwnd` is done at `now`: the pair keeps it.
  void end(double reached, Nanos now) {
    cwnd = reached;
    last_active = now;
  }
};

// Inline: the paced model asks for rates and takes ACKs in at every cut, per message.
inline void TcpWindow::start(double window, double initial_window, Nanos path_rtt) {
  if (cwnd > 0) return;
  limit = window;
  cwnd = initial_window;
  srtt = static_cast<double>(path_rtt);
}

inline double TcpWindow::pacing_rate(double ca_ratio) const {
  const double ratio = cwnd < ssthresh / 2 ? 2.0 : ca_ratio;
  return ratio * cwnd / std::max(1.0, srtt);
}

inline void TcpWindow::on_ack(double acked, Nanos at, Nanos sent, Nanos back, Nanos first_back) {
  const double used = inflight;  // in flight when these were ACKed, them included
  if (epoch_start != kNotYet && last_ack != kNotYet && static_cast<double>(at - last_ack) > srtt)
    epoch_start += at - last_ack;  // idle: the epoch's clock stood still
  inflight = std::max(0.0, inflight - acked);
  const double sample = static_cast<double>(back - sent);
  srtt = srtt > 0 ? 0.875 * srtt + 0.125 * sample : sample;
  delay_min = std::min(delay_min, sample);
  if (sent >= round_mark) {  // a new round: its first segments are HyStart's sample
    round_mark = at;
    round_acked = 0;
    round_min = std::numeric_limits<double>::infinity();
    round_start = train_last = back;
  }
  if (cwnd < ssthresh) {
    // HyStart's two tests, on the window before these ACKs grow it (as in Linux, where
    // the congestion control sees the ACKs before it grows the window).
    if (cwnd >= kHystartLowWindow * kMss) {
      if (round_acked < kHystartMinSamples * kMss) {
        round_min = std::min(round_min, sample);
        round_acked += acked;
      }
      if (round_acked >= kHystartMinSamples * kMss && round_min > delay_min + std::clamp(delay_min / 8, 4e6, 16e6))
        ssthresh = cwnd;
      // The ACK train: the window holds more than the path does at the rate the ACKs
      // come back.
      if (first_back - train_last <= kHystartAckDelta) {
        train_last = back;
        if (static_cast<double>(back - round_start) > delay_min) ssthresh = cwnd;
      }
    }
    if (cwnd < ssthresh && 2 * used >= cwnd) cwnd += acked;
  } else if (used >= cwnd - kMss) {
    cubic_grow(acked, at);
  }
  last_ack = at;
}

inline void TcpWindow::cubic_grow(double acked, Nanos at) {
  if (epoch_start == kNotYet) {
    epoch_start = at;
    reno = cwnd;
    if (w_max <= cwnd) {
      k_s = 0;
      origin = cwnd;
    } else {
      k_s = std::cbrt((w_max - cwnd) / kMss / kCubicC);
      origin = w_max;
    }
  }
  // (delay_min is finite: on_ack() has taken this ACK's sample.)
  const double t = (static_cast<double>(at - epoch_start) + delay_min) / 1e9;
  const double target = origin + kCubicC * std::pow(t - k_s, 3) * kMss;
  // Segments ACKed per segment of growth.
  double cnt = target > cwnd ? cwnd / (target - cwnd) : 100 * cwnd / kMss;
  reno += kRenoFriendly * kMss * acked / cwnd;
  if (reno > cwnd) cnt = std::min(cnt, cwnd / (reno - cwnd));
  cnt = std::max(cnt, 2.0);
  cwnd += acked / cnt;
}

inline bool TcpWindow::on_loss(Nanos now) {
  if (now < recovery_until) return false;
  // One loss event per round trip: CUBIC's cut (fast convergence: a window below the last
  // maximum releases some), a new epoch, and congestion avoidance.
  w_max = cwnd < w_max ? cwnd * (1 + kCubicBeta) / 2 : cwnd;
  epoch_start = kNotYet;
  cwnd = std::max(2 * kMss, cwnd * kCubicBeta);
  ssthresh = cwnd;
  recovery_until = now + static_cast<Nanos>(srtt);
  return true;
}

inline double SlowStartWindow::begin(Nanos now, Nanos rtt, double initial_window, double window, bool after_idle) {
  const Nanos rto = std::max<Nanos>(200'000'000, rtt);
  if (cwnd <= 0 || (after_idle && last_active != kNotYet && now - last_active > rto)) cwnd = initial_window;
  return std::min(cwnd, window);
}

}  // namespace wanlab::sim
