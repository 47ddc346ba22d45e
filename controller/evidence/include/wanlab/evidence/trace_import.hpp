#pragma once
// Real traces in: the PyTorch profiler's Chrome-trace JSON of a distributed job, one file per
// rank (Kineto's {"traceEvents": [...]} or the autograd profiler's bare event list), into
// wanlab worker programs (common/program.hpp) that the simulator (and a plan) replays.
//
// Per rank, on the thread that ran the training loop (the one with ProfilerStep#N spans; else
// the busiest): each ProfilerStep is one iteration. Communication events become program ops:
//   send       c10d::send, gloo:send, nccl:send, record_param_comms "send"
//   recv       c10d::recv_, gloo:recv, nccl:recv, record_param_comms "recv"
//   allreduce  c10d::allreduce_, gloo:all_reduce, nccl:all_reduce, record_param_comms "allreduce"
// (a c10d:: event and the backend's event right after it are one operation). The time between
// two of them is compute: a forward, backward or optimizer op (by which of autograd's
// backward events, Optimizer.step or other work fills most of it) of gap x effective FLOP/s
// FLOPs, so it lasts as long as measured on the GPU the programs are counted for. A send
// blocks the loop (dist.send is synchronous): the time it took counts as the sender's compute
// before an asynchronous send op, so the message leaves when it left.
// Peers come from the event's args (dst, src, Peer rank...), else, in a two-rank job, the other
// rank; bytes from its args (In msg nelems, Input Dims with Input type), else from
// ImportOptions::message_bytes. Iterations whose operations differ from the first are left
// out, and said so. Everything else not carried over is listed in `unsupported`: other
// collectives (their time is kept as compute), events on other threads, GPU kernels, events
// that are not complete spans.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "wanlab/common/program.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/workload/plan.hpp"

namespace wanlab::evidence {

struct ImportOptions {
  /// Payload of a point-to-point message or all-reduce buffer where the trace does not say.
  std::optional<std::uint64_t> message_bytes;
  /// FLOP/s the compute ops are counted at (the replay's GPU: peak x MFU).
  double effective_flops = 989e12 * 0.4;
};

struct ImportedJob {
  std::string source = "pytorch profiler (Chrome trace)";  // what the files are
  std::vector<std::string> files;
  std::vector<program::WorkerProgram> programs;  // by rank
  int iterations = 0;                            // ProfilerSteps imported (per rank)
  /// Per imported iteration, the slowest rank's ProfilerStep duration (s), and their mean.
  std::vector<double> measured_iteration_s;
  double measured_iteration_mean_s = 0;
  /// The FLOP/s compute ops were counted at (ImportOptions::effective_flops): a scenario
  /// replaying import.json (`programs`) computes at this rate, so compute lasts as measured.
  double effective_flops = 0;
  std::vector<std::string> unsupported;  // what was not carried over, one line each
  std::vector<std::string> notes;        // how what was carried over was read
  nlohmann::json to_json() const;        // import.json
};

/// Reads the traces (rank order). Throws EvidenceError naming the file, the JSON path and
/// the reason.
ImportedJob import_pytorch_traces(const std::vector<std::filesystem::path>& files, const ImportOptions& options);
/// The same from documents already read; `names` name them in errors.
ImportedJob import_pytorch_documents(const std::vector<nlohmann::json>& docs, const std::vector<std::string>& names,
                                     const ImportOptions& options);

/// A plan that runs the imported programs on `topo`: rank r on the DC `placement[r]` (DC
/// names; empty: rank r in DC r mod the DC count), each rank a GPU of its own, pipeline
/// stage r, computing at `effective_flops` (what the import counted FLOPs at). Throws
/// EvidenceError when a DC is unknown or too small.
workload::Plan replay_plan(const ImportedJob& job, const core::Topology& topo, const std::vector<std::string>& placement,
                          double effective_flops, int iterations, int warmup);

/// Messages per direction (sending rank, receiving rank), as an importer counts them.
using MessageCounts = std::map<std::pair<int, int>, std::uint32_t>;

/// Throws EvidenceError unless every direction's sends and receives pair up one for one,
/// naming the ranks' files (`names`); `per` says how the counts were taken (e.g. " an
/// iteration", or empty).
void check_message_pairs(const MessageCounts& sent, const MessageCounts& received,
                         const std::vector<std::string>& names, std::string_view per);

}  // namespace wanlab::evidence
