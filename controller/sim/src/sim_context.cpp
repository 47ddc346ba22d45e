#include "wanlab/sim/sim_context.hpp"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "wanlab/workload/execute.hpp"
#include "wanlab/core/round_trip.hpp"

namespace wanlab::sim {

SimContext::SimContext(const workload::Plan& plan_, const SimOptions& options)
    : plan(plan_),
      opt(options),
      sc(plan_.scenario),
      tp(sc.parallelism.tp),
      k(sc.connections),
      window(options.tcp_window_bytes.value_or(workload::run_tcp_window(plan_.scenario))) {
  if (sc.iterations < 0) throw std::invalid_argument("simulate: negative iterations");
  if (!(window >= 0) || !(opt.initial_window_bytes > 0) || opt.progress_period_ns <= 0)
    throw std::invalid_argument("simulate: tcp window, initial window and progress period must be positive");
  if (!(opt.pacing_ratio > 0) || opt.paced_piece_ns <= 0 || opt.paced_piece_ns_per_message < 0 || opt.paced_stream_ns < 0)
    throw std::invalid_argument(
        "simulate: the pacing ratio and the paced piece length must be positive, the piece length per message and "
        "the streamed piece length at least 0");
  if (!(opt.compute_jitter >= 0 && opt.compute_jitter <= 0.5))
    throw std::invalid_argument(fmt::format("simulate: compute jitter {}: give a fraction from 0 to 0.5", opt.compute_jitter));
  policy = arbiter::make_policy(sc.policy);
  exclusive = policy->exclusive();
  if (!sc.tcp_pacing && !exclusive && opt.bursts == SimOptions::Bursts::paced)
    throw std::invalid_argument(
        "simulate: the scenario sets \"tcp_pacing\": false (senders that put each window on the wire at once), "
        "which the paced model lacks: its connections pace as Linux with fq does (--bursts fifo sends each message "
        "at once)");
  build_network();
}

void SimContext::build_network() {
  const auto& topo = plan.topology;
  const auto ndc = topo.dcs.size();
  link_of.assign(ndc, std::vector<std::size_t>(ndc, kNoLink));
  for (std::size_t i = 0; i < topo.links.size(); ++i) {
    const auto& l = topo.links[i];
    link_of[l.src][l.dst] = i;
    const auto* back = topo.find_link(l.dst, l.src);
    const Nanos rtt = core::round_trip(topo, l).count();
    const double rate = static_cast<double>(l.params.rate.bps) * sc.scale;
    wan.push_back(net.add_link(rate));
    wan_rate.push_back(rate);
    reverse.push_back(back ? static_cast<std::size_t>(back - topo.links.data()) : kNoLink);
    wan_delay.push_back(l.params.delay.count());
    wan_rtt.push_back(rtt);
    // SO_MAX_PACING_RATE of a windowed run's connections: the link's rate over them
    // (bytes per ns per connection).
    pace_cap.push_back(static_cast<double>(l.params.rate.bps) * sc.scale / 8e9 / (tp * k));
    wan_ceiling.push_back(window > 0 && rtt > 0 ? window * 8e9 / static_cast<double>(rtt) : kUnlimited);
    totals.push_back({l.src, l.dst, 0, 0});
  }
  acks_for.assign(topo.links.size(), 0.0);
  wan_queue_link_ = topo.links;
  queue_limit_.assign(topo.links.size(), {-1.0, 0.0});
  double lan = static_cast<double>(topo.lan.rate.bps) * sc.scale;
  if (opt.lan_rate_bps) lan = *opt.lan_rate_bps;
  if (!(lan >= 0)) throw std::invalid_argument(fmt::format("simulate: LAN rate {} bit/s", lan));
  lan_limited = lan > 0;
  lan_delay = topo.lan.delay.count();
  std::size_t nodes = 0;
  for (const auto& dc : topo.dcs) {
    node_base.push_back(nodes);
    nodes += static_cast<std::size_t>(dc.nodes);
  }
  if (lan_limited)
    for (std::size_t n = 0; n < nodes; ++n) {
      node_up.push_back(net.add_link(lan));
      node_down.push_back(net.add_link(lan));
    }
}

std::uint32_t SimContext::group_of(int worker) const {
  if (worker < 0 || static_cast<std::size_t>(worker) >= plan.workers.size() || worker % tp != 0)
    throw std::invalid_argument(fmt::format("simulate: worker {} is not TP rank 0 of a worker of the plan", worker));
  return static_cast<std::uint32_t>(worker / tp);
}

void SimContext::start_acks(std::size_t link, double wire_bytes, double ceiling_bps, Nanos now) {
  if (!opt.acks || wire_bytes <= 0) return;
  const auto back = reverse[link];
  if (back == kNoLink) return;
  const double fwd = std::min(wan_rate[link], ceiling_bps);
  if (!(fwd > 0)) return;
  const auto f = net.start({wan[back]}, wire_bytes * kAckFraction, 1, fwd * kAckFraction, now);
  set_owner(f, {false, true, 0, back, 0});
}

void SimContext::apply_rate(std::size_t link, Nanos now) {
  double rate = wan_rate[link];
  if (const auto back = reverse[link]; back != kNoLink && acks_for[back] != 0)
    rate = std::max(0.0, rate - kAckFraction * (acks_for[back] == kFullRate ? wan_rate[back]
                                                                            : std::min(acks_for[back], wan_rate[back])));
  net.set_rate(wan[link], rate, now);
}

double SimContext::queue_limit_bytes(std::size_t link) {
  // (Worked out again only when the rate moved: a paced link asks at every cut.)
  auto& [rate, bytes] = queue_limit_[link];
  if (rate == wan_rate[link]) return bytes;
  auto& l = wan_queue_link_[link];
  const double frame = static_cast<double>(plan.topology.lan.mtu + 14);
  if (l.params.queue && l.params.queue->unit == QueueLimit::Unit::bytes) {
    bytes = static_cast<double>(l.params.queue->value);
  } else if (l.params.queue) {
    bytes = static_cast<double>(l.params.queue->value) * frame;
  } else {
    l.params.rate.bps = static_cast<std::uint64_t>(std::llround(wan_rate[link]));
    bytes = static_cast<double>(core::default_queue_packets(plan.topology, l)) * frame;
  }
  rate = wan_rate[link];
  return bytes;
}

}  // namespace wanlab::sim
