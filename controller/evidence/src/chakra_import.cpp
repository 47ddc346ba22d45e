// Chakra execution traces (protobuf, et_def.proto) into wanlab worker programs.
#include "wanlab/evidence/chakra_import.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "wanlab/evidence/card.hpp"

namespace wanlab::evidence {
namespace fs = std::filesystem;
using program::Op;
using program::OpKind;

namespace {

// et_def.proto's NodeType and CollectiveCommType.
constexpr const char* kNodeTypes[] = {"INVALID_NODE",   "METADATA_NODE",  "MEM_LOAD_NODE",  "MEM_STORE_NODE",
                                      "COMP_NODE",      "COMM_SEND_NODE", "COMM_RECV_NODE", "COMM_COLL_NODE",
                                      "STORAGE_NODE",   "BATCH_NODE",     "CHECKPOINT_NODE"};
constexpr const char* kCollectives[] = {"ALL_REDUCE", "REDUCE",         "ALL_GATHER",           "GATHER",
                                        "SCATTER",    "BROADCAST",      "ALL_TO_ALL",           "REDUCE_SCATTER",
                                        "REDUCE_SCATTER_BLOCK", "BARRIER"};
enum NodeType { kInvalid = 0, kMetadata = 1, kComp = 4, kSend = 5, kRecv = 6, kColl = 7 };

std::string node_type_name(std::uint64_t t) {
  return t < std::size(kNodeTypes) ? kNodeTypes[t] : fmt::format("node type {}", t);
}
std::string collective_name(std::int64_t t) {
  return t >= 0 && static_cast<std::size_t>(t) < std::size(kCollectives) ? kCollectives[static_cast<std::size_t>(t)]
                                                                          : fmt::format("collective type {}", t);
}

// Protobuf's wire format over one buffer; every error names the file and the byte.
class Wire {
 public:
  Wire(const std::string& data, std::size_t begin, std::size_t end, const std::string& file, std::string where)
      : d_(data), pos_(begin), end_(end), file_(file), where_(std::move(where)) {}
  bool done() const { return pos_ >= end_; }
  std::size_t pos() const { return pos_; }
  [[noreturn]] void fail(const std::string& why) const {
    throw EvidenceError(fmt::format("{}: byte {}: {}{}", file_, pos_, where_.empty() ? "" : where_ + ": ", why));
  }
  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= end_) fail("truncated: a varint runs past the end of its message");
      const auto b = static_cast<unsigned char>(d_[pos_++]);
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("a varint longer than 10 bytes: not protobuf");
  }
  std::uint64_t fixed(int bytes) {
    if (end_ - pos_ < static_cast<std::size_t>(bytes)) fail("truncated: a fixed-width field runs past the end");
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(d_[pos_++])) << (8 * i);
    return v;
  }
  // A length-delimited field's [begin, end).
  std::pair<std::size_t, std::size_t> bytes() {
    const auto n = varint();
    if (n > end_ - pos_) fail(fmt::format("truncated: a field of {} bytes, {} left in its message", n, end_ - pos_));
    const std::size_t b = pos_;
    pos_ += static_cast<std::size_t>(n);
    return {b, pos_};
  }
  void skip(int wire_type) {
    switch (wire_type) {
      case 0: (void)varint(); break;
      case 1: (void)fixed(8); break;
      case 2: (void)bytes(); break;
      case 5: (void)fixed(4); break;
      default: fail(fmt::format("wire type {} (groups or not protobuf)", wire_type));
    }
  }
  const std::string& data() const { return d_; }
  const std::string& file() const { return file_; }

 private:
  const std::string& d_;
  std::size_t pos_, end_;
  std::string file_;
  std::string where_;
};

struct Attr {
  std::optional<std::int64_t> integer;
  std::optional<double> number;
  std::optional<std::string> text;
};

