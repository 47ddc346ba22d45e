#pragma once
// The flow-level simulator: a scenario's worker programs (workload::Plan) executed on a
// virtual clock over a fluid network (flow_network.hpp), with the WAN windows of the same
// arbiter the lab runs. Pure: everything comes in as arguments, nothing is read or written.
// Its parts: the event loop and the arbiter bridge (simulator.cpp), typed events
// (event_queue.hpp), shared state (sim_context.hpp), the workers' ops (workers.hpp), TCP
// (tcp_model.hpp), the burst models (burst_model.hpp: shared, fifo; paced_link.hpp: paced),
// the all-reduce (collectives.hpp).
//
// What it models, per iteration, as the lab runs it:
//   - compute: an op's FLOPs at the worker's effective FLOP/s (workload::modeled_compute);
//   - pipeline messages: a send starts at once (asynchronous); across DCs its bytes are one
//     flow over the directed WAN link, as `connections` TCP connections, each capped at
//     tcp_window / RTT (RTT: the link's delay plus its reverse link's); inside a DC, a flow
//     from the sender's node link up to the receiver's node link down (see `lan_rate_bps`);
//     on one node, no network. It is delivered one-way delay after its last byte leaves.
//     Messages between one pair of workers go out one after the other, as the agents
//     write them to the pair's connections. A message within its connections' windows
//     goes as TCP sends it (SimOptions::bursts, paced: congestion window, pacing rate,
//     the link's FIFO queue, drop-tail loss); longer ones, and every message with
//     shared bursts, share the link max-min with the others.
//     Bytes on links are wire bytes: payload x
//     workload::kWireOverhead;
//   - WAN windows: each stage boundary's message of one pipeline for one micro-batch (its
//     TP ranks' shares together) is one arbiter transfer, asked for when it is sent, with
//     the lab's bytes, kind, stages and needed_at (run::RunWindows does the same in the
//     lab). Its flow starts when the transfer is granted (the lab's gate opens: the lab
//     grants the agents ahead, so their bytes already wait at the gate) and pauses while
//     a window is revoked; the arbiter hears the flow's bytes every `progress_period`, as
//     the lab samples its gates' counters, and of the delivery when it happens. Exclusive
//     policies therefore gate flows as in the lab; `fair` grants everything at once.
//     All-reduce traffic is not windowed (as in the lab);
//   - DP all-reduce: a ring among the replicas of a stage (program::Op::allreduce). With
//     every step taking the same time c, rank r starts step k at
//     max over d <= k of (entry of rank r-d) + k c, so every rank ends at
//     max(entries) + 2(n-1) c: the collective starts when its last rank enters, all ranks
//     step together, and each ring hop carries 2(n-1) chunks. It is run that way: one
//     transfer per ring hop with all its steps' bytes, ending when the last hop's bytes
//     are off their link plus 2(n-1) one-way delays of the slowest hop (exactly
//     workload::execute's result when nothing else shares the links). A hop inside a DC
//     is a flow; a hop across DCs is, with the paced bursts (the default) and a TCP window,
//     a message of the pair's connections whatever its size, sent as TCP sends it (as the
//     lab's agents write the steps to those connections; the ns-3 reference does the
//     same), else a flow capped at the connections' window over the RTT.
//
// Symmetry used (exact): the TP ranks of a replica sit on one node and run the same program
// with the same peers' ranks, so the tp ranks' flows between two replicas start together,
// take the same path and get the same rates. The simulator runs TP rank 0 of every
// (stage, replica) with each flow standing for tp x connections connections, and keeps its
// report for every TP rank of the group (SimResult::groups; peers shift to each rank's own).
#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "wanlab/arbiter/arbiter.hpp"
#include "wanlab/common/program.hpp"
#include "wanlab/workload/metrics.hpp"
#include "wanlab/workload/plan.hpp"
#include "wanlab/workload/wan_transfer.hpp"

