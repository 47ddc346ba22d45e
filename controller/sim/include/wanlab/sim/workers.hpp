#pragma once
// The simulated workers: TP rank 0 of every (stage, replica) (simulator.hpp's symmetry),
// each a TP group with its program, where it runs and how far it got, and the ops of all
// their programs side by side in one array by slot, with every send matched to the recv it
// feeds.
#include <cstdint>
#include <vector>

#include "wanlab/common/program.hpp"
#include "wanlab/sim/sim_context.hpp"

namespace wanlab::sim {

class Workers {
 public:
  // One op of a simulated program, what the event loop reads of it, in one array by slot
  // (ops): the TP rank-0 programs' ops side by side, half an Op's size, not scattered among
  // the other ranks' programs (at thousands of GPUs the plan's programs are large).
  struct SimOp {
    program::OpKind kind = program::OpKind::forward;
    bool gradient = false;  // send: an odd tag, a gradient (else an activation)
    bool rendezvous = false;  // send: leaves once its recv is posted (program::Op::rendezvous)
    int microbatch = -1;
    int peer = -1;
    std::uint32_t target = kNone;  // send: the receiver's slot
    std::uint64_t bytes = 0;
    double seconds = 0;  // compute: FLOPs / the worker's effective FLOP/s
  };
  struct Group {
    int worker = 0;  // TP rank 0 of its (stage, replica)
    const program::WorkerProgram* prog = nullptr;
    std::size_t dc = 0;
    std::size_t node = 0;  // global node index
    int iteration = 0;
    std::size_t pc = 0;
    Nanos t = 0;
    enum class Wait { none, compute, recv, allreduce } wait = Wait::none;
    std::uint32_t wait_slot = kNone;
    Nanos wait_from = 0;
    int allreduce_seq = 0;
    std::uint32_t slot_base = 0;  // slot of op i: slot_base + i (ops)
    std::size_t nops = 0;
    program::WorkerReport report;
    bool done = false;
  };

  /// The plan's TP groups and their ops. Throws std::invalid_argument for a plan whose
  /// programs and workers do not match, TP ranks of a group on different nodes, a send
  /// nobody receives or a message across a DC pair without a WAN link.
  explicit Workers(const SimContext& ctx);

  std::vector<Group> groups;
  std::vector<SimOp> ops;                 // by slot
  std::vector<std::uint32_t> slot_owner;  // group, by slot

  /// When the recv at `slot` is needed: the compute before it in its program
  /// (workload::compute_before_each), the arbiter's needed_at.
  Nanos needed_at(std::uint32_t slot);
  /// A key for (slot, iteration), for messages that came before their recv.
  std::uint64_t arrival_key(std::uint32_t slot, int iteration) const {
    return static_cast<std::uint64_t>(slot) * static_cast<std::uint64_t>(iterations_ + 1) +
           static_cast<std::uint64_t>(iteration);
  }

 private:
  void match_sends();

  const SimContext& ctx_;
  int iterations_ = 0;
  std::vector<Nanos> needed_at_;
};

}  // namespace wanlab::sim