struct Node {
  std::uint64_t id = 0;
  std::string name;
  std::uint64_t type = 0;
  std::vector<std::uint64_t> deps;
  std::optional<std::uint64_t> start_us;
  std::uint64_t duration_us = 0;
  std::map<std::string, Attr> attrs;
  std::size_t offset = 0;  // of the message, for errors
  std::size_t index = 0;   // among the file's nodes
  std::string where() const { return fmt::format("node {} (id {}, '{}')", index, id, name); }
};

std::int64_t zigzag(std::uint64_t v) { return static_cast<std::int64_t>(v >> 1) ^ -static_cast<std::int64_t>(v & 1); }

Attr read_attr(Wire& w, std::string& name) {
  Attr a;
  while (!w.done()) {
    const auto key = w.varint();
    const int field = static_cast<int>(key >> 3), type = static_cast<int>(key & 7);
    std::uint64_t v = 0;
    if (field == 1 && type == 2) {
      const auto [b, e] = w.bytes();
      name = w.data().substr(b, e - b);
    } else if (field == 3 && type == 1) {  // double
      v = w.fixed(8);
      double d;
      std::memcpy(&d, &v, 8);
      a.number = d;
    } else if (field == 5 && type == 5) {  // float
      const auto u = static_cast<std::uint32_t>(w.fixed(4));
      float f;
      std::memcpy(&f, &u, 4);
      a.number = f;
    } else if ((field == 7 || field == 9 || field == 11 || field == 13 || field == 27) && type == 0) {
      v = w.varint();
      a.integer = field == 7 ? static_cast<std::int32_t>(v) : static_cast<std::int64_t>(v);
    } else if ((field == 15 || field == 17) && type == 0) {
      a.integer = zigzag(w.varint());
    } else if ((field == 19 || field == 23) && type == 5) {
      v = w.fixed(4);
      a.integer = field == 23 ? static_cast<std::int32_t>(v) : static_cast<std::int64_t>(v);
    } else if ((field == 21 || field == 25) && type == 1) {
      a.integer = static_cast<std::int64_t>(w.fixed(8));
    } else if (field == 29 && type == 2) {
      const auto [b, e] = w.bytes();
      a.text = w.data().substr(b, e - b);
    } else {
      w.skip(type);  // doc_string, lists: not read
    }
  }
  if (a.integer && !a.number) a.number = static_cast<double>(*a.integer);
  return a;
}

void read_deps(Wire& w, int type, std::vector<std::uint64_t>& out) {
  if (type == 0) {
    out.push_back(w.varint());
    return;
  }
  if (type != 2) w.fail(fmt::format("a dependency list of wire type {}", type));
  const auto [b, e] = w.bytes();
  Wire packed(w.data(), b, e, w.file(), "a dependency list");
  while (!packed.done()) out.push_back(packed.varint());
}

Node read_node(const std::string& data, std::size_t begin, std::size_t end, const std::string& file, std::size_t index) {
  Node n;
  n.offset = begin;
  n.index = index;
  Wire w(data, begin, end, file, fmt::format("node {}", index));
  while (!w.done()) {
    const auto key = w.varint();
    const int field = static_cast<int>(key >> 3), type = static_cast<int>(key & 7);
    if (field == 1 && type == 0) n.id = w.varint();
    else if (field == 2 && type == 2) {
      const auto [b, e] = w.bytes();
      n.name = data.substr(b, e - b);
    } else if (field == 3 && type == 0) n.type = w.varint();
    else if (field == 4 || field == 5) read_deps(w, type, n.deps);
    else if (field == 6 && type == 0) n.start_us = w.varint();
    else if (field == 7 && type == 0) n.duration_us = w.varint();
    else if (field == 10 && type == 2) {
      const auto [b, e] = w.bytes();
      Wire aw(data, b, e, file, fmt::format("node {} attribute", index));
      std::string name;
      auto a = read_attr(aw, name);
      n.attrs[name] = std::move(a);
    } else {
      w.skip(type);
    }
  }
  return n;
}

