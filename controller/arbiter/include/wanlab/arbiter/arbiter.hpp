#pragma once
// The WAN arbiter: it owns each directed WAN link's capacity over time and decides when
// the transfers that want a link may use it. Pure: time is injected (nanoseconds on any
// monotonic clock), nothing is sent; the caller turns its events into grants for agents
// and gate switches in the data plane (the lab) or into flow rates (the simulator).
//
// A transfer asks for a link with its bytes and what it belongs to (iteration, pipeline,
// stages, micro-batch) and when the GPU that receives it would otherwise go idle. The
// policy decides:
//   - non-exclusive policies (`fair`): every transfer is granted at once and they share
//     the link, as TCP would;
//   - exclusive policies (`atlas`, `priority`): one transfer owns the link at a time, for a
//     window of bytes / rate plus a slack of one RTT; the policy orders the pending ones.
//     A transfer that cannot fill the link alone owns only the share it can use: one too
//     small to fill it within one RTT (bytes / rate < RTT) moves at most bytes / RTT, and
//     one carried by c TCP connections whose windows are W moves at most c W / RTT. Such
//     transfers get windows side by side, in order, while their shares fit the link; a
//     window-limited one may take what is left even if that is less than its share (TCP
//     shares the link among such flows: a link is never left partly idle while they wait),
//     a short one may not (it sends its bytes at once: two of 0.9 RTT side by side would
//     put 1.8x the link's rate into its queue). A short or window-limited transfer thus
//     never holds the whole link idle, and transfers that can fill the link have it alone.
// A window ends when its transfer has put all its bytes on the link and the link has sent
// them (progress reports into a fluid queue drained at the link rate; the next one may
// start while the last bytes propagate), completes, or stalls after some
// progress (a TCP timeout: it finishes beside the next window). A window that reaches its
// planned end while bytes still move is extended (re-planned from the progress); one with
// no progress at all for `idle_timeout` is revoked: the transfer goes behind every other
// pending one and the next gets the link. Capacity changes (replayed traces) re-plan the
// open windows' ends.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "wanlab/common/units.hpp"

namespace wanlab::arbiter {

struct LinkId {
  std::size_t src = 0;
  std::size_t dst = 0;
  auto operator<=>(const LinkId&) const = default;
};

enum class TransferKind { activation, gradient, allreduce };
std::string to_string(TransferKind k);

struct TransferSpec {
  LinkId link;
  std::uint64_t bytes = 0;  // on the link
  TransferKind kind = TransferKind::activation;
  int iteration = 0;
  int pipeline = 0;  // the DP replica
  int src_stage = 0;
  int dst_stage = 0;
  int microbatch = -1;
  /// When the receiving GPU would otherwise go idle waiting for it, from the known schedule
  /// (any origin; only compared within an iteration). Orders `atlas`.
  Nanos needed_at = 0;
  /// TCP connections that carry it; with ArbiterOptions::tcp_window_bytes they cap its rate
  /// at connections x window / RTT. 0: not limited by windows.
  int connections = 0;
};

using TransferId = std::uint64_t;

enum class State { pending, granted, drained, done, revoked_pending };

struct Transfer {
  TransferId id = 0;
  TransferSpec spec;
  State state = State::pending;
  Nanos ready = 0;          // asked for the link
  Nanos granted = kNotYet;      // its (latest) window opened
  Nanos planned_end = kNotYet;  // the window's planned end (re-planned on progress, capacity)
  Nanos first_planned_end = kNotYet;
  Nanos drained = kNotYet;      // all bytes on the link: the window ended
  Nanos done = kNotYet;         // completed (delivered)
  std::uint64_t progress = 0;  // bytes on the link so far
  Nanos last_progress = kNotYet;
  int revocations = 0;
};

/// One window as it happened, for reports and Gantt charts.
struct WindowRecord {
  TransferId id = 0;
  TransferSpec spec;
  Nanos ready = 0;
  Nanos start = 0;
  Nanos planned_end = 0;  // as first planned
  Nanos end = 0;          // drained, revoked or done
  bool revoked = false;
};

/// What the caller must act on, in order.
struct Event {
  enum class Kind {
    grant,   // the transfer may send from `at` (its window opened)
    close,   // its window ended; it may still finish what it has in flight
    revoke,  // its window was taken away (no progress): hold it back
    done,    // completed
  };
  Kind kind = Kind::grant;
  TransferId id = 0;
  LinkId link;
  Nanos at = 0;
};

class Arbiter;

/// A bandwidth policy: whether windows are exclusive and, if so, the order among pending
/// transfers. A new policy is one class and one line in make_policy().
class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string name() const = 0;
  /// One transfer owns a link at a time (windows); false: all share at once.
  virtual bool exclusive() const = 0;
  /// Whether pending transfer `a` goes before `b` on their link (exclusive policies).
  virtual bool before(const Transfer& a, const Transfer& b) const = 0;
};

/// The policies this build knows, by name: fair, atlas, priority.
std::vector<std::string> policy_names();
/// Throws std::invalid_argument naming the known ones for an unknown name.
std::unique_ptr<Policy> make_policy(const std::string& name);

