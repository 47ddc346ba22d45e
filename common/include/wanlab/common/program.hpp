#pragma once
// What one emulated GPU does in one training iteration: a worker program, an ordered list
// of operations. The controller builds the programs from a scenario (controller/workload),
// sends each agent those of its GPUs, and the agent's stage workers execute them; the
// flow-level simulator executes the same programs on a virtual clock.
//
// Semantics, per worker, in list order:
//   forward / backward / optimizer: compute `flops` on this GPU (modeled: wait
//       flops / effective FLOP/s; cuda: the stage's GEMMs). Blocks the worker.
//   send:      starts sending `bytes` to worker `peer`, tagged `tag`, and returns at once
//              (like an asynchronous isend): compute goes on while the bytes travel.
//              With `rendezvous` set (gloo, NCCL send/recv), the bytes leave only once
//              the receiver has reached the matching recv (posted its receive) and its
//              notice of that has crossed back to the sender: one one-way delay from the
//              receiver to the sender after the later of the two. The matching recv
//              carries the flag too: there the receiver sends that notice.
//   recv:      waits until `bytes` tagged `tag` from worker `peer` have fully arrived
//              (they may have arrived earlier; arrival order between tags is free).
//   allreduce: ring all-reduce of a `bytes` buffer among `ring` (worker ids in ring
//              order, this worker included): 2(n-1) steps, each sending bytes/n to the
//              next rank and receiving bytes/n from the previous one. Blocks the worker.
//              With `rendezvous` set, the first step's chunk leaves only once the next
//              rank has reached the all-reduce and its notice has crossed back (NCCL's and
//              gloo's receivers grant the credit), so the ring's members start together, as
//              the simulator's collectives do; without it the chunk leaves at once.
//   A backward's `part` says which gradients it computes: both (full), only the input's
//   (zero-bubble's B) or only the weights' (its W, which no other op waits for); each
//   half costs one pass of the forward GEMMs. A compute op's `chunk` names the model
//   chunk (virtual stage) it runs with interleaved schedules (WorkerProgram::chunks).
// A (peer, tag) pair is unique per direction within one iteration; the wire adds the
// iteration number, so programs repeat unchanged every iteration.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace wanlab::program {

enum class OpKind { forward, backward, optimizer, send, recv, allreduce };

std::string to_string(OpKind kind);  // "forward", ...
/// Throws std::invalid_argument naming the unknown kind.
OpKind op_kind_from_string(const std::string& text);

/// Which gradients a backward computes.
enum class BackwardPart { full, input, weight };
std::string to_string(BackwardPart part);  // "full", "input", "weight"

struct Op {
  OpKind kind = OpKind::forward;
  int microbatch = -1;       // forward/backward/send/recv: the micro-batch; -1 otherwise
  double flops = 0;          // forward/backward/optimizer: FLOPs on this GPU
  int peer = -1;             // send/recv: the other worker's id
  std::uint64_t bytes = 0;   // send/recv: payload; allreduce: the buffer each rank holds
  std::uint32_t tag = 0;     // send/recv: matches a send to its recv
  std::vector<int> ring;     // allreduce: worker ids in ring order, this worker included
  bool rendezvous = false;   // send: wait for the receiver's recv to be posted; recv: say so; allreduce: both, first step (above)
  int chunk = 0;             // forward/backward: the model chunk (0 without interleaving)
  BackwardPart part = BackwardPart::full;  // backward: which gradients
  bool operator==(const Op&) const = default;
};

/// The shapes a stage's GPU runs, for real (cuda) compute: GEMMs of `layers` transformer
/// layers on `tokens` = micro-batch size x sequence length, split `tp` ways.
struct StageShape {
  int layers = 0;
  std::int64_t tokens = 0;
  int hidden = 0;
  int ffn_hidden = 0;
  int heads = 0;
  int kv_heads = 0;
  int seq_len = 0;
  int vocab = 0;          // > 0 on the stage that computes the LM head (the last one)
  bool gated_mlp = false; // SwiGLU: three MLP matrices instead of two
  int tp = 1;
  bool operator==(const StageShape&) const = default;
};

