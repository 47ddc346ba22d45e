#pragma once
// A fluid network: directed links of given rates shared by flows, max-min fair, each flow
// capped at a ceiling (TCP's window / RTT per connection). Pure, on a virtual clock.
//
// A flow is `weight` identical connections moving `bytes` in all over a path of links;
// its ceiling is per connection, so the whole flow never exceeds weight x ceiling. Rates
// are max-min fair over connections: progressive filling raises every connection's rate
// together until a link is full or a connection reaches its ceiling, freezes those, and
// goes on with the rest.
//
// Flows with the same path and the same ceiling always get the same rate per connection,
// so they are kept together in a bundle: the filling runs over bundles, and a bundle's
// flows advance on one "virtual time" (bytes served per connection since the bundle was
// made), each finishing when it reaches its own mark; a heap per bundle finds the next.
// A change (a flow starts or ends, a link's rate or a ceiling changes) only marks links
// dirty; update() re-runs the filling over the connected part of the network those links
// touch (links and the bundles crossing them), nothing else.
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <queue>
#include <utility>
#include <vector>

#include "wanlab/common/indexed_heap.hpp"
#include "wanlab/common/units.hpp"

namespace wanlab::sim {

inline constexpr double kUnlimited = std::numeric_limits<double>::infinity();

class FlowNetwork {
 public:
  using LinkId = std::uint32_t;
  using FlowId = std::uint32_t;

  /// A directed link of `rate_bps` (0: an outage, nothing moves; kUnlimited is allowed).
  LinkId add_link(double rate_bps);
  void set_rate(LinkId link, double rate_bps, Nanos now);
  double link_rate(LinkId link) const;

  /// Starts a flow at `now`: `bytes` over `path` (links; may be empty), as `weight`
  /// connections each capped at `ceiling_bps` (kUnlimited: no cap). A flow with no finite
  /// link and no cap finishes at once. Throws std::invalid_argument for bad arguments.
  FlowId start(const std::vector<LinkId>& path, double bytes, double weight, double ceiling_bps, Nanos now);
  /// A bundle of its own over `path` (never shared with start()'s flows), for a caller that
  /// runs one flow at a time on it with a ceiling of its choice (start_in()).
  std::uint32_t add_bundle(const std::vector<LinkId>& path);
  /// start() in that bundle; the ceiling may differ from the last flow's only when the
  /// bundle has no flow left. Throws std::invalid_argument otherwise, and for bad arguments.
  FlowId start_in(std::uint32_t bundle, double bytes, double weight, double ceiling_bps, Nanos now);
  /// Changes the per-connection ceiling of a bundle of add_bundle()'s, flows and all.
  void set_bundle_ceiling(std::uint32_t bundle, double ceiling_bps, Nanos now);
  /// Changes the bytes an active flow moves in all (not below what it moved by `now`; it is
  /// done at `now` if it moved them all). Rates stay as they are.
  void set_bytes(FlowId flow, double bytes, Nanos now);
  /// Changes a flow's per-connection ceiling at `now` (0 pauses it).
  void set_ceiling(FlowId flow, double ceiling_bps, Nanos now);

  /// Recomputes the rates the changes since the last call affect. Call after the changes
  /// made at `now`, before next_finish().
  void update(Nanos now);
  /// When the next active flow finishes at the current rates; nullopt when none moves.
  std::optional<Nanos> next_finish() const {
    if (finishes_.empty()) return std::nullopt;
    return finishes_.top_key();
  }
  /// The flows finished by `now`, removed (their links marked for update()), in order.
  std::vector<FlowId> take_finished(Nanos now);
  /// The same into `out` (cleared first), which keeps its storage from call to call.
  void take_finished(Nanos now, std::vector<FlowId>& out);

  /// The caller is done with finished `flow`: its id may be handed out again by start().
  /// Nothing may be asked of it after that. Throws std::invalid_argument for an active
  /// flow or one already released.
  void release(FlowId flow);