namespace wanlab::sim {

/// One directed WAN link's rate over time (a replayed trace), unscaled: the scenario's
/// scale applies as to the link's own rate.
struct RateStep {
  std::int64_t at_ns = 0;  // from the run's start (each loop's start)
  double rate_bps = 0;
};
struct LinkTrace {
  std::size_t link = 0;  // index into Topology::links
  std::vector<RateStep> steps;
  std::int64_t loop_ns = 0;  // > 0: the steps start over every loop_ns
};

/// Wire bytes of the ACKs a data flow sends back, per wire byte of data: one 66-byte frame
/// per two 1514-byte frames.
inline constexpr double kAckFraction = 66.0 / (2 * 1514.0);
/// Bytes of payload per TCP segment (1,500-byte MTU, TCP timestamps).
inline constexpr double kMss = 1448;

/// One compute op of one TP group in one iteration: the group's worker id (TP rank 0), the
/// iteration, the op's span kind (forward, backward, optimizer) and micro-batch (-1: none).
struct ComputeOpKey {
  int worker = 0;
  int iteration = 0;
  program::SpanKind kind = program::SpanKind::forward;
  int microbatch = -1;
  auto operator<=>(const ComputeOpKey&) const = default;
};

struct SimOptions {
  /// Each node's link to its DC's network, each direction (bit/s, applied as given, not
  /// scaled). nullopt: the topology's LAN rate x scale; 0 there means unlimited (the lab's
  /// unshaped veths), where a message inside a DC takes only the LAN delay.
  std::optional<double> lan_rate_bps;
  /// The most one TCP connection keeps in flight (bytes): its rate stays below
  /// window / RTT. nullopt: what the lab runs with (workload::run_tcp_window: the
  /// scenario's tcp_window x scale, or about 3 MiB, Linux's default buffers). 0: no ceiling.
  std::optional<double> tcp_window_bytes;
  /// TCP slow start: a connection's window starts at `initial_window_bytes` and doubles
  /// every RTT while it sends, up to tcp_window_bytes; it keeps what it reached between
  /// messages (with the scenario's tcp_slow_start_after_idle, it starts over after an idle
  /// RTO, max(200 ms, RTT)). Off: every connection is at its full window from the start.
  bool slow_start = false;
  double initial_window_bytes = 10 * kMss;
  /// How a WAN message whose bytes per connection fit in the window crosses its link;
  /// longer messages are window-limited flows and share it max-min fairly in every model,
  /// but for the all-reduce's WAN hops, which the paced model sends whatever their size.
  ///   - paced (default): as its TCP connections send it. Each connection (the pair's tp x
  ///     connections alike) has a congestion window that starts at initial_window_bytes and
  ///     grows in slow start by what is ACKed while at least half of it is in use (Linux's
  ///     rule for an application-limited sender), until HyStart's delay test sees the queue
  ///     (a round's first ACKs more than RTT / 8, 4 to 16 ms, above the path's RTT), then by
  ///     CUBIC's window function while it is full (tcp_model.hpp); at most
  ///     tcp_window_bytes. A message enters the link's FIFO queue at Linux's pacing rate (2 x
  ///     cwnd / SRTT in slow start below half the threshold, else pacing_ratio x cwnd /
  ///     SRTT; in windowed runs at most the link's rate over the transfer's connections,
  ///     the lab's SO_MAX_PACING_RATE) while its connections' window has room, and its ACKs
  ///     come back a round trip after each byte left the queue (SRTT: their smoothed delay).
  ///     The link sends its queue in the order the bytes entered: messages entering together
  ///     interleave, one that entered first leaves first, and a message queued behind
  ///     another on its connections enters as soon as the window lets it (not when the one
  ///     before has left the link). What finds the queue full (the topology's `queue`, else
  ///     1.5 x the bandwidth-delay product) is lost (with queue_overflow): CUBIC's cut (x 0.7,
  ///     one per round trip), and it is sent again once the sender hears of it, a round
  ///     trip and the full queue's delay after the loss; what is sent again is not lost
  ///     again. The arbiter hears of the bytes that entered the queue, as the lab's gate
  ///     counters count them (bench/README.md, "Simulator", "TCP into a FIFO queue").
  ///   - shared: a max-min fair flow like the others, capped at the window over the RTT.
  ///   - fifo: the message leaves at once and waits whole in the link's FIFO queue; the link
  ///     serves such bursts one after the other in arrival order, each at the full rate
  ///     (with queue_overflow).
  enum class Bursts { shared, fifo, paced };
  Bursts bursts = Bursts::paced;
  /// Linux's tcp_pacing_ca_ratio (120 %): a connection past slow start (or at least at half
  /// its threshold) paces at this x cwnd / SRTT. Bursts::paced only.
  double pacing_ratio = 1.2;
  /// Bursts::paced: what enters a link's queue is cut into pieces this long, and wherever
  /// a message starts or ends; the link serves a piece once it is whole, so a byte leaves
  /// at most a piece later than an exact fluid FIFO would send it (its ACK goes back from
  /// when that FIFO would have sent it), and ACKs are taken in per piece: the model's step
  /// (`--paced-piece`).
  std::int64_t paced_piece_ns = 1'000'000;
  /// Bursts::paced, many messages entering a link at once (each cut visits each of them):
  /// pieces this long per message when that is at least 4 x paced_piece_ns, and then cut
  /// on their own clock only (a message that starts, comes back or ends in between does so
  /// within the open piece, from its own instant; its last byte leaves with the piece).
  /// 0: always paced_piece_ns.
  std::int64_t paced_piece_ns_per_message = 100'000;
  /// Bursts::paced, faster: while every message entering a link is past slow start and its
  /// window holds all the rest of it, pieces are this long (or end with a message's last
  /// byte) and the link sends each as it fills; their ACKs come back as those of
  /// paced_piece_ns pieces would. Fewer pieces at thousands of GPUs under exclusive windows,
  /// at the cost of results a little off plain pieces' (bench/README.md, "Streamed
  /// pieces", has how far). 0: plain pieces only.
  std::int64_t paced_stream_ns = 0;
  /// Every WAN data flow sends its ACKs back on the reverse link, as the lab's TCP does:
  /// one 66-byte frame (Ethernet, IP, TCP with timestamps) per two full segments (Linux's
  /// delayed ACK), kAckFraction of the data's wire bytes, at that fraction of the data's
  /// rate. They take that much of the reverse link from whatever it carries (a window
  /// there included); the lab's counters show them (bench/README.md, "ACKs and
  /// grants"). Bursts::paced: while a link sends its queue's pieces, their ACKs hold
  /// kAckFraction of its rate on the reverse link (one reservation for the whole busy
  /// stretch, not a flow per piece), and count kAckFraction of each piece's bytes there.
  /// false: ACKs take no capacity.
  bool acks = true;
  /// Each compute op (forward, backward, optimizer) takes its modeled time x (1 + u), u
  /// drawn uniformly from [-compute_jitter, +compute_jitter] per op and TP group, from a
  /// generator seeded with the scenario's seed (the same run every time). Identical
  /// replicas on identical GPUs are otherwise in exact lockstep, which no real run keeps:
  /// real GPUs and hosts vary from op to op by more than the default 0.1 %, and a FIFO
  /// queue (Bursts::paced) turns the smallest head start into a lasting one, as it does in
  /// the lab (bench/README.md, "Simulator", "Pipelines in lockstep" and "TCP into a FIFO
  /// queue", with the cross-check's results against the jitter). 0: the FLOP model's times
  /// exactly. At most 0.5.
  double compute_jitter = 0.001;
  /// The link's queue holds what the lab's does (the topology's `queue`, or 1.5 x the
  /// bandwidth-delay product at the run's rate): the part of a burst that finds it full is
  /// lost and sent again after a retransmission timeout (Linux: about SRTT + 200 ms; what
  /// is sent again comes back in slow start and is not lost again), and the message is
  /// delivered after its last part,
  /// holding its connections until then. Only with Bursts::fifo, and only where the lab does
  /// not pace (policies without exclusive windows: windowed runs pace every WAN connection
  /// at its share of the link). false: an unlimited queue.
  bool queue_overflow = true;
  /// How often the arbiter hears of the flows' progress (the lab samples every 5 ms).
  std::int64_t progress_period_ns = 5'000'000;
  arbiter::ArbiterOptions arbiter;
  std::vector<LinkTrace> traces;
  /// Delays (ns) before compute ops start: the op waits that long on its GPU before it
  /// computes (its span starts later). BubbleTea's feedback (sim/prefill.hpp): what a
  /// prefill that held the GPU when training needed it cost that op.
  std::map<ComputeOpKey, std::int64_t> compute_delays;
};

/// "shared", "fifo" or "paced".
std::string to_string(SimOptions::Bursts b);
/// The model named so by to_string(), or nullopt.
std::optional<SimOptions::Bursts> parse_bursts(std::string_view name);

/// A directed WAN link's traffic over the whole run.
struct LinkTotals {
  std::size_t src = 0, dst = 0;
  double wire_bytes = 0;
  double payload_bytes = 0;
};

struct SimStats {
  std::uint64_t events = 0;     // discrete events processed
  std::uint64_t flows = 0;      // flows started (each standing for one or more connections)
  std::uint64_t transfers = 0;  // arbiter transfers
  std::uint64_t fillings = 0;   // max-min recomputations
  std::uint64_t bundles_filled = 0;
  std::uint64_t overflows = 0;      // bursts that found their link's queue full (in part)
  double overflow_bytes = 0;        // wire bytes lost to full queues and sent again
  std::size_t simulated_workers = 0;  // TP rank 0 of each (stage, replica)
};

/// Bursts::paced: one (sender, receiver) pair's TCP connections at the end of the run (its
/// tp x connections connections alike), as the lab's agents report theirs.
struct TcpEnd {
  int src = -1, dst = -1;  // workers: TP rank 0 of the sending and receiving groups
  int connections = 0;
  double cwnd_bytes = 0;
  double ssthresh_bytes = 0;  // infinity: still in its first slow start
  double srtt_ns = 0;
  double resent_bytes = 0;  // per connection: lost to a full queue and sent again
};

/// One DC's rails over a run, for the report.
struct RailStats {
  std::size_t dc = 0;
  std::string policy;               // arbiter::RailPolicy::name()
  bool circuits = false;            // OCS circuits gated the traffic
  std::vector<std::string> phases;  // phases with a configuration, the first one set up before the run
  int reconfigurations = 0;
  std::int64_t reconfiguring_ns = 0;  // total time the rails were switching (ns)
  std::uint64_t held = 0;      // transfers (messages, ring hops) that waited for their circuits
};

struct SimResult {
  /// One report per TP group, the simulated TP rank 0 of each (stage, replica), by worker
  /// id. TP rank t of a group is worker id worker + t: it ran the same spans at the same
  /// times, with its peers' ranks shifted by t (the symmetry above). Keeping one report per
  /// group, not tp copies, is what lets large runs stay in memory; `report`, `reports` and
  /// `by_worker` give every worker's.
  std::vector<program::WorkerReport> groups;
  int tp = 1;
  std::vector<LinkTotals> wan;                 // per topology link, same order
  std::vector<arbiter::WindowRecord> windows;  // the arbiter's windows, as they ended
  /// Per arbiter transfer id: when its first bytes went onto the WAN link and when its
  /// last left it (the flow's start and end). windows.csv's wire_first_s and wire_last_s;
  /// the lab's are its gate's counters, before the link's queue.
  std::vector<workload::WireTimes> wire;
  std::vector<TcpEnd> tcp;  // Bursts::paced: every pair whose connections sent a message
  std::vector<RailStats> rails;  // per DC with rails (sim/rails.hpp), in topology order
  SimStats stats;