std::vector<Node> read_file_nodes(const std::string& data, const std::string& file) {
  std::vector<Node> nodes;
  Wire w(data, 0, data.size(), file, "");
  bool metadata = true;
  while (!w.done()) {
    const auto [b, e] = w.bytes();
    if (metadata) {  // GlobalMetadata: version and attributes, checked only for well-formedness
      Wire m(data, b, e, file, "the global metadata");
      while (!m.done()) m.skip(static_cast<int>(m.varint() & 7));
      metadata = false;
      continue;
    }
    nodes.push_back(read_node(data, b, e, file, nodes.size()));
  }
  if (metadata) throw EvidenceError(fmt::format("{}: byte 0: empty: not a Chakra execution trace", file));
  return nodes;
}

std::optional<std::int64_t> int_attr(const Node& n, const char* name) {
  auto it = n.attrs.find(name);
  if (it == n.attrs.end() || !it->second.integer) return std::nullopt;
  return it->second.integer;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

OpKind compute_kind(const std::string& name) {
  const auto n = lower(name);
  if (n.find("backward") != std::string::npos || n.find("bwd") != std::string::npos ||
      n.find("grad") != std::string::npos)
    return OpKind::backward;
  if (n.find("optim") != std::string::npos || n.find("step") != std::string::npos) return OpKind::optimizer;
  return OpKind::forward;
}

// The nodes in dependency order: among the ready ones, the lowest id first.
std::vector<const Node*> dependency_order(const std::vector<Node>& nodes, const std::string& file) {
  std::map<std::uint64_t, const Node*> by_id;
  for (const auto& n : nodes)
    if (!by_id.insert({n.id, &n}).second)
      throw EvidenceError(fmt::format("{}: byte {}: {}: a second node with id {}", file, n.offset, n.where(), n.id));
  std::map<std::uint64_t, int> waiting;
  std::map<std::uint64_t, std::vector<std::uint64_t>> children;
  for (const auto& n : nodes) {
    std::set<std::uint64_t> deps(n.deps.begin(), n.deps.end());
    for (auto d : deps) {
      if (!by_id.count(d))
        throw EvidenceError(fmt::format("{}: byte {}: {}: depends on node id {}, which the trace does not have", file,
                                        n.offset, n.where(), d));
      children[d].push_back(n.id);
    }
    waiting[n.id] = static_cast<int>(deps.size());
  }
  std::priority_queue<std::uint64_t, std::vector<std::uint64_t>, std::greater<>> ready;
  for (const auto& [id, w] : waiting)
    if (w == 0) ready.push(id);
  std::vector<const Node*> out;
  while (!ready.empty()) {
    const auto id = ready.top();
    ready.pop();
    out.push_back(by_id[id]);
    for (auto c : children[id])
      if (--waiting[c] == 0) ready.push(c);
  }
  if (out.size() != nodes.size())
    for (const auto& n : nodes)
      if (waiting[n.id] > 0)
        throw EvidenceError(fmt::format("{}: byte {}: {}: in a dependency cycle (or after one)", file, n.offset, n.where()));
  return out;
}

EvidenceError node_error(const std::string& file, const Node& node, const std::string& why) {
  return EvidenceError(fmt::format("{}: byte {}: {}: {}", file, node.offset, node.where(), why));
}

// Turns each rank's nodes into its program; holds what the ranks share: message counts and sizes.
struct ChakraImporter {
  const std::vector<std::string>& names;
  const ImportOptions& options;
  int n = 0;  // ranks
  MessageCounts sent{}, received{};
  std::map<std::pair<int, int>, std::vector<std::pair<std::string, std::uint64_t>>> sizes{};  // (from, to): send sizes
  bool flops_from_ops = false;

  // One rank's nodes, in dependency order; `measured` and `timed` get its time span.
  program::WorkerProgram rank_program(int r, const std::string& data, ImportedJob& job, double& measured, bool& timed) {
    const auto& file = names[static_cast<std::size_t>(r)];
    const auto nodes = read_file_nodes(data, file);
    program::WorkerProgram w;
    w.worker = r;
    w.stage = r;
    std::map<std::string, int> left_out, kept_as_compute;
    std::optional<std::uint64_t> first_start;
    std::uint64_t last_end = 0;
    for (const Node* node : dependency_order(nodes, file)) {
      if (node->start_us) {
        first_start = std::min(first_start.value_or(*node->start_us), *node->start_us);
        last_end = std::max(last_end, *node->start_us + node->duration_us);
      }
      add_node(*node, r, w, left_out, kept_as_compute);
    }
    for (const auto& [what, count] : kept_as_compute)
      job.unsupported.push_back(fmt::format("{}: {} x {} (wanlab programs lack it): its duration is kept as compute",
                                            file, count, what));
    for (const auto& [what, count] : left_out)
      job.unsupported.push_back(fmt::format("{}: {} x {}: no work, left out", file, count, what));
    if (first_start)
      measured = std::max(measured, static_cast<double>(last_end - *first_start) / 1e6);
    else
      timed = false;
    return w;
  }

  void add_node(const Node& node, int r, program::WorkerProgram& w, std::map<std::string, int>& left_out,
                std::map<std::string, int>& kept_as_compute) {
    const auto& file = names[static_cast<std::size_t>(r)];
    switch (node.type) {
      case kComp: compute(node, compute_kind(node.name), w); break;
      case kSend: {
        Op op;
        op.kind = OpKind::send;
        op.peer = peer(node, r, "comm_dst");
        op.bytes = bytes(node, r);
        op.tag = sent[{r, op.peer}]++;
        op.microbatch = static_cast<int>(op.tag);
        sizes[{r, op.peer}].push_back({fmt::format("{}: byte {}: {}", file, node.offset, node.where()), op.bytes});
        w.ops.push_back(op);
        break;
      }
      case kRecv: {
        Op op;
        op.kind = OpKind::recv;
        op.peer = peer(node, r, "comm_src");
        op.tag = received[{op.peer, r}]++;
        op.microbatch = static_cast<int>(op.tag);
        w.ops.push_back(op);  // bytes: the matching send's, below
        break;
      }
      case kColl: {
        const auto type = int_attr(node, "comm_type");
        if (!type) throw node_error(file, node, "a collective without a comm_type attribute");
        if (*type == 0) {
          Op op;
          op.kind = OpKind::allreduce;
          op.bytes = bytes(node, r);
          for (int k = 0; k < n; ++k) op.ring.push_back(k);
          w.ops.push_back(op);
        } else {
          ++kept_as_compute["COMM_COLL_NODE " + collective_name(*type)];
          compute(node, OpKind::forward, w);
        }
        break;
      }
      case kMetadata:
      case kInvalid: ++left_out[node_type_name(node.type)]; break;
      default:
        ++kept_as_compute[node_type_name(node.type)];
        compute(node, OpKind::forward, w);
    }
  }

  // A compute operation of the node's duration (or its num_ops); none when it has neither.
  void compute(const Node& node, OpKind kind, program::WorkerProgram& w) {
    Op op;
    op.kind = kind;
    if (node.duration_us > 0) {
      op.flops = static_cast<double>(node.duration_us) / 1e6 * options.effective_flops;
    } else if (auto ops = int_attr(node, "num_ops"); ops && *ops > 0) {
      op.flops = static_cast<double>(*ops);
      flops_from_ops = true;
    } else {
      return;  // nothing to wait for
    }
    w.ops.push_back(op);
  }

  std::uint64_t bytes(const Node& node, int r) const {
    if (auto b = int_attr(node, "comm_size"); b && *b > 0) return static_cast<std::uint64_t>(*b);
    if (options.message_bytes) return *options.message_bytes;
    throw node_error(names[static_cast<std::size_t>(r)], node,
                     "no comm_size attribute (bytes) and no message size was given (--message-bytes)");
  }

  int peer(const Node& node, int r, const char* attr) const {
    const auto& file = names[static_cast<std::size_t>(r)];
    auto p = int_attr(node, attr);
    if (!p) {
      if (n == 2) return 1 - r;
      throw node_error(file, node, fmt::format("no {} attribute: the peer rank", attr));
    }
    if (*p < 0 || *p >= n || *p == r)
      throw node_error(file, node, fmt::format("{} {} is not another of the {} ranks", attr, *p, n));
    return static_cast<int>(*p);
  }

  // Every direction's sends and receives pair up; each receive gets its send's size.
  void pair_messages(ImportedJob& job) {
    check_message_pairs(sent, received, names, "");
    for (auto& w : job.programs)
      for (auto& op : w.ops)
        if (op.kind == OpKind::recv) op.bytes = sizes[{op.peer, w.worker}].at(op.tag).second;
  }
};

// Every rank must run the same all-reduces (sizes in order).
void check_allreduces(const ImportedJob& job, const std::vector<std::string>& names) {
  std::vector<std::uint64_t> first;
  for (const auto& op : job.programs[0].ops)
    if (op.kind == OpKind::allreduce) first.push_back(op.bytes);
  for (const auto& w : job.programs) {
    std::vector<std::uint64_t> mine;
    for (const auto& op : w.ops)
      if (op.kind == OpKind::allreduce) mine.push_back(op.bytes);
    if (mine != first)
      throw EvidenceError(fmt::format("{} and {}: rank 0 runs all-reduces of [{}] bytes, rank {} of [{}]: every rank "
                                      "runs each all-reduce",
                                      names[0], names[static_cast<std::size_t>(w.worker)], fmt::join(first, ", "),
                                      w.worker, fmt::join(mine, ", ")));
  }
}

}  // namespace

