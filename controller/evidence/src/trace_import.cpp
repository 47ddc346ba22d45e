// PyTorch profiler traces (Chrome-trace JSON) into wanlab worker programs.
#include "wanlab/evidence/trace_import.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <set>

#include <fmt/format.h>

#include "wanlab/evidence/card.hpp"

namespace wanlab::evidence {
using nlohmann::json;
namespace fs = std::filesystem;
using program::Op;
using program::OpKind;

namespace {

enum class Comm { none, send, recv, allreduce, other };

struct Ev {
  std::string name;
  double ts = 0, end = 0;  // µs
  std::string thread;      // pid/tid
  const json* args = nullptr;
  std::string path;        // JSON path, for errors
  Comm comm = Comm::none;
};

[[noreturn]] void bad(const std::string& file, const std::string& path, const std::string& why) {
  throw EvidenceError(fmt::format("{}: {}: {}", file, path.empty() ? "(top level)" : path, why));
}

std::string id_text(const json& j) { return j.is_string() ? j.get<std::string>() : j.dump(); }

Comm comm_of(const std::string& name, const json* args) {
  std::string n = name;
  if (n == "record_param_comms" && args && args->contains("Collective name"))
    n = "c10d::" + id_text(args->at("Collective name"));
  const bool c10d = n.rfind("c10d::", 0) == 0, backend = n.rfind("gloo:", 0) == 0 || n.rfind("nccl:", 0) == 0;
  if (!c10d && !backend) return Comm::none;
  const auto op = n.substr(n.find(':') + (c10d ? 2 : 1));
  if (op == "send") return Comm::send;
  if (op == "recv_" || op == "recv" || op == "recv_any_source_") return op == "recv_any_source_" ? Comm::other : Comm::recv;
  if (op == "allreduce_" || op == "allreduce" || op == "all_reduce") return Comm::allreduce;
  return Comm::other;
}

int dtype_size(const std::string& t) {
  if (t == "float" || t == "Float" || t == "int" || t == "Int" || t == "float32") return 4;
  if (t == "double" || t == "Double" || t == "long int" || t == "Long" || t == "int64") return 8;
  if (t == "c10::Half" || t == "c10::BFloat16" || t == "Half" || t == "BFloat16" || t == "short int") return 2;
  if (t == "unsigned char" || t == "bool" || t == "signed char" || t == "Byte" || t == "Bool") return 1;
  return 0;
}

// Bytes of a communication event's tensor from its args, if they say.
std::optional<std::uint64_t> bytes_of(const json* args) {
  if (!args || !args->is_object()) return std::nullopt;
  if (args->contains("In msg nelems") && args->at("In msg nelems").is_number()) {
    int size = 4;
    if (args->contains("dtype")) size = std::max(1, dtype_size(id_text(args->at("dtype"))));
    return static_cast<std::uint64_t>(args->at("In msg nelems").get<double>()) * static_cast<std::uint64_t>(size);
  }
  if (args->contains("Input Dims") && args->at("Input Dims").is_array() && args->contains("Input type") &&
      args->at("Input type").is_array()) {
    const auto& dims = args->at("Input Dims");
    const auto& types = args->at("Input type");
    for (std::size_t i = 0; i < dims.size() && i < types.size(); ++i) {
      const auto& d = dims[i];
      const int size = types[i].is_string() ? dtype_size(types[i].get<std::string>()) : 0;
      if (!d.is_array() || size == 0) continue;
      // c10d ops take a list of tensors: [[d0, d1...]] or the tensor's dims.
      const json* shape = &d;
      if (!d.empty() && d[0].is_array()) shape = &d[0];
      std::uint64_t n = 1;
      for (const auto& x : *shape)
        if (x.is_number()) n *= static_cast<std::uint64_t>(x.get<double>());
      return n * static_cast<std::uint64_t>(size);
    }
  }
  return std::nullopt;
}

std::optional<int> peer_of(const json* args, Comm c) {
  if (!args || !args->is_object()) return std::nullopt;
  static const char* const to[] = {"dst", "Dst rank", "Peer rank", "dst_rank"};
  static const char* const from[] = {"src", "Src rank", "Peer rank", "src_rank"};
  for (const char* k : c == Comm::send ? to : from)
    if (args->contains(k) && args->at(k).is_number_integer()) return args->at(k).get<int>();
  return std::nullopt;
}

// One rank's step, as operations: compute gaps (µs) and communication, alternating.
struct StepOp {
  Comm comm = Comm::none;  // none: compute
  double us = 0;
  OpKind compute = OpKind::forward;
  int peer = -1;
  std::optional<std::uint64_t> bytes;
  std::string path;
};

struct Rank {
  std::vector<std::vector<StepOp>> steps;
  std::vector<double> step_us;
};

OpKind classify(const std::vector<const Ev*>& inside, double a, double b) {
  double bwd = 0, opt = 0, other = 0;
  for (const auto* e : inside) {
    const double d = std::max(0.0, std::min(e->end, b) - std::max(e->ts, a));
    if (e->name.rfind("Optimizer.step", 0) == 0)
      opt += d;
    else if (e->name.rfind("autograd::engine::evaluate_function", 0) == 0)
      bwd += d;
    else
      other += d;
  }
  // `other` counts nested events too; backward and optimizer are top-level spans.
  const double rest = std::max(0.0, (b - a) - bwd - opt);
  if (opt >= bwd && opt >= rest) return OpKind::optimizer;
  if (bwd >= rest) return OpKind::backward;
  (void)other;
  return OpKind::forward;
}

// The trace's event list (a Chrome trace's traceEvents, or a bare array); `base` gets its JSON path.
const json& trace_events(const json& doc, const std::string& file, int rank, std::string& base) {
  if (doc.is_array()) return doc;
  if (!doc.is_object()) bad(file, "", "a trace is a JSON object with traceEvents, or an array of events");
  if (!doc.contains("traceEvents")) bad(file, "/traceEvents", "missing: not a Chrome trace (Kineto) nor an event list");
  const json& events = doc.at("traceEvents");
  base = "/traceEvents";
  if (!events.is_array()) bad(file, base, "must be an array of events");
  if (doc.contains("distributedInfo") && doc["distributedInfo"].is_object() &&
      doc["distributedInfo"].contains("rank") && doc["distributedInfo"]["rank"].is_number_integer() &&
      doc["distributedInfo"]["rank"].get<int>() != rank)
    bad(file, "/distributedInfo/rank",
        fmt::format("the trace is rank {}'s, given as rank {} (give the files in rank order)",
                    doc["distributedInfo"]["rank"].get<int>(), rank));
  return events;
}

// The complete ('X') events; other phases are counted into job.unsupported.
std::vector<Ev> complete_events(const json& events, const std::string& base, const std::string& file,
                                ImportedJob& job) {
  std::vector<Ev> evs;
  std::map<std::string, int> other_phases;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    const auto path = fmt::format("{}/{}", base, i);
    if (!e.is_object()) bad(file, path, "an event must be an object");
    if (!e.contains("ph") || !e["ph"].is_string()) bad(file, path + "/ph", "missing or not a string");
    const auto ph = e["ph"].get<std::string>();
    if (ph != "X") {
      if (ph != "M") ++other_phases[ph];
      continue;
    }
    Ev v;
    if (!e.contains("name") || !e["name"].is_string()) bad(file, path + "/name", "missing or not a string");
    v.name = e["name"].get<std::string>();
    for (const char* k : {"ts", "dur"})
      if (!e.contains(k) || !e[k].is_number()) bad(file, path + "/" + k, "missing or not a number (µs)");
    v.ts = e["ts"].get<double>();
    const double dur = e["dur"].get<double>();
    if (dur < 0) bad(file, path + "/dur", fmt::format("{} is negative", dur));
    v.end = v.ts + dur;
    v.thread = fmt::format("{}/{}", e.contains("pid") ? id_text(e["pid"]) : "", e.contains("tid") ? id_text(e["tid"]) : "");
    v.args = e.contains("args") ? &e["args"] : nullptr;
    v.path = path;
    v.comm = comm_of(v.name, v.args);
    if (e.value("cat", std::string()) == "kernel" || e.value("cat", std::string()) == "gpu_memcpy") v.comm = Comm::none;
    evs.push_back(std::move(v));
  }
  for (const auto& [ph, n] : other_phases)
    job.unsupported.push_back(fmt::format("{}: {} events of phase '{}' (only complete spans, 'X', are read)", file, n, ph));
  if (evs.empty()) bad(file, base, "no complete ('X') events");
  return evs;
}

// The training loop's thread: ProfilerStep's, else the one with the most time in events.
std::string loop_thread(const std::vector<Ev>& evs) {
  std::string main;
  std::map<std::string, double> busy;
  for (const auto& e : evs) {
    if (e.name.rfind("ProfilerStep#", 0) == 0 && main.empty()) main = e.thread;
    busy[e.thread] += e.end - e.ts;
  }
  if (main.empty()) main = std::max_element(busy.begin(), busy.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
  return main;
}

// The loop thread's events, apart: its ProfilerSteps (in time order; the whole trace when it
// has none) and the rest. Communication on another thread is refused.
void loop_events(const std::vector<Ev>& evs, const std::string& main, const std::string& base,
                 const std::string& file, ImportedJob& job, std::vector<const Ev*>& mine,
                 std::vector<const Ev*>& steps) {
  std::map<std::string, int> other_threads;
  for (const auto& e : evs) {
    if (e.thread != main) {
      if (e.comm != Comm::none)
        bad(file, e.path, fmt::format("'{}' on thread {}, not on the training loop's ({}): not importable", e.name,
                                      e.thread, main));
      ++other_threads[e.thread];
      continue;
    }
    if (e.name.rfind("ProfilerStep#", 0) == 0)
      steps.push_back(&e);
    else
      mine.push_back(&e);
  }
  for (const auto& [t, n] : other_threads)
    job.unsupported.push_back(fmt::format("{}: {} events on thread {} (not the training loop's, {}): not imported; GPU "
                                          "kernels and other threads' work count only through the loop's own time",
                                          file, n, t, main));
  std::sort(steps.begin(), steps.end(), [](const Ev* a, const Ev* b) { return a->ts < b->ts; });
  if (steps.empty()) {
    double a = 1e300, b = -1e300;
    for (const auto* e : mine) {
      a = std::min(a, e->ts);
      b = std::max(b, e->end);
    }
    static thread_local std::vector<Ev> whole;
    whole.push_back(Ev{"whole trace", a, b, main, nullptr, base, Comm::none});
    steps.push_back(&whole.back());
    job.notes.push_back(fmt::format("{}: no ProfilerStep spans: the whole trace is one iteration", file));
  }
}

// One communication operation of the loop: a c10d:: event and its backend's event merged.
struct CommOp {
  Comm comm;
  double a, b;
  const Ev* first;
  std::optional<std::uint64_t> bytes;
  std::optional<int> peer;
};

std::vector<CommOp> comm_ops(const std::vector<const Ev*>& mine) {
  std::vector<const Ev*> comm;
  for (const auto* e : mine)
    if (e->comm != Comm::none) comm.push_back(e);
  std::sort(comm.begin(), comm.end(), [](const Ev* a, const Ev* b) { return a->ts < b->ts; });
  std::vector<CommOp> ops;
  for (const auto* e : comm) {
    if (!ops.empty() && ops.back().comm == e->comm && e->ts <= ops.back().b + 1000 &&
        (e->name.rfind("c10d::", 0) != 0 || ops.back().first->name.rfind("c10d::", 0) != 0 || e->ts < ops.back().b)) {
      ops.back().b = std::max(ops.back().b, e->end);
      if (!ops.back().bytes) ops.back().bytes = bytes_of(e->args);
      if (!ops.back().peer) ops.back().peer = peer_of(e->args, e->comm);
      continue;
    }
    ops.push_back({e->comm, e->ts, e->end, e, bytes_of(e->args), peer_of(e->args, e->comm)});
  }
  return ops;
}

// One step as operations; collectives wanlab programs lack are counted into `others`.
std::vector<StepOp> step_ops(const Ev& st, const std::vector<const Ev*>& mine, const std::vector<CommOp>& ops,
                             std::map<std::string, int>& others) {
  std::vector<StepOp> seq;
  double t = st.ts;
  std::vector<const Ev*> inside;
  for (const auto* e : mine)
    if (e->ts >= st.ts && e->end <= st.end && e->comm == Comm::none) inside.push_back(e);
  double carried = 0;  // unsupported collectives' time, kept as compute
  for (const auto& o : ops) {
    if (o.a < st.ts || o.a >= st.end) continue;
    if (o.comm == Comm::other) {
      ++others[o.first->name];
      continue;  // its time stays in the compute gap around it
    }
    // A send blocks the loop (dist.send is synchronous) until the transport has the
    // message: that time is the sender's own, before the message leaves.
    const double until = o.comm == Comm::send ? o.b : o.a;
    if (until > t) seq.push_back({Comm::none, until - t + carried, classify(inside, t, until), -1, {}, {}});
    carried = 0;
    StepOp c{o.comm, o.b - o.a, OpKind::forward, o.peer.value_or(-1), o.bytes, o.first->path};
    seq.push_back(c);
    t = std::max(t, o.b);
  }
  if (st.end > t) seq.push_back({Comm::none, st.end - t, classify(inside, t, st.end), -1, {}, {}});
  return seq;
}

Rank read_rank(const json& doc, const std::string& file, int rank, ImportedJob& job) {
  std::string base;
  const auto& events = trace_events(doc, file, rank, base);
  const auto evs = complete_events(events, base, file, job);
  const auto main = loop_thread(evs);
  std::vector<const Ev*> mine, steps;
  loop_events(evs, main, base, file, job, mine, steps);
  const auto ops = comm_ops(mine);
  std::map<std::string, int> others;
  Rank r;
  for (const auto* st : steps) {
    r.steps.push_back(step_ops(*st, mine, ops, others));
    r.step_us.push_back(st->end - st->ts);
  }
  for (const auto& [n, k] : others)
    job.unsupported.push_back(fmt::format("{}: {} x '{}' (a collective wanlab programs lack): its time is kept as compute",
                                          file, k, n));
  return r;
}

std::string signature(const std::vector<StepOp>& s) {
  std::string out;
  for (const auto& o : s)
    if (o.comm != Comm::none) out += o.comm == Comm::send ? 's' : o.comm == Comm::recv ? 'r' : 'a';
  return out;
}

// Iterations: those whose operations match the first's on every rank; their measured times go to `job`.
std::vector<std::size_t> matching_iterations(const std::vector<Rank>& ranks, const std::vector<std::string>& names,
                                             ImportedJob& job) {
  const int n = static_cast<int>(ranks.size());
  std::size_t steps = ranks[0].steps.size();
  for (const auto& r : ranks) steps = std::min(steps, r.steps.size());
  std::vector<std::size_t> keep;
  for (std::size_t s = 0; s < steps; ++s) {
    bool same = true;
    for (const auto& r : ranks) same = same && signature(r.steps[s]) == signature(r.steps[0]) && r.steps[s].size() == r.steps[0].size();
    if (same)
      keep.push_back(s);
    else
      job.notes.push_back(fmt::format("iteration {} left out: its communication differs from iteration 0's", s));
  }
  for (int r = 0; r < n; ++r)
    if (ranks[static_cast<std::size_t>(r)].steps.size() > steps)
      job.notes.push_back(fmt::format("{}: {} more ProfilerSteps than every rank has, left out", names[static_cast<std::size_t>(r)],
                                      ranks[static_cast<std::size_t>(r)].steps.size() - steps));
  job.iterations = static_cast<int>(keep.size());
  for (auto s : keep) {
    double m = 0;
    for (const auto& r : ranks) m = std::max(m, r.step_us[s] / 1e6);
    job.measured_iteration_s.push_back(m);
  }
  job.measured_iteration_mean_s = std::accumulate(job.measured_iteration_s.begin(), job.measured_iteration_s.end(), 0.0) /
                                  static_cast<double>(std::max<std::size_t>(1, keep.size()));
  return keep;
}

// Programs: compute gaps averaged over the kept iterations; sends and receives matched in
// order per direction (the n-th send from a to b is b's n-th receive from a).
struct ProgramBuilder {
  const std::vector<std::string>& names;
  const ImportOptions& options;
  int n = 0;  // ranks
  MessageCounts sent{}, received{};
  bool peer_guessed = false, bytes_given = false;

  program::WorkerProgram program(const Rank& rk, int r, const std::vector<std::size_t>& keep) {
    program::WorkerProgram w;
    w.worker = r;
    w.stage = r;
    const auto& first = rk.steps[keep.front()];
    for (std::size_t i = 0; i < first.size(); ++i) {
      const auto& o = first[i];
      if (o.comm != Comm::none) {
        w.ops.push_back(message(o, r));
        continue;
      }
      double us = 0;
      for (auto s : keep) us += rk.steps[s][i].us;
      us /= static_cast<double>(keep.size());
      Op op;
      op.kind = o.compute;
      op.flops = us / 1e6 * options.effective_flops;
      w.ops.push_back(op);
    }
    return w;
  }

  // A communication operation of rank r: its size, its peer and its tag.
  Op message(const StepOp& o, int r) {
    const auto& file = names[static_cast<std::size_t>(r)];
    std::uint64_t bytes = 0;
    if (o.bytes) {
      bytes = *o.bytes;
    } else if (options.message_bytes) {
      bytes = *options.message_bytes;
      bytes_given = true;
    } else {
      bad(file, o.path,
          "the trace does not give this message's size (no In msg nelems, no Input Dims: record with "
          "record_shapes=True) and no message size was given (--message-bytes)");
    }
    Op op;
    op.bytes = std::max<std::uint64_t>(1, bytes);
    if (o.comm == Comm::allreduce) {
      op.kind = OpKind::allreduce;
      for (int k = 0; k < n; ++k) op.ring.push_back(k);
      return op;
    }
    int peer = o.peer;
    if (peer < 0) {
      if (n != 2)
        bad(file, o.path,
            fmt::format("the trace does not name this message's peer, which only a two-rank job (not {} ranks) implies",
                        n));
      peer = 1 - r;
      peer_guessed = true;
    }
    if (peer < 0 || peer >= n || peer == r)
      bad(file, o.path, fmt::format("peer rank {} is not another of the {} ranks", peer, n));
    op.peer = peer;
    if (o.comm == Comm::send) {
      op.kind = OpKind::send;
      op.tag = sent[{r, peer}]++;
    } else {
      op.kind = OpKind::recv;
      op.tag = received[{peer, r}]++;
    }
    op.microbatch = static_cast<int>(op.tag);  // the n-th message of its direction
    return op;
  }

  void check_pairs() const { check_message_pairs(sent, received, names, " an iteration"); }
};

}  // namespace

void check_message_pairs(const MessageCounts& sent, const MessageCounts& received,
                         const std::vector<std::string>& names, std::string_view per) {
  const auto name = [&](int rank) -> const std::string& { return names[static_cast<std::size_t>(rank)]; };
  for (const auto& [k, count] : sent) {
    const auto it = received.find(k);
    const std::uint32_t got = it == received.end() ? 0 : it->second;
    if (got != count)
      throw EvidenceError(fmt::format("{} and {}: rank {} sends {} messages{} to rank {}, which receives {}",
                                      name(k.first), name(k.second), k.first, count, per, k.second, got));
  }
  for (const auto& [k, count] : received)
    if (!sent.count(k))
      throw EvidenceError(fmt::format("{}: rank {} receives {} messages{} from rank {}, which sends none",
                                      name(k.second), k.second, count, per, k.first));
}

json ImportedJob::to_json() const {

  json p = json::array();
  for (const auto& w : programs) p.push_back(program::to_json(w));
  return {{"format", "wanlab programs"},
          {"source", source},
          {"files", files},
          {"ranks", programs.size()},
          {"effective_flops", effective_flops},
          {"iterations_imported", iterations},
          {"measured_iteration_s", {{"per_iteration", measured_iteration_s}, {"mean", measured_iteration_mean_s}}},
          {"unsupported", unsupported},
          {"notes", notes},
          {"programs", std::move(p)}};
}

ImportedJob import_pytorch_documents(const std::vector<json>& docs, const std::vector<std::string>& names,
                                     const ImportOptions& options) {
  ImportedJob job;
  job.files = names;
  job.effective_flops = options.effective_flops;
  if (docs.empty()) throw EvidenceError("import: no trace files");
  const int n = static_cast<int>(docs.size());
  std::vector<Rank> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(read_rank(docs[static_cast<std::size_t>(r)], names[static_cast<std::size_t>(r)], r, job));
  const auto keep = matching_iterations(ranks, names, job);

  ProgramBuilder programs{.names = names, .options = options, .n = n};
  for (int r = 0; r < n; ++r) job.programs.push_back(programs.program(ranks[static_cast<std::size_t>(r)], r, keep));
  programs.check_pairs();
  // Message sizes: a send's and its receive's must agree; the receive's size is the sender's.
  for (auto& w : job.programs)
    for (auto& op : w.ops)
      if (op.kind == OpKind::recv)
        for (const auto& o : job.programs[static_cast<std::size_t>(op.peer)].ops)
          if (o.kind == OpKind::send && o.peer == w.worker && o.tag == op.tag) op.bytes = o.bytes;
  if (programs.peer_guessed) job.notes.push_back("peers: the traces do not name them; in a two-rank job each message is the other rank's");
  if (programs.bytes_given)
    job.notes.push_back(fmt::format("message sizes: the traces do not give them; {} bytes each, as given",
                                    *options.message_bytes));
  job.notes.push_back(fmt::format("compute: the time between communication operations, as FLOPs at {:.4g} FLOP/s",
                                  options.effective_flops));
  job.notes.push_back("sends: the time a rank blocked in a (synchronous) send is its own compute time before the "
                      "message leaves; the message's time on the wire is the replay's");
  return job;
}

ImportedJob import_pytorch_traces(const std::vector<fs::path>& files, const ImportOptions& options) {
  std::vector<json> docs;
  std::vector<std::string> names;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) throw EvidenceError(fmt::format("{}: cannot read: {}", f.string(), std::strerror(errno)));
    try {
      docs.push_back(json::parse(in));
    } catch (const json::parse_error& e) {
      throw EvidenceError(fmt::format("{}: byte {}: not JSON: {}", f.string(), e.byte, e.what()));
    }
    names.push_back(f.string());
  }
  return import_pytorch_documents(docs, names, options);
}