  /// Worker `worker`'s own report (a copy: worker id and peers its own). Throws
  /// std::out_of_range for a worker the run lacks.
  program::WorkerReport report(int worker) const;
  /// Every worker's own report, by worker id (tp copies of each group's).
  std::vector<program::WorkerReport> reports() const;
  /// Every worker's timeline without copies, by worker id: its group's report, which has
  /// the group's TP rank 0's worker id and peers (what workload::summarize and
  /// run::make_summary read is the same for every rank).
  workload::ReportRefs by_worker() const;
  /// The end of the run's last iteration (ns).
  std::int64_t end_ns() const;
};

/// Simulates `plan.scenario.iterations` iterations under the scenario's policy and
/// connections. Throws std::invalid_argument for an unknown policy, bad options or a
/// plan whose messages cross a DC pair without a link, workload::DeadlockError when the
/// programs cannot finish.
SimResult simulate(const workload::Plan& plan, const SimOptions& options = {});

/// The reports of the workers `keep` (worker ids) renumbered 0..n-1 with the matching
/// plan, for timelines of large runs (workload::chrome_trace over a subset). Throws
/// std::invalid_argument for a worker the plan or the reports lack.
struct PlanSubset {
  workload::Plan plan;
  std::vector<program::WorkerReport> reports;
};
PlanSubset subset(const workload::Plan& plan, const std::vector<program::WorkerReport>& reports,
                  const std::vector<int>& keep);
PlanSubset subset(const workload::Plan& plan, const SimResult& result, const std::vector<int>& keep);

/// Up to this many GPUs a run's timeline.json shows every GPU's spans; above, one GPU per
/// stage (per_stage_workers), which keeps the file small at paper scale.
inline constexpr std::size_t kFullTimelineGpus = 256;
/// One GPU per stage: TP rank 0 of replica 0 (worker ids, for subset()).
std::vector<int> per_stage_workers(const workload::Plan& plan);

/// summary.json's "rails" (null without rails DCs): per DC with rails, its fabric, policy,
/// phases, reconfigurations (in all and per iteration), the time its rails were switching
/// (seconds, and as a share of the run), the transfers that waited for their circuits, and
/// core::rails_bill's power and cost of its rails as packet switches and as OCS (and their
/// ratios) beside the NICs' own.
nlohmann::json rails_json(const core::Topology& topo, const workload::Plan& plan, const SimResult& result);

}  // namespace wanlab::sim