bool is_chakra_trace(const fs::path& file) {
  if (file.extension() == ".et") return true;
  std::ifstream in(file, std::ios::binary);
  char c = 0;
  while (in.get(c))
    if (!std::isspace(static_cast<unsigned char>(c))) return c != '{' && c != '[';
  return false;
}

ImportedJob import_chakra_documents(const std::vector<std::string>& files, const std::vector<std::string>& names,
                                    const ImportOptions& options) {
  ImportedJob job;
  job.files = names;
  job.source = "chakra execution trace (protobuf)";
  job.effective_flops = options.effective_flops;
  job.iterations = 1;
  if (files.empty()) throw EvidenceError("import: no trace files");
  const int n = static_cast<int>(files.size());
  ChakraImporter importer{.names = names, .options = options, .n = n};
  double measured = 0;
  bool timed = true;
  for (int r = 0; r < n; ++r)
    job.programs.push_back(importer.rank_program(r, files[static_cast<std::size_t>(r)], job, measured, timed));
  importer.pair_messages(job);
  check_allreduces(job, names);
  if (timed) {
    job.measured_iteration_s = {measured};
    job.measured_iteration_mean_s = measured;
  } else {
    job.notes.push_back("no start times in the traces: no measured iteration time");
  }
  job.notes.push_back("one iteration: a Chakra trace is a graph of one step; nodes run one after another in "
                      "dependency order (lowest id first among the ready ones)");
  job.notes.push_back(fmt::format("compute: duration_micros as FLOPs at {:.4g} FLOP/s{}", options.effective_flops,
                                  importer.flops_from_ops ? "; nodes without a duration: their num_ops" : ""));
  job.notes.push_back("messages: the n-th send of a direction is its n-th receive; sizes from comm_size");
  return job;
}

ImportedJob import_chakra_traces(const std::vector<fs::path>& files, const ImportOptions& options) {
  std::vector<std::string> data, names;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) throw EvidenceError(fmt::format("{}: cannot read: {}", f.string(), std::strerror(errno)));
    std::ostringstream s;
    s << in.rdbuf();
    data.push_back(s.str());
    names.push_back(f.string());
  }
  return import_chakra_documents(data, names, options);
}

}  // namespace wanlab::evidence
