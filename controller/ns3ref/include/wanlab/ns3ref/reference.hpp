#pragma once
// The packet-level reference executor: a scenario's worker programs (workload::Plan, the
// programs the agents, the analytic executor and the simulator run) executed over ns-3
// (3.37), for cross-checking the flow-level simulator at full size. Slow (minutes per run)
// and not a product path. Single-threaded; ns-3 keeps global state (its simulator, node
// list, address allocator), so one run() at a time per process.
//
// What it models:
//   - each directed WAN link an ns-3 point-to-point device at the link's rate x scale and
//     one-way delay, behind it one drop-tail queue of the lab's size (the topology's
//     `queue`, else 1.5 x the bandwidth-delay product, core::default_queue_packets); one
//     router per DC, one host per DC behind it on a 400 Gbit/s access link;
//   - TCP as Linux runs it: CUBIC with HyStart and Linux's rule for a window the sender
//     does not use (tcp_is_cwnd_limited, which ns-3 3.37 lacks: packet_net.cpp's
//     TcpCubicLinux), initial window 10, pacing (ratios 200 % /
//     120 %), SACK, timestamps, delayed ACKs (2 segments, 40 ms), PRR recovery, minimum RTO
//     200 ms, 1448-byte segments, send buffer = the run's TCP window
//     (workload::run_tcp_window), receive buffer twice that; in runs with exclusive windows
//     each connection paced at most at its link's rate over the transfer's connections
//     (the lab's SO_MAX_PACING_RATE);
//   - per (sending TP group, receiving TP group) pair across DCs, tp x connections TCP
//     connections, opened before the run; a message's bytes striped over them as the
//     agents stripe (equal parts), each connection sending its parts in message order;
//   - the arbiter (the same code as the lab's and the simulator's) on ns-3's clock: every
//     WAN message is a transfer asked for when it is sent; its bytes are written into its
//     sockets only while its window is granted (the lab's gate, moved to the sender: bytes
//     already in the socket when a window is revoked still go); progress is the bytes TCP
//     has sent, reported every progress period; completion when the last byte arrives;
//   - compute as the simulator: FLOPs at the effective FLOP/s, x (1 + u) with the same
//     jitter rule;
//   - the TP symmetry of the simulator: TP rank 0 of each (stage, replica) runs, its
//     messages carrying every rank's share (simulator.hpp);
//   - inside a DC, as the simulator with an unlimited LAN: a message takes the LAN's delay;
//     a limited LAN is refused. All-reduce rings as the simulator runs them: once every
//     rank entered, each hop moves its 2(n-1) chunks at once (across DCs over TCP on its
//     pair's connections, unwindowed; inside a DC instantly), the ring ends when the last
//     hop is done plus 2(n-1) one-way delays of the slowest hop.
// Not modeled: link traces, WAN jitter and loss, asymmetric delays of a link pair, a WAN
// link without its reverse, a limited LAN, prefill (BubbleTea): refused (unsupported()).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "wanlab/arbiter/arbiter.hpp"
#include "wanlab/sim/simulator.hpp"
#include "wanlab/workload/plan.hpp"

namespace wanlab::ns3ref {

struct Options {
  /// As sim::SimOptions::compute_jitter (same rule, the scenario's seed).
  double compute_jitter = 0.001;
  /// How often the arbiter hears of the transfers' progress (the lab samples every 5 ms).
  std::int64_t progress_period_ns = 5'000'000;
  /// The hosts' links to their DC's router (each direction), far above any WAN link.
  double access_rate_bps = 400e9;
  /// The workload starts this long after the connections are opened (handshakes done).
  std::int64_t warmup_ns = 2'000'000'000;
  arbiter::ArbiterOptions arbiter;
};

/// One WAN link's queue over the run.
struct LinkQueue {
  std::uint64_t queue_packets = 0;  // its drop-tail limit (packets; 0 with a byte limit)
  std::uint64_t queue_bytes = 0;    // its limit in bytes (0 with a packet limit)
  std::uint64_t drops = 0;          // packets the full queue dropped
  std::uint64_t dropped_bytes = 0;
  std::uint64_t packets = 0;        // packets sent on the link
};

/// One (sending, receiving) TP group pair's loss recovery over the run, summed over its
/// connections; aligned with Result::run.tcp.
struct PairRecovery {
  std::uint64_t recoveries = 0;  // fast recoveries entered
  std::uint64_t timeouts = 0;    // retransmission timeouts
  double rto_ns = 0;             // the retransmission timeout at the end, mean of the connections
};

struct Result {
  /// As the simulator returns it: per TP group reports, per-link wire and payload bytes
  /// (wire: every byte ns-3 put on the link, headers and ACKs included), the arbiter's
  /// windows, each transfer's first and last byte sent, each pair's TCP state at the end.
  sim::SimResult run;
  std::vector<LinkQueue> queues;  // per topology link
  std::vector<PairRecovery> recovery;  // per entry of run.tcp
  std::uint64_t events = 0;       // ns-3 events executed
  std::uint64_t connections = 0;  // TCP connections opened
};

/// What the reference cannot express of this plan, as one line ("the reference lacks ..."),
/// or nullopt when it can run it.
std::optional<std::string> unsupported(const workload::Plan& plan);

/// Runs `plan.scenario.iterations` iterations. Throws std::invalid_argument with
/// unsupported()'s line for a plan it cannot express, for an unknown policy or bad options,
/// workload::DeadlockError when the programs cannot finish.
Result run(const workload::Plan& plan, const Options& options = {});

}  // namespace wanlab::ns3ref