workload::Plan replay_plan(const ImportedJob& job, const core::Topology& topo, const std::vector<std::string>& placement,
                           double effective_flops, int iterations, int warmup) {
  const int n = static_cast<int>(job.programs.size());
  if (!placement.empty() && static_cast<int>(placement.size()) != n)
    throw EvidenceError(fmt::format("placement: {} DCs for {} ranks", placement.size(), n));
  if (topo.dcs.empty()) throw EvidenceError(fmt::format("{}: no DCs", topo.source_file));
  workload::Plan plan;
  plan.topology = topo;
  auto& s = plan.scenario;
  s.name = "import";
  s.topology_path = topo.source_file;
  s.parallelism = {n, 1, 1};
  s.iterations = iterations;
  s.warmup = warmup;
  s.micro_batches = 1;
  s.policy = "fair";
  s.connections = 1;
  s.scale = 1;
  std::map<std::size_t, int> used;  // per DC: GPUs taken
  for (int r = 0; r < n; ++r) {
    std::size_t dc = static_cast<std::size_t>(r) % topo.dcs.size();
    if (!placement.empty()) {
      const auto idx = topo.dc_index(placement[static_cast<std::size_t>(r)]);
      if (!idx)
        throw EvidenceError(fmt::format("placement: rank {}: {} has no DC '{}'", r, topo.source_file,
                                        placement[static_cast<std::size_t>(r)]));
      dc = *idx;
    }
    const auto& d = topo.dcs[dc];
    const int k = used[dc]++;
    if (k >= d.nodes * d.gpus_per_node)
      throw EvidenceError(fmt::format("placement: DC {} has {} GPUs, fewer than the ranks placed on it", d.name,
                                      d.nodes * d.gpus_per_node));
    plan.workers.push_back({r, r, 0, 0, dc, k / d.gpus_per_node, k % d.gpus_per_node});
    plan.effective_flops.push_back(effective_flops);
    workload::StageCost c;
    c.stage = r;
    plan.stages.push_back(c);
  }
  plan.programs = job.programs;
  std::map<std::pair<std::size_t, std::size_t>, std::uint64_t> wan;
  for (const auto& w : plan.programs)
    for (const auto& op : w.ops)
      if (op.kind == OpKind::send) {
        const auto a = plan.workers[static_cast<std::size_t>(w.worker)].dc, b = plan.workers[static_cast<std::size_t>(op.peer)].dc;
        if (a != b) wan[{a, b}] += op.bytes;
      }
  for (const auto& [k, b] : wan) plan.wan_bytes_per_iteration.push_back({k.first, k.second, b});
  return plan;
}

}  // namespace wanlab::evidence
