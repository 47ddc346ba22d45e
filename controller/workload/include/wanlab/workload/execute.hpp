#pragma once
// Runs worker programs on a virtual clock and produces the reports the agents would send:
// the reference semantics of a program, with injected compute and transfer times and no
// contention. Used by the tests, by quick estimates, and as the oracle the flow-level
// simulator and the agents are compared against.
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "wanlab/common/program.hpp"
#include "wanlab/common/units.hpp"
#include "wanlab/workload/plan.hpp"

namespace wanlab::workload {

/// How long `op` (forward, backward or optimizer) takes on `worker`.
using ComputeTime = std::function<Duration(int worker, const program::Op& op)>;
/// How long after its send starts a message of `bytes` from `src` arrives at `dst`.
using CommTime = std::function<Duration(int src, int dst, std::uint64_t bytes)>;

/// Thrown when some worker waits for something that can never happen.
class DeadlockError : public std::runtime_error {
 public:
  struct Blocked {
    int worker = 0;
    int iteration = 0;
    std::size_t op = 0;   // index in the worker's program
    std::string waiting;  // e.g. "recv 1024 bytes tag 3 from worker 2"
  };
  /// A worker stuck at op `pc` of its program: a receive names what it waits for, any
  /// other op its kind and the executor that ran it ("simulated", "ns-3 reference").
  static Blocked at(int worker, int iteration, std::size_t pc, const program::Op& op, std::string_view executor);
  explicit DeadlockError(std::vector<Blocked> blocked);
  const std::vector<Blocked>& blocked() const { return blocked_; }

 private:
  std::vector<Blocked> blocked_;
};

/// Executes `iterations` iterations of every program (programs[i].worker must be i), all
/// workers starting at 0. A send starts at once and its message arrives `comm` later (a
/// rendezvous send: from the later of its send and its recv's posting plus comm(receiver,
/// sender, 0), the notice's one-way delay); a
/// recv blocks until its message has arrived (a recv_wait span when it had to wait); a ring
/// all-reduce takes 2(n-1) steps, each ending when this rank's chunk has reached the next
/// rank and the previous rank's chunk has reached this one. Throws DeadlockError when the
/// programs cannot finish, std::invalid_argument for malformed programs (a bad peer, a
/// message sent twice or never received, an all-reduce whose ranks disagree).
std::vector<program::WorkerReport> execute(const std::vector<program::WorkerProgram>& programs, int iterations,
                                           const ComputeTime& compute, const CommTime& comm);

/// Modeled compute: an op's FLOPs at the worker's effective FLOP/s.
ComputeTime modeled_compute(const Plan& plan);

/// Transfers alone on the lab's links: one-way delay plus serialization at the link rate
/// times the scenario's scale (WAN links between DCs; the LAN inside one, where an
/// unshaped LAN adds no serialization time).
CommTime uncontended_comm(const Plan& plan);

}  // namespace wanlab::workload
