#include "wanlab/sim/tcp_model.hpp"

#include <algorithm>

namespace wanlab::sim {

void TcpWindow::start(double window, double initial_window, Nanos path_rtt) {
  if (cwnd > 0) return;
  cwnd = std::min(window, initial_window);
  srtt = static_cast<double>(path_rtt);
}

double TcpWindow::pacing_rate(double ca_ratio) const {
  const double ratio = cwnd < ssthresh / 2 ? 2.0 : ca_ratio;
  return ratio * cwnd / std::max(1.0, srtt);
}

void TcpWindow::on_ack(double acked, Nanos at, Nanos sent, Nanos back, Nanos path_rtt, double window) {
  const double used = inflight;  // in flight when these were ACKed, them included
  inflight = std::max(0.0, inflight - acked);
  const double sample = static_cast<double>(back - sent);
  srtt = srtt > 0 ? 0.875 * srtt + 0.125 * sample : sample;
  if (sent >= round_mark) {  // a new round: its first ACKs are HyStart's sample
    round_mark = at;
    round_sampled = false;
  }
  if (cwnd < ssthresh) {
    if (2 * used >= cwnd) cwnd = std::min(window, cwnd + acked);
    // HyStart (CUBIC's delay test): the round's first ACKs came back later than the path's
    // RTT by more than RTT / 8 (4 to 16 ms): the queue is filling, slow start ends.
    const double rtt = static_cast<double>(path_rtt);
    if (!round_sampled && cwnd >= kHystartLowWindow * kMss && sample - rtt > std::clamp(rtt / 8, 4e6, 16e6))
      ssthresh = cwnd;
  } else if (used >= cwnd - kMss) {
    cwnd = std::min(window, cwnd + kRenoFriendly * kMss * acked / cwnd);
  }
  round_sampled = true;
}

bool TcpWindow::on_loss(Nanos now) {
  if (now < recovery_until) return false;
  // One loss event per round trip: CUBIC's cut, and congestion avoidance.
  cwnd = std::max(2 * kMss, cwnd * kCubicBeta);
  ssthresh = cwnd;
  recovery_until = now + static_cast<Nanos>(srtt);
  return true;
}

double SlowStartWindow::begin(Nanos now, Nanos rtt, double initial_window, double window, bool after_idle) {
  const Nanos rto = std::max<Nanos>(200'000'000, rtt);
  if (cwnd <= 0 || (after_idle && last_active >= 0 && now - last_active > rto)) cwnd = initial_window;
  return std::min(cwnd, window);
}

}  // namespace wanlab::sim
