#include "wanlab/arbiter/arbiter.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <tuple>

namespace wanlab::arbiter {

std::string to_string(TransferKind k) {
  switch (k) {
    case TransferKind::activation:
      return "activation";
    case TransferKind::gradient:
      return "gradient";
    case TransferKind::allreduce:
      return "allreduce";
  }
  return "?";
}

namespace {


// What TCP gives: no windows, every transfer on the link at once.
class FairPolicy final : public Policy {
 public:
  std::string name() const override { return "fair"; }
  bool exclusive() const override { return false; }
  bool before(const Transfer& a, const Transfer& b) const override {
    return std::tie(a.ready, a.id) < std::tie(b.ready, b.id);
  }
};

// Workload-aware temporal sharing: the transfer whose receiving GPU would go idle soonest
// owns the link first; ties go to the lower pipeline, which staggers the pipelines (the
// first one computes while the next one's transfer is on the link).
class AtlasPolicy final : public Policy {
 public:
  std::string name() const override { return "atlas"; }
  bool exclusive() const override { return true; }
  bool before(const Transfer& a, const Transfer& b) const override {
    const auto& x = a.spec;
    const auto& y = b.spec;
    return std::tie(x.iteration, x.needed_at, x.pipeline, a.ready, a.id) <
           std::tie(y.iteration, y.needed_at, y.pipeline, b.ready, b.id);
  }
};

// Strict priority: exclusive windows, earlier stages first, then lower pipelines, then
// arrival: what a static per-stage/per-job priority scheme does, without schedule knowledge.
class PriorityPolicy final : public Policy {
 public:
  std::string name() const override { return "priority"; }
  bool exclusive() const override { return true; }
  bool before(const Transfer& a, const Transfer& b) const override {
    return std::tie(a.spec.src_stage, a.spec.pipeline, a.ready, a.id) <
           std::tie(b.spec.src_stage, b.spec.pipeline, b.ready, b.id);
  }
};

struct Registration {
  const char* name;
  std::unique_ptr<Policy> (*make)();
};

template <class P>
std::unique_ptr<Policy> make() {
  return std::make_unique<P>();
}

// One line per policy.
const Registration kPolicies[] = {
    {"fair", make<FairPolicy>},
    {"atlas", make<AtlasPolicy>},
    {"priority", make<PriorityPolicy>},
};

}  // namespace

std::vector<std::string> policy_names() {
  std::vector<std::string> names;
  for (const auto& r : kPolicies) names.emplace_back(r.name);
  return names;
}

std::unique_ptr<Policy> make_policy(const std::string& name) {
  for (const auto& r : kPolicies)
    if (name == r.name) return r.make();
  throw std::invalid_argument(
      fmt::format("unknown policy \"{}\" (known: {})", name, fmt::join(policy_names(), ", ")));
}

Arbiter::Arbiter(std::unique_ptr<Policy> policy, ArbiterOptions options)
    : policy_(std::move(policy)), options_(options) {
  if (!policy_) throw std::invalid_argument("arbiter: no policy");
}

void Arbiter::add_link(LinkId link, double rate_bps, Nanos rtt) {
  deadline_.reset();
  if (!(rate_bps >= 0) || rtt < 0) throw std::invalid_argument("arbiter: negative rate or RTT");
  auto& l = links_[link];
  l.rate_bps = rate_bps;
  l.rtt = rtt;
}

double Arbiter::capacity(LinkId link) const {
  const auto it = links_.find(link);
  if (it == links_.end()) throw std::invalid_argument(fmt::format("arbiter: no link {}->{}", link.src, link.dst));
  return it->second.rate_bps;
}

Transfer& Arbiter::get(TransferId id) {
  if (id == 0 || id > transfers_.size()) throw std::invalid_argument(fmt::format("arbiter: no transfer {}", id));
  return transfers_[id - 1];
}

const Transfer& Arbiter::transfer(TransferId id) const {
  return const_cast<Arbiter*>(this)->get(id);
}

Arbiter::Link& Arbiter::link_of(const Transfer& t) {
  return links_.at(t.spec.link);
}

Nanos Arbiter::window_length(const Link& l, std::uint64_t bytes) const {
  if (l.rate_bps <= 0) return kNever;
  return static_cast<Nanos>(std::ceil(static_cast<double>(bytes) * 8e9 / l.rate_bps)) + l.rtt;
}

std::size_t Arbiter::active() const {
  return static_cast<std::size_t>(
      std::count_if(transfers_.begin(), transfers_.end(), [](const Transfer& t) { return t.state != State::done; }));
}

TransferId Arbiter::request(const TransferSpec& spec, Nanos now) {
  deadline_.reset();
  if (!links_.contains(spec.link))
    throw std::invalid_argument(fmt::format("arbiter: no link {}->{}", spec.link.src, spec.link.dst));
  if (spec.bytes == 0) throw std::invalid_argument("arbiter: a transfer of 0 bytes");
  const TransferId id = next_id_++;
  auto& t = transfers_.emplace_back();
  t.id = id;
  t.spec = spec;
  t.ready = now;
  auto& l = link_of(t);
  if (!policy_->exclusive()) {
    grant(l, t, now);
  } else {
    wait(l, t);  // advance() picks among everything that asked by then
  }
  return id;
}

void Arbiter::grant(Link& l, Transfer& t, Nanos now) {
  t.state = State::granted;
  t.granted = now;
  t.last_progress = now;
  const Nanos len = window_length(l, t.spec.bytes > t.progress ? t.spec.bytes - t.progress : 0);
  t.planned_end = len == kNever ? kNever : now + len;
  t.first_planned_end = t.planned_end;
  if (policy_->exclusive()) l.owners.push_back(t.id);
  events_.push_back({Event::Kind::grant, t.id, t.spec.link, now});
}

void Arbiter::end_window(Link& l, Transfer& t, Nanos now, bool revoked) {
  windows_.push_back({t.id, t.spec, t.ready, t.granted, t.first_planned_end, now, revoked});
  if (revoked) {
    t.state = State::revoked_pending;
    ++t.revocations;
    wait(l, t);
    events_.push_back({Event::Kind::revoke, t.id, t.spec.link, now});
  } else {
    t.state = State::drained;
    t.drained = now;
    events_.push_back({Event::Kind::close, t.id, t.spec.link, now});
  }
  std::erase(l.owners, t.id);
}

bool Arbiter::waits_before(const Transfer& a, const Transfer& b) const {
  // Transfers that lost a window go behind every other pending one.
  const bool ra = a.state == State::revoked_pending;
  const bool rb = b.state == State::revoked_pending;
  if (ra != rb) return rb;
  return policy_->before(a, b);
}

void Arbiter::wait(Link& l, const Transfer& t) {
  // Kept in reverse order (the next one last): a grant pops it. A transfer's place does
  // not move while it waits (what orders it is fixed then).
  const auto at = std::upper_bound(l.waiting.begin(), l.waiting.end(), t.id, [&](TransferId a, TransferId b) {
    return waits_before(transfers_[b - 1], transfers_[a - 1]);
  });
  l.waiting.insert(at, t.id);
}

double Arbiter::demand(const Link& l, const Transfer& t) const {
  if (l.rtt <= 0) return l.rate_bps;
  return std::min({l.rate_bps, static_cast<double>(t.spec.bytes) * 8e9 / static_cast<double>(l.rtt), window_share(l, t)});
}

double Arbiter::window_share(const Link& l, const Transfer& t) const {
  if (l.rtt <= 0 || options_.tcp_window_bytes <= 0 || t.spec.connections <= 0) return l.rate_bps;
  return t.spec.connections * options_.tcp_window_bytes * 8e9 / static_cast<double>(l.rtt);
}

bool Arbiter::window_limited(const Link& l, const Transfer& t) const {
  const double w = window_share(l, t);
  return w < l.rate_bps && w <= static_cast<double>(t.spec.bytes) * 8e9 / static_cast<double>(l.rtt);  // (rtt > 0 here)
}

void Arbiter::schedule(Link& l, Nanos now) {
  if (!policy_->exclusive()) return;
  // In policy order, no overtaking: the next one starts when the link is free, or, if it
  // cannot fill the link alone, while the owners leave room for it. A window-limited one
  // may take less than its share (TCP shares the link among such flows, none bursts); a
  // short one must fit: it sends its bytes at once, and the link's queue takes the excess.
  while (!l.waiting.empty()) {
    double used = 0;
    if (!l.owners.empty()) {
      if (l.rate_bps <= 0 || !options_.pack_small_transfers) return;
      for (auto id : l.owners) used += demand(l, get(id));
      if (used >= l.rate_bps * (1 - 1e-9)) return;
    }
    auto& t = get(l.waiting.back());
    if (!l.owners.empty()) {
      const double d = demand(l, t);
      const bool fits = used + d <= l.rate_bps * (1 + 1e-9);
      if (!fits && (d >= l.rate_bps * (1 - 1e-9) || !window_limited(l, t))) return;
    }
    l.waiting.pop_back();
    grant(l, t, now);
  }
}

std::vector<TransferId> Arbiter::owners(LinkId link) const {
  const auto it = links_.find(link);
  return it == links_.end() ? std::vector<TransferId>{} : it->second.owners;
}

std::optional<TransferId> Arbiter::next_in_line(LinkId link) const {
  const auto it = links_.find(link);
  if (it == links_.end() || it->second.waiting.empty()) return std::nullopt;
  return it->second.waiting.back();
}

double Arbiter::queue_at(const Link& l, Nanos now) {
  if (now <= l.queue_at) return l.queue;
  return std::max(0.0, l.queue - l.rate_bps / 8e9 * static_cast<double>(now - l.queue_at));
}

double Arbiter::queued_bytes(LinkId link, Nanos now) const {
  const auto it = links_.find(link);
  return it == links_.end() ? 0.0 : queue_at(it->second, now);
}

std::uint64_t Arbiter::handover_target(const Link& l, const Transfer& t) const {
  const double total = static_cast<double>(t.spec.bytes);
  const double lead = l.rate_bps / 8e9 * static_cast<double>(options_.handover_lead);
  return static_cast<std::uint64_t>(std::min(options_.drained_fraction * total, std::max(0.0, total - lead)));
}

bool Arbiter::handed_over(const Link& l, const Transfer& t, Nanos now) const {
  // Everything still queued on the link counts against this window (with several owners,
  // each waits for all of it: the link's queue is one FIFO).
  const double sent = static_cast<double>(t.progress) - std::min(static_cast<double>(t.progress), queue_at(l, now));
  return sent >= static_cast<double>(handover_target(l, t));
}

Nanos Arbiter::handover_time(const Link& l, const Transfer& t) const {
  const auto target = handover_target(l, t);
  if (t.progress < target || l.rate_bps <= 0) return kNever;
  const double excess = l.queue - static_cast<double>(t.progress - target);
  if (excess <= 0) return l.queue_at;
  return l.queue_at + static_cast<Nanos>(std::ceil(excess * 8e9 / l.rate_bps));
}

void Arbiter::progress(TransferId id, std::uint64_t bytes, Nanos now) {
  auto& t = get(id);
  if (bytes <= t.progress) return;
  deadline_.reset();
  auto& l = link_of(t);
  // The bytes entered the link since its last report, spread over that time (the
  // caller samples counters), while the link sent at its rate.
  l.queue = std::max(0.0, l.queue + static_cast<double>(bytes - t.progress) -
                              l.rate_bps / 8e9 * static_cast<double>(std::max<Nanos>(0, now - l.queue_at)));
  l.queue_at = std::max(l.queue_at, now);
  t.progress = bytes;
  t.last_progress = now;
  if (t.state != State::granted) return;
  if (handed_over(l, t, now)) {
    end_window(l, t, now, false);
    schedule(l, now);
  }
}

void Arbiter::complete(TransferId id, Nanos now) {
  deadline_.reset();
  auto& t = get(id);
  if (t.state == State::done) return;
  auto& l = link_of(t);
  if (t.state == State::granted) end_window(l, t, now, false);
  if (t.state == State::pending || t.state == State::revoked_pending) std::erase(l.waiting, id);
  t.state = State::done;
  t.done = now;
  if (t.drained == kNotYet) t.drained = now;
  events_.push_back({Event::Kind::done, id, t.spec.link, now});
  schedule(l, now);
}

void Arbiter::advance(Nanos now) {
  deadline_.reset();
  if (!policy_->exclusive()) return;
  for (auto& [id, l] : links_) {
    for (const auto tid : std::vector<TransferId>(l.owners)) {
      auto& t = get(tid);
      // An outage is nobody's fault: no timeouts while the link has no capacity.
      if (l.rate_bps > 0 && t.progress == 0 && now - t.last_progress >= options_.idle_timeout) {
        end_window(l, t, now, true);
      } else if (l.rate_bps > 0 && t.progress > 0 && now - t.last_progress >= std::max(options_.stall_after, 2 * l.rtt)) {
        end_window(l, t, now, false);
      } else if (t.progress > 0 && handed_over(l, t, now)) {
        end_window(l, t, now, false);  // its last bytes left the link's queue
      } else if (t.planned_end != kNever && now >= t.planned_end) {
        // Still moving: re-plan the rest of the window from what is left.
        const Nanos len = window_length(l, t.spec.bytes > t.progress ? t.spec.bytes - t.progress : 0);
        t.planned_end = len == kNever ? kNever : now + len;
      }
    }
    schedule(l, now);
  }
}

void Arbiter::set_capacity(LinkId link, double rate_bps, Nanos now) {
  deadline_.reset();
  auto& l = links_.at(link);
  l.queue = queue_at(l, now);  // drained at the old rate until now
  l.queue_at = std::max(l.queue_at, now);
  l.rate_bps = rate_bps;
  for (const auto tid : l.owners) {
    auto& t = get(tid);
    const Nanos len = window_length(l, t.spec.bytes > t.progress ? t.spec.bytes - t.progress : 0);
    t.planned_end = len == kNever ? kNever : now + len;
    // The outage's silence does not count against the owner.
    if (rate_bps > 0) t.last_progress = std::max(t.last_progress, now);
  }
}

std::optional<Nanos> Arbiter::next_deadline() const {
  if (deadline_) return *deadline_;  // nothing changed since it was worked out
  std::optional<Nanos> next;
  for (const auto& [id, l] : links_) {
    for (const auto tid : l.owners) {
      const auto& t = transfers_[tid - 1];
      Nanos d = std::min(t.planned_end, handover_time(l, t));
      if (l.rate_bps > 0)
        d = std::min(d, t.last_progress + (t.progress == 0 ? options_.idle_timeout : std::max(options_.stall_after, 2 * l.rtt)));
      if (d != kNever && (!next || d < *next)) next = d;
    }
  }
  deadline_ = next;
  return next;
}

std::vector<Event> Arbiter::take_events() {
  std::vector<Event> out;
  out.swap(events_);
  return out;
}

}  // namespace wanlab::arbiter