struct ArbiterOptions {
  /// A window with no progress at all for this long loses the link. Longer than TCP's
  /// retransmission timeouts after a loss (200 ms, then 400 ms...), so a flow that
  /// recovers is not mistaken for one that never sends.
  Nanos idle_timeout = 1'000'000'000;
  /// Progress is counted as complete (the window ends) at this fraction of the bytes, so
  /// estimates of header overhead do not hold the link.
  double drained_fraction = 0.99;
  /// ...or when what is left would take at most this long at the link rate: the next
  /// transfer is let in while the last bytes of this one are still arriving at the link,
  /// so the caller's control latency (sampling, grant message, the sender's wake-up) does
  /// not leave the link idle between windows. The link's FIFO queue keeps the two in order.
  /// "Left" counts what waits in the link's queue too: progress is bytes into the link,
  /// and bytes that entered faster than the link sends them (a sender a little above its
  /// share, packets held at a closed gate let in at once) are still the window's until the
  /// link has sent them; otherwise back-to-back windows would stack that backlog up until
  /// the queue overflows.
  Nanos handover_lead = 5'000'000;
  /// A window whose transfer made progress and then none for max(this, 2 RTT) ends (the
  /// sender is waiting out a retransmission timeout): the next transfer gets the link, and
  /// the stalled one finishes beside it instead of holding the link idle.
  Nanos stall_after = 50'000'000;
  /// Exclusive policies: transfers that cannot fill the link alone (shorter than an RTT at
  /// its rate, or window-limited) share it side by side (see above); false: strictly one
  /// window at a time.
  bool pack_small_transfers = true;
  /// The most one TCP connection keeps in flight (its receive window), in bytes: a
  /// transfer on `connections` connections moves at most connections x this / RTT, and
  /// owns only that share of a faster link. 0: no window limit.
  double tcp_window_bytes = 0;
};

class Arbiter {
 public:
  explicit Arbiter(std::unique_ptr<Policy> policy, ArbiterOptions options = {});

  const Policy& policy() const { return *policy_; }
  /// Declares a link (rate in bit/s, RTT used as the window slack).
  void add_link(LinkId link, double rate_bps, Nanos rtt);
  /// The link's capacity changed at `now` (a trace step): open windows are re-planned.
  void set_capacity(LinkId link, double rate_bps, Nanos now);
  double capacity(LinkId link) const;

  /// A transfer asks for its link at `now`; exclusive policies decide at the next
  /// advance(), so transfers that ask at the same instant compete. Throws std::invalid_argument for an unknown
  /// link or zero bytes.
  TransferId request(const TransferSpec& spec, Nanos now);
  /// Bytes of the transfer on the link so far (monotonic; smaller values are ignored).
  void progress(TransferId id, std::uint64_t bytes, Nanos now);
  /// The transfer has been delivered.
  void complete(TransferId id, Nanos now);
  /// Processes window ends and timeouts up to `now`, grants what can start.
  void advance(Nanos now);
  /// When advance() must next run (or nullopt when nothing is planned).
  std::optional<Nanos> next_deadline() const;

  /// Events since the last call, oldest first.
  std::vector<Event> take_events();
  /// Whether take_events() has any to give.
  bool has_events() const { return !events_.empty(); }
  const Transfer& transfer(TransferId id) const;
  /// The transfers holding windows on `link` now (exclusive policies).
  std::vector<TransferId> owners(LinkId link) const;
  /// Bytes that entered `link` (as progress) and that it has not sent yet at `now`: a
  /// fluid queue drained at the link's rate.
  double queued_bytes(LinkId link, Nanos now) const;
  /// The pending transfer that would get `link` next if nothing else asks first.
  std::optional<TransferId> next_in_line(LinkId link) const;
  /// Windows that ended, in the order they ended.
  const std::vector<WindowRecord>& windows() const { return windows_; }
  /// Transfers not yet done.
  std::size_t active() const;

 private:
  struct Link {
    double rate_bps = 0;
    Nanos rtt = 0;
    std::vector<TransferId> waiting;  // pending transfers (exclusive policies), the next one last
    std::vector<TransferId> owners;  // windows now open (exclusive policies)
    // What progress put into the link and the link has not sent, as of queue_at.
    double queue = 0;
    Nanos queue_at = 0;
  };
  static double queue_at(const Link& l, Nanos now);
  /// The window's bytes still to leave the link, against the handover target.
  bool handed_over(const Link& l, const Transfer& t, Nanos now) const;
  /// When handed_over() becomes true if no more progress comes (kNever: not by draining).
  Nanos handover_time(const Link& l, const Transfer& t) const;
  std::uint64_t handover_target(const Link& l, const Transfer& t) const;
  Transfer& get(TransferId id);
  Link& link_of(const Transfer& t);
  Nanos window_length(const Link& l, std::uint64_t bytes) const;
  double demand(const Link& l, const Transfer& t) const;
  /// What t's TCP windows let it move (connections x window / RTT; the link's rate when
  /// unknown), and whether that, not the link or its bytes, bounds it.
  double window_share(const Link& l, const Transfer& t) const;
  bool window_limited(const Link& l, const Transfer& t) const;
  void grant(Link& l, Transfer& t, Nanos now);
  void end_window(Link& l, Transfer& t, Nanos now, bool revoked);
  void schedule(Link& l, Nanos now);
  /// Whether pending `a` gets its link before pending `b`.
  bool waits_before(const Transfer& a, const Transfer& b) const;
  /// Puts pending `t` in its place in l.waiting.
  void wait(Link& l, const Transfer& t);

  std::unique_ptr<Policy> policy_;
  ArbiterOptions options_;
  std::map<LinkId, Link> links_;
  std::vector<Transfer> transfers_;  // transfer id - 1 (ids are handed out in order)
  TransferId next_id_ = 1;
  std::vector<Event> events_;
  std::vector<WindowRecord> windows_;
  /// next_deadline()'s answer while nothing changed (every call that changes a transfer or
  /// a link resets it).
  mutable std::optional<std::optional<Nanos>> deadline_;
};

}  // namespace wanlab::arbiter
