#pragma once
// A run's WAN windows: the arbiter applied to a plan's pipeline messages. Pure (time is
// injected, nothing is sent): the run manager feeds it agents' `want` and `delivered`
// messages and the data plane's per-flow byte counters, and carries out what it returns:
// `grant` messages to agents and gate switches in the shaping backend.
//
// Transfers. The arbiter's unit is a stage boundary's message of one pipeline (DP replica)
// for one micro-batch in one iteration: the TP ranks of stage s of replica d each send
// their share to their counterpart in the next (or previous) stage, all together. Its
// bytes are the shares' payload plus header overhead as the link counts it. It is asked for
// when the first rank wants to send; its window grants every rank.
//
// Flows. Each (sending worker, receiving worker) pair in different DCs is one gated flow of
// its link, matched by the sender's node address, the receiver's node address and the
// sender's source-port block (common/flows.hpp). A flow's gate is open while any transfer
// that uses it holds a window. All-reduce traffic between DCs is not windowed.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "wanlab/arbiter/arbiter.hpp"
#include "wanlab/run/coordinator.hpp"
#include "wanlab/shaping/link_shaper.hpp"
#include "wanlab/workload/plan.hpp"

namespace wanlab::run {

/// Wire bytes per payload byte on a WAN link (workload::kWireOverhead).
using workload::kWireOverhead;

struct GateSwitch {
  arbiter::LinkId link;
  int flow = 0;
  bool open = false;
  bool operator==(const GateSwitch&) const = default;
};

struct WindowActions {
  std::vector<Outgoing> messages;
  std::vector<GateSwitch> gates;
};

class RunWindows {
 public:
  /// `rates_bps`: per topology link (same order), the rate in force (scaled).
  /// `lookahead` > 0 (only where the data plane gates flows): the transfer next in line on
  /// a link hears its grant once a window holder has at most that long left at the link
  /// rate, so its first bytes already wait at its closed gate when the window passes to it
  /// and the control round trip (want -> grant -> agent -> TCP) is hidden; the gate, not
  /// the agent, marks the window's start. Kept short: packets held longer than TCP's
  /// retransmission timeout would be sent again.
  RunWindows(std::string run_id, const workload::Plan& plan, const std::vector<double>& rates_bps,
             std::unique_ptr<arbiter::Policy> policy, arbiter::ArbiterOptions options = {},
             Nanos lookahead = 0);

  /// The gated flows to declare per link before the run starts (every gate closed).
  const std::map<arbiter::LinkId, std::vector<shaping::GatedFlow>>& flows() const { return flows_; }

  /// An agent's `want` (already validated by the protocol). Unknown messages are ignored
  /// with a reason in the returned string.
  std::optional<std::string> want(const nlohmann::json& m, Nanos now, WindowActions& out);
  std::optional<std::string> delivered(const nlohmann::json& m, Nanos now, WindowActions& out);
  /// The data plane's counters of a link's flows now (cumulative bytes per flow id).
  void flow_bytes(arbiter::LinkId link, const std::vector<shaping::FlowCounters>& counters, Nanos now);
  /// Window ends and timeouts; call at least every few ms while transfers are active.
  void tick(Nanos now, WindowActions& out);
  std::optional<Nanos> next_deadline() const { return arbiter_.next_deadline(); }

  /// windows.csv (times in s since `origin`).
  std::string windows_csv(Nanos origin) const;
  /// {windows, revoked, start_gap_ms {p50, p99}, end_gap_ms {p50, p99}}: planned window
  /// start vs the transfer's first byte into the link (through its gate, the link's
  /// bottleneck), planned end vs its last one (the data plane's times where it has them,
  /// else the 5 ms samples').
  nlohmann::json accuracy() const;
  const arbiter::Arbiter& arbiter() const { return arbiter_; }

  /// Per link that has gated flows, for /metrics: windows granted so far (ended or open),
  /// open now, and the arbiter's queued bytes (its fluid queue) at `now`.
  struct LinkWindowStats {
    arbiter::LinkId link;
    std::uint64_t granted = 0;
    std::uint64_t open = 0;
    std::uint64_t revoked = 0;
    double queued_bytes = 0;
  };
  std::vector<LinkWindowStats> link_stats(Nanos now) const;
  /// Windows open at `now` or ended after `since`, as JSON rows (times in s since `origin`;
  /// "end_s" null while open).
  nlohmann::json recent_windows(Nanos origin, Nanos since, Nanos now) const;

 private:
  // (iteration, sending stage, replica, receiving stage, program tag)
  using GroupKey = std::tuple<int, int, int, int, std::uint32_t>;
  struct Member {
    int src = 0, dst = 0;
    std::string src_node, dst_node;
    int flow = 0;
  };
  struct Group {
    arbiter::TransferId id = 0;
    arbiter::LinkId link;
    std::vector<Member> members;
    std::uint64_t payload = 0;
    bool holds_gates = false;
    bool agents_granted = false;
    std::map<int, std::uint64_t> base;  // flow -> its bytes when the window opened
    std::optional<Nanos> wire_first, wire_last;
    int delivered = 0;
    int iteration = 0;
    std::uint32_t tag = 0;
  };
  struct Message {  // a WAN send in the plan: its group (without the iteration) and flow
    int src_stage = 0, dp = 0, dst_stage = 0;
    arbiter::TransferKind kind = arbiter::TransferKind::activation;
    int microbatch = -1;
    std::uint64_t bytes = 0;
    Nanos needed_at = 0;
  };

  void act(WindowActions& out, Nanos now);
  void switch_gates(Group& g, bool open, WindowActions& out);
  void grant_agents(Group& g, WindowActions& out);

  std::string run_id_;
  const workload::Plan& plan_;
  arbiter::Arbiter arbiter_;
  Nanos lookahead_ = 0;
  std::map<arbiter::LinkId, std::vector<shaping::GatedFlow>> flows_;
  std::map<std::pair<int, int>, std::pair<arbiter::LinkId, int>> flow_of_;  // (src, dst) -> link, flow
  std::map<std::tuple<int, int, std::uint32_t>, Message> messages_;        // (src, dst, tag)
  std::map<GroupKey, Group> groups_;
  std::map<arbiter::TransferId, GroupKey> by_id_;
  std::map<std::pair<arbiter::LinkId, int>, int> open_count_;
  std::map<std::pair<arbiter::LinkId, int>, shaping::FlowCounters> last_counters_;
};

}  // namespace wanlab::run
