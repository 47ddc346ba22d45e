#pragma once
// Worker programs replayed as given: a scenario's `programs` key names a file of per-GPU
// programs (wanlab's program format, common/program.hpp), such as the import.json that
// `wanlab import-trace` writes, and the lab, the simulator and the ns-3 executor run those
// programs in place of the ones built from the model (docs/evidence.md).
//
// The file: {"programs": [WorkerProgram...], "effective_flops": F (optional), ...} (other
// keys, as import.json has them, are ignored), or a bare array of programs. Program i must
// be worker i. Every problem is reported at once, each with its JSON path and reason:
//   an op that is not a program op (unknown kind, bad field), a peer or ring member that is
//   not another rank, a send without its receive (or the other way round, or with other
//   bytes), an all-reduce whose ring members do not all run it, negative FLOPs.
// Replayed, rank r is pipeline stage r, DP replica 0, TP rank 0 (parallelism pp = ranks);
// the scenario's placement (one DC per stage) or rank r in DC r mod the DC count places it.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wanlab/common/program.hpp"
#include "wanlab/core/diagnostics.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/workload/placement.hpp"
#include "wanlab/workload/scenario.hpp"

namespace wanlab::workload {

struct ProgramFile {
  std::vector<program::WorkerProgram> programs;  // by worker id
  /// The FLOP/s the programs' FLOPs were counted at (import-trace: the GPU it was given x
  /// MFU); replayed at this rate, compute lasts as measured. nullopt: the lab's GPUs.
  std::optional<double> effective_flops;
};

/// Checks a parsed document; problems go to `d` (whose file is the programs file).
ProgramFile parse_program_file(const nlohmann::json& doc, core::Diagnostics& d);
/// Reads and checks a file. Throws core::ConfigError listing every problem.
ProgramFile read_program_file(const std::filesystem::path& file);

/// Where a programs scenario's ranks run: the scenario's placement (stage r's one DC), else
/// rank r in DC r mod the DC count, the GPUs of each DC taken in order. Throws
/// core::ConfigError naming the scenario file and `/programs` (more ranks than the
/// topology's GPUs) or `/placement` (an unknown DC, a DC too small).
std::vector<WorkerPlacement> place_programs(const Scenario& scenario, const core::Topology& topo);

}  // namespace wanlab::workload
