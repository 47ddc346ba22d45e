#pragma once
// Real traces in: MLCommons Chakra execution traces (ET), one file per rank, into wanlab
// worker programs, the same ImportedJob the PyTorch import gives (trace_import.hpp).
//
// A Chakra ET file is protobuf (chakra's schema/protobuf/et_def.proto): a sequence of
// messages, each preceded by its length as a varint; the first is the GlobalMetadata, the
// others Nodes. The wire format is decoded here directly (no generated code, no protobuf
// library): of a Node, id (1), name (2), type (3), ctrl_deps (4), data_deps (5),
// start_time_micros (6), duration_micros (7) and the attributes (10) by name: comm_type,
// comm_size, comm_src, comm_dst, num_ops. Unknown fields are skipped, as protobuf does.
//
// Per rank the nodes run in dependency order (ctrl and data deps; among the ready ones the
// lowest id first), one after another:
//   COMP_NODE       a compute op: duration_micros x effective FLOP/s FLOPs (so it lasts as
//                   traced), else num_ops FLOPs; backward when its name says backward (or
//                   bwd, grad), optimizer when it says optim or step, else forward
//   COMM_SEND_NODE  a send of comm_size bytes to rank comm_dst
//   COMM_RECV_NODE  a recv from rank comm_src (the n-th send of a direction matches its
//                   n-th receive)
//   COMM_COLL_NODE  comm_type ALL_REDUCE: an all-reduce of comm_size bytes over all ranks
// Everything else is listed in `unsupported`, with what happened to it: other collectives
// (all-gather, reduce-scatter, ...) and memory, storage, batch and checkpoint nodes keep
// their duration as compute; metadata and invalid nodes are left out.
// The measured iteration is the span of the rank's nodes (start to last end), when the
// trace has start times.
#include <filesystem>
#include <string>
#include <vector>

#include "wanlab/evidence/trace_import.hpp"

namespace wanlab::evidence {

/// Reads the traces (rank order). Throws EvidenceError naming the file, the byte offset
/// and node, and the reason.
ImportedJob import_chakra_traces(const std::vector<std::filesystem::path>& files, const ImportOptions& options);
/// The same from the files' bytes; `names` name them in errors.
ImportedJob import_chakra_documents(const std::vector<std::string>& files, const std::vector<std::string>& names,
                                    const ImportOptions& options);
/// Whether a file looks like a Chakra ET (not JSON): its name ends in .et, or its first
/// byte is not '{' or '[' after white space.
bool is_chakra_trace(const std::filesystem::path& file);

}  // namespace wanlab::evidence