  bool active(FlowId flow) const { return flows_.at(flow).active; }
  /// Bytes of the flow moved by `now` (at the rates of the last update()).
  double sent(FlowId flow, Nanos now) const;
  double bytes(FlowId flow) const { return flows_.at(flow).bytes; }
  /// The whole flow's rate now, bit/s.
  double rate_bps(FlowId flow) const;
  std::size_t active_flows() const { return active_; }

  struct Stats {
    std::uint64_t updates = 0;         // fillings run
    std::uint64_t bundles_filled = 0;  // bundle visits over all fillings
    std::uint64_t flows = 0;           // flows started
    std::uint64_t unchanged = 0;       // changed parts of the network whose rates stood (no filling)
  };
  const Stats& stats() const { return stats_; }

 private:
  struct Flow {
    std::uint32_t bundle = 0;
    std::uint32_t gen = 0;  // bumped when the flow moves to another bundle
    double weight = 1;
    double bytes = 0;
    double finish_v = 0;  // the bundle's virtual time at which it is done
    double start_sent = 0;  // bytes moved before it joined this bundle
    double start_v = 0;
    bool active = false;
    bool released = false;
  };
  struct HeapEntry {
    double finish_v;
    FlowId flow;
    std::uint32_t gen;
    bool operator>(const HeapEntry& o) const { return finish_v != o.finish_v ? finish_v > o.finish_v : flow > o.flow; }
  };
  struct Bundle {
    std::vector<LinkId> links;
    double ceiling = kUnlimited;  // bytes per ns per connection
    double weight = 0;            // connections of active flows
    double filled_weight = 0;     // `weight` when the last filling over it set `rate`
    bool refill = false;          // a link's rate or a flow's ceiling changed: fill again
    double v = 0;                 // bytes per connection served so far
    Nanos v_at = 0;
    double rate = 0;  // bytes per ns per connection
    std::priority_queue<HeapEntry, std::vector<HeapEntry>, std::greater<>> heap;
    std::uint64_t mark = 0;     // last update() that visited it
    bool frozen = false;        // during a filling
  };
  struct Link {
    double capacity = 0;  // bytes per ns
    std::vector<std::uint32_t> bundles;
    std::uint64_t mark = 0;
    double left = 0;       // during a filling
    double unfrozen = 0;   // during a filling: connections not yet frozen
  };

  std::uint32_t bundle_for(const std::vector<LinkId>& path, double ceiling);
  FlowId start_on(std::uint32_t bundle, double bytes, double weight, Nanos now);
  void catch_up(Bundle& b, Nanos now);
  void drop_stale_top(Bundle& b);
  void touch(std::uint32_t bundle);
  void schedule(std::uint32_t bundle, Nanos now);
  /// Progressive filling over comp_ (bundles) and comp_links_, then their next finishes.
  void fill(Nanos now);
  /// fill() when the part is one bundle.
  void fill_one(std::uint32_t bundle, Nanos now);
  /// A filling's start for one bundle: caught up, rate 0, frozen if it has no connections;
  /// true if it takes part.
  bool begin_filling(Bundle& b, Nanos now);

  std::vector<Link> links_;
  std::vector<Bundle> bundles_;
  std::vector<Flow> flows_;
  std::vector<FlowId> free_;  // released ids, handed out again
  std::map<std::pair<std::vector<LinkId>, double>, std::uint32_t> bundle_of_;
  std::vector<std::uint32_t> dirty_;  // bundles whose part of the network needs a filling
  // Each bundle's next finish, one entry per bundle at most (ties: the lower bundle first),
  // so a new plan moves the bundle's entry instead of leaving a stale one behind.
  IndexedMinHeap<Nanos> finishes_;
  std::uint64_t update_mark_ = 0;
  // update()'s scratch space, kept between calls.
  std::vector<std::uint32_t> comp_, stack_, open_;
  std::vector<LinkId> comp_links_;
  std::size_t active_ = 0;
  Stats stats_;
};

}  // namespace wanlab::sim
