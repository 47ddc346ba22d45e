// The circuits of a DC's optical rails in the lab (rail_circuits.hpp says what they model).
#include "wanlab/shaping/rail_circuits.hpp"

#include <algorithm>
#include <stdexcept>

namespace wanlab::shaping {

RailCircuits::RailCircuits(int nodes, Nanos latency, std::size_t hold_frames, Nanos guard)
    : nodes_(nodes), latency_(latency), hold_frames_(hold_frames), guard_(guard) {}

std::vector<std::uint32_t> RailCircuits::set_plan(RailPlan plan, Nanos now) {
  for (const auto& out : plan.out)
    if (out.size() != static_cast<std::size_t>(nodes_))
      throw std::invalid_argument("rail plan: a configuration must name a peer (or -1) for every node");
  if (plan.out.size() != plan.configs.size())
    throw std::invalid_argument("rail plan: one circuit list per configuration");
  auto policy = arbiter::make_rail_policy(plan.policy);
  std::vector<std::uint32_t> back;
  for (const auto& w : waiting_) back.push_back(w.handle);
  waiting_.clear();
  circuits_ = policy->circuits();
  policy_ = std::move(policy);
  plan_ = std::move(plan);
  current_ = target_ = circuits_ && !plan_.configs.empty() ? 0 : -1;
  switching_ = false;
  inside_ = outstanding_ = 0;
  flows_.clear();
  last_data_ = now;
  const auto kept = stats_;
  stats_ = {};
  stats_.policy = policy_->name();
  stats_.circuits = circuits_;
  for (const auto p : plan_.configs) stats_.phases.push_back(arbiter::to_string(p));
  stats_.no_circuit = kept.no_circuit;  // a lab's count, across runs
  return back;
}

bool RailCircuits::connects(int config, int a, int b, std::uint32_t payload) const {
  const auto& out = plan_.out[static_cast<std::size_t>(config)];
  return out[static_cast<std::size_t>(a)] == b || (payload <= kReverseBytes && out[static_cast<std::size_t>(b)] == a);
}

int RailCircuits::config_for(int a, int b, std::uint32_t payload) const {
  if (current_ >= 0 && connects(current_, a, b, payload)) return current_;
  for (int c = 0; c < static_cast<int>(plan_.configs.size()); ++c)
    if (connects(c, a, b, payload)) return c;
  return -1;
}

// A TCP flow is outstanding from its first unacknowledged data segment until an ACK covers
// everything it sent.
void RailCircuits::track(const RailFrameInfo& f, Nanos now) {
  if (!f.tcp) return;
  if (f.payload > kReverseBytes) last_data_ = std::max(last_data_, now);
  if (f.payload > 0) {
    auto& fl = flows_[flow_key(f.src_ip, f.dst_ip, f.sport, f.dport)];
    const std::uint32_t end = f.seq + f.payload;
    if (!fl.outstanding && static_cast<std::int32_t>(end - fl.acked) > 0) {
      fl.outstanding = true;
      ++outstanding_;
    }
    if (static_cast<std::int32_t>(end - fl.sent_end) > 0 || fl.sent_end == 0) fl.sent_end = end;
  }
  if (f.has_ack) {
    const auto it = flows_.find(flow_key(f.dst_ip, f.src_ip, f.dport, f.sport));
    if (it == flows_.end()) return;
    auto& fl = it->second;
    if (static_cast<std::int32_t>(f.ack - fl.acked) > 0) fl.acked = f.ack;
    if (fl.outstanding && static_cast<std::int32_t>(fl.acked - fl.sent_end) >= 0) {
      fl.outstanding = false;
      --outstanding_;
    }
  }
}

RailCircuits::Verdict RailCircuits::classify(std::uint32_t handle, int a, int b, const RailFrameInfo& f, Nanos now) {
  if (!circuits_) return Verdict::pass;
  if (a < 0 || b < 0 || a >= nodes_ || b >= nodes_) {
    ++stats_.no_circuit;
    return Verdict::dropped;
  }
  const int c = config_for(a, b, f.payload);
  if (c < 0) {
    ++stats_.no_circuit;
    return Verdict::dropped;
  }
  const bool data = counts(f.payload);
  if (!switching_ && c == current_) {
    track(f, now);
    if (data) ++inside_;
    return Verdict::pass;
  }
  if (waiting_.size() >= hold_frames_) {
    ++stats_.held_dropped;
    return Verdict::dropped;
  }
  waiting_.push_back({handle, c, data});
  ++stats_.held_frames;
  maybe_switch(now);
  return Verdict::held;
}

// A flow still waiting for an ACK holds the circuits for at most kRailAckWait more: a
// receiver's delayed ACK of a message's last segment can take 40 ms.
bool RailCircuits::drained(Nanos now) const {
  return inside_ == 0 && now - last_data_ >= (outstanding_ > 0 ? kRailAckWait : guard_);
}

void RailCircuits::maybe_switch(Nanos now) {
  if (switching_ || waiting_.empty() || !drained(now)) return;
  scratch_.clear();
  for (const auto& w : waiting_) scratch_.push_back(plan_.configs[static_cast<std::size_t>(w.config)]);
  const auto cur = plan_.configs[static_cast<std::size_t>(current_)];
  const auto next = policy_->next(cur, scratch_);
  if (!next && scratch_.front() != cur) return;  // the policy keeps its circuits
  int to = current_;
  if (next)
    to = static_cast<int>(std::find(plan_.configs.begin(), plan_.configs.end(), *next) - plan_.configs.begin());
  if (to >= static_cast<int>(plan_.configs.size())) return;
  switching_ = true;
  target_ = to;
  if (to == current_) {  // what waits is the current configuration's own: no switch
    switch_done_ = now;
    return;
  }
  switch_done_ = now + latency_;
  ++stats_.reconfigurations;
  stats_.reconfiguring_ns += latency_;
}

void RailCircuits::advance(Nanos now, std::vector<std::uint32_t>& release) {
  if (!circuits_) return;
  if (switching_ && now >= switch_done_) {
    switching_ = false;
    current_ = target_;
    // Flows of the configuration that went down are over for it.
    flows_.clear();
    outstanding_ = 0;
    last_data_ = now;
    std::deque<Waiting> rest;
    for (const auto& w : waiting_) {
      if (w.config == current_) {
        release.push_back(w.handle);
        if (w.data) ++inside_;
      } else {
        rest.push_back(w);
      }
    }
    waiting_.swap(rest);
  }
  maybe_switch(now);
}

Nanos RailCircuits::next_event() const {
  if (!circuits_) return kNever;
  if (switching_) return switch_done_;
  if (waiting_.empty() || inside_ > 0) return kNever;
  return last_data_ + (outstanding_ > 0 ? kRailAckWait : guard_);
}

RailCircuitStats RailCircuits::stats() const {
  auto s = stats_;
  s.waiting_now = waiting_.size();
  s.current = circuits_ && current_ >= 0 ? arbiter::to_string(plan_.configs[static_cast<std::size_t>(current_)]) : "";
  return s;
}

}  // namespace wanlab::shaping