struct WorkerProgram {
  int worker = 0;      // global id, one per GPU
  int stage = 0;
  int dp_rank = 0;
  int tp_rank = 0;
  StageShape shape;
  std::vector<Op> ops; // one iteration
  /// Interleaved schedules: the shape of each model chunk this GPU runs (op.chunk indexes
  /// it); empty: every compute op runs `shape`.
  std::vector<StageShape> chunks;
  /// The shape compute op `op` runs.
  const StageShape& shape_of(const Op& op) const {
    return chunks.empty() ? shape : chunks.at(static_cast<std::size_t>(op.chunk));
  }
  bool operator==(const WorkerProgram&) const = default;
};

/// One GEMM shape, repeated `count` times (batched attention GEMMs, one per head and sample):
/// C (m x n) = A (m x k) B (k x n).
struct Gemm {
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t count = 1;
  bool operator==(const Gemm&) const = default;
};

/// The GEMMs one GPU of a stage runs for one micro-batch. `pass` is forward or backward
/// (backward: the forward GEMMs twice, for the input and the weight gradients). Per layer,
/// with T = tokens, h = hidden, d = h / heads, f = ffn_hidden, split tp ways:
///   QKV T x h x (h + 2 kv_heads d)/tp; scores s x s x d and context s x d x s, each
///   (T/s)(heads/tp) times; output T x h/tp x h; MLP up T x h x f/tp (twice if gated) and
///   down T x f/tp x h; plus, where vocab > 0, the LM head T x h x vocab/tp.
std::vector<Gemm> stage_gemms(const StageShape& shape, OpKind pass);
/// Sum of 2 m n k count.
double gemm_flops(const std::vector<Gemm>& gemms);

/// The bytes one ring all-reduce step moves between neighbours: the buffer split into
/// `ranks` chunks, rounded up so that the chunks cover it.
std::uint64_t ring_chunk_bytes(std::uint64_t bytes, std::size_t ranks);

/// What a worker did, as it reports it: times in ns since the run's start barrier.
enum class SpanKind { forward, backward, optimizer, send, recv_wait, allreduce, prefill };
std::string to_string(SpanKind kind);
/// The span a compute op (forward, backward, optimizer) leaves: forward, backward, optimizer.
SpanKind compute_span_kind(OpKind kind);
SpanKind span_kind_from_string(const std::string& text);  // throws std::invalid_argument

struct Span {
  SpanKind kind = SpanKind::forward;
  int iteration = 0;
  int microbatch = -1;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::uint64_t bytes = 0;  // send/recv_wait/allreduce
  int peer = -1;            // send/recv_wait
  bool operator==(const Span&) const = default;
};

struct IterationTime {
  std::int64_t start_ns = 0;  // when the worker began the iteration's first op
  std::int64_t end_ns = 0;    // when its last blocking op finished
  bool operator==(const IterationTime&) const = default;
};

struct WorkerReport {
  int worker = 0;
  std::vector<IterationTime> iterations;
  std::vector<Span> spans;  // compute spans never overlap each other; send spans may overlap anything
  bool operator==(const WorkerReport&) const = default;
};

nlohmann::json to_json(const Span& span);
nlohmann::json to_json(const WorkerReport& report);
Span span_from_json(const nlohmann::json& j);
WorkerReport worker_report_from_json(const nlohmann::json& j);

nlohmann::json to_json(const Op& op);
nlohmann::json to_json(const StageShape& shape);
nlohmann::json to_json(const WorkerProgram& program);
/// Throw std::invalid_argument naming the field and the reason.
Op op_from_json(const nlohmann::json& j);
StageShape stage_shape_from_json(const nlohmann::json& j);
WorkerProgram worker_program_from_json(const nlohmann::json& j);

}  // namespace wanlab::program
