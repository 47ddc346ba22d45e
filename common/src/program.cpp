// Worker programs and reports: names, the GEMMs of a stage, and the JSON both sides of the
// controller-agent protocol use. JSON omits fields at their defaults; reading it back gives
// the same values, so a program or report round-trips exactly.
#include "wanlab/common/program.hpp"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <utility>

namespace wanlab::program {
using nlohmann::json;

namespace {

constexpr std::array<std::pair<OpKind, std::string_view>, 6> kOpNames{{
    {OpKind::forward, "forward"},
    {OpKind::backward, "backward"},
    {OpKind::optimizer, "optimizer"},
    {OpKind::send, "send"},
    {OpKind::recv, "recv"},
    {OpKind::allreduce, "allreduce"},
}};

constexpr std::array<std::pair<SpanKind, std::string_view>, 7> kSpanNames{{
    {SpanKind::forward, "forward"},
    {SpanKind::backward, "backward"},
    {SpanKind::optimizer, "optimizer"},
    {SpanKind::send, "send"},
    {SpanKind::recv_wait, "recv_wait"},
    {SpanKind::allreduce, "allreduce"},
    {SpanKind::prefill, "prefill"},
}};

template <class Kind, std::size_t N>
std::string name_of(const std::array<std::pair<Kind, std::string_view>, N>& names, Kind kind) {
  for (const auto& [k, name] : names)
    if (k == kind) return std::string(name);
  throw std::invalid_argument(fmt::format("unnamed kind {}", static_cast<int>(kind)));
}

template <class Kind, std::size_t N>
Kind kind_of(const std::array<std::pair<Kind, std::string_view>, N>& names, const std::string& text,
             std::string_view what) {
  std::string known;
  for (const auto& [k, name] : names) {
    if (name == text) return k;
    known += known.empty() ? "" : ", ";
    known += name;
  }
  throw std::invalid_argument(fmt::format("unknown {} \"{}\"; known: {}", what, text, known));
}

// --- reading fields -------------------------------------------------------------------------
// Every error names the object and the field: "op field \"peer\": expected ...".

[[noreturn]] void fail(std::string_view object, std::string_view field, const std::string& reason) {
  throw std::invalid_argument(fmt::format("{} field \"{}\": {}", object, field, reason));
}

const json& object_of(const json& j, std::string_view object, std::initializer_list<std::string_view> known) {
  if (!j.is_object())
    throw std::invalid_argument(fmt::format("{}: expected a JSON object, got {}", object, j.type_name()));
  for (const auto& [key, value] : j.items()) {
    bool ok = false;
    for (auto k : known) ok = ok || k == key;
    if (!ok) fail(object, key, "unknown field");
  }
  return j;
}

const json* field(const json& j, std::string_view key) {
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

const json& required(const json& j, std::string_view object, std::string_view key) {
  const json* v = field(j, key);
  if (v == nullptr) fail(object, key, "missing");
  return *v;
}

template <class Int>
Int integer(const json& v, std::string_view object, std::string_view key) {
  constexpr auto lo = std::numeric_limits<Int>::min();
  constexpr auto hi = std::numeric_limits<Int>::max();
  const auto range = [&] { return fmt::format("expected an integer in {}..{}, got {}", lo, hi, v.dump()); };
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(hi)) fail(object, key, range());
    return static_cast<Int>(u);
  }
  if (v.is_number_integer()) {
    const auto i = v.get<std::int64_t>();
    if constexpr (std::is_unsigned_v<Int>) {
      if (i < 0) fail(object, key, range());
      if (static_cast<std::uint64_t>(i) > static_cast<std::uint64_t>(hi)) fail(object, key, range());
    } else {
      if (i < static_cast<std::int64_t>(lo) || i > static_cast<std::int64_t>(hi)) fail(object, key, range());
    }
    return static_cast<Int>(i);
  }
  fail(object, key, range());
}

template <class Int>
void optional_integer(const json& j, std::string_view object, std::string_view key, Int& out) {
  if (const json* v = field(j, key)) out = integer<Int>(*v, object, key);
}

double number(const json& v, std::string_view object, std::string_view key) {
  if (!v.is_number()) fail(object, key, fmt::format("expected a number, got {}", v.dump()));
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < 0) fail(object, key, fmt::format("{} is not a finite number >= 0", v.dump()));
  return d;
}

std::string string(const json& v, std::string_view object, std::string_view key) {
  if (!v.is_string()) fail(object, key, fmt::format("expected a string, got {}", v.dump()));
  return v.get<std::string>();
}

const json& array(const json& v, std::string_view object, std::string_view key) {
  if (!v.is_array()) fail(object, key, fmt::format("expected an array, got {}", v.type_name()));
  return v;
}

template <class T, class Convert>
std::vector<T> elements(const json& v, std::string_view object, std::string_view key, Convert convert) {
  std::vector<T> out;
  const json& a = array(v, object, key);
  out.reserve(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    try {
      out.push_back(convert(a[i]));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format("{} field \"{}\" element {}: {}", object, key, i, e.what()));
    }
  }
  return out;
}

// --- GEMMs ----------------------------------------------------------------------------------

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

std::string to_string(OpKind kind) {
  return name_of(kOpNames, kind);
}
OpKind op_kind_from_string(const std::string& text) {
  return kind_of(kOpNames, text, "op kind");
}
std::string to_string(SpanKind kind) {
  return name_of(kSpanNames, kind);
}
SpanKind span_kind_from_string(const std::string& text) {
  return kind_of(kSpanNames, text, "span kind");
}

std::vector<Gemm> stage_gemms(const StageShape& s, OpKind pass) {
  if (pass != OpKind::forward && pass != OpKind::backward)
    throw std::invalid_argument(fmt::format("stage_gemms: pass must be forward or backward, not {}", to_string(pass)));
  if (s.tp < 1 || s.heads < 1 || s.seq_len < 1 || s.hidden % s.heads != 0 || s.heads % s.tp != 0 ||
      s.kv_heads % s.tp != 0)
    throw std::invalid_argument(fmt::format(
        "stage_gemms: inconsistent shape (hidden {}, heads {}, kv_heads {}, seq_len {}, tp {}): hidden must divide "
        "by heads, and heads and kv_heads by tp",
        s.hidden, s.heads, s.kv_heads, s.seq_len, s.tp));
  const std::int64_t t = s.tokens;
  const std::int64_t h = s.hidden;
  const std::int64_t d = h / s.heads;
  const std::int64_t tp = s.tp;
  const std::int64_t seq = s.seq_len;
  // Attention is batched over the samples of the micro-batch and this GPU's heads.
  const std::int64_t batched = (t / seq) * (s.heads / tp);
  // An FFN or vocabulary that does not divide by tp is padded, as Megatron pads the vocabulary.
  const std::int64_t f_shard = ceil_div(s.ffn_hidden, tp);

  std::vector<Gemm> fwd;
  fwd.reserve(static_cast<std::size_t>(s.layers) * 7 + 1);
  for (int layer = 0; layer < s.layers; ++layer) {
    fwd.push_back({t, (h + 2 * s.kv_heads * d) / tp, h, 1});  // QKV projection
    fwd.push_back({seq, seq, d, batched});                    // scores Q K^T
    fwd.push_back({seq, d, seq, batched});                    // context P V
    fwd.push_back({t, h, h / tp, 1});                         // output projection
    fwd.push_back({t, f_shard, h, 1});                        // MLP up
    if (s.gated_mlp) fwd.push_back({t, f_shard, h, 1});       // MLP gate
    fwd.push_back({t, h, f_shard, 1});                        // MLP down
  }
  if (s.vocab > 0) fwd.push_back({t, ceil_div(s.vocab, tp), h, 1});  // LM head
  if (pass == OpKind::forward) return fwd;

  // Backward, in reverse layer order: for C = A B, the input gradient dA = dC B^T
  // (m x k x n) and the weight gradient dB = A^T dC (k x n x m); same FLOPs as the forward each.
  std::vector<Gemm> bwd;
  bwd.reserve(fwd.size() * 2);
  for (auto it = fwd.rbegin(); it != fwd.rend(); ++it) {
    bwd.push_back({it->m, it->k, it->n, it->count});
    bwd.push_back({it->k, it->n, it->m, it->count});
  }
  return bwd;
}

double gemm_flops(const std::vector<Gemm>& gemms) {
  double total = 0;
  for (const auto& g : gemms)
    total += 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k) *
             static_cast<double>(g.count);
  return total;
}

std::uint64_t ring_chunk_bytes(std::uint64_t bytes, std::size_t ranks) {
  if (ranks == 0) return bytes;
  return bytes / ranks + (bytes % ranks != 0 ? 1 : 0);
}

// --- JSON -----------------------------------------------------------------------------------

json to_json(const Span& span) {
  json j{{"kind", to_string(span.kind)},
         {"iteration", span.iteration},
         {"start_ns", span.start_ns},
         {"end_ns", span.end_ns}};
  if (span.microbatch != -1) j["microbatch"] = span.microbatch;
  if (span.bytes != 0) j["bytes"] = span.bytes;
  if (span.peer != -1) j["peer"] = span.peer;
  return j;
}

json to_json(const WorkerReport& report) {
  json iterations = json::array();
  for (const auto& it : report.iterations) iterations.push_back({{"start_ns", it.start_ns}, {"end_ns", it.end_ns}});
  json spans = json::array();
  for (const auto& s : report.spans) spans.push_back(to_json(s));
  return {{"worker", report.worker}, {"iterations", std::move(iterations)}, {"spans", std::move(spans)}};
}

Span span_from_json(const json& j) {
  constexpr std::string_view o = "span";
  object_of(j, o, {"kind", "iteration", "microbatch", "start_ns", "end_ns", "bytes", "peer"});
  Span s;
  const std::string kind = string(required(j, o, "kind"), o, "kind");
  try {
    s.kind = span_kind_from_string(kind);
  } catch (const std::invalid_argument& e) {
    fail(o, "kind", e.what());
  }
  s.iteration = integer<int>(required(j, o, "iteration"), o, "iteration");
  s.start_ns = integer<std::int64_t>(required(j, o, "start_ns"), o, "start_ns");
  s.end_ns = integer<std::int64_t>(required(j, o, "end_ns"), o, "end_ns");
  if (s.end_ns < s.start_ns) fail(o, "end_ns", fmt::format("{} is before start_ns {}", s.end_ns, s.start_ns));
  optional_integer(j, o, "microbatch", s.microbatch);
  optional_integer(j, o, "bytes", s.bytes);
  optional_integer(j, o, "peer", s.peer);
  return s;
}

WorkerReport worker_report_from_json(const json& j) {
  constexpr std::string_view o = "worker report";
  object_of(j, o, {"worker", "iterations", "spans"});
  WorkerReport r;
  r.worker = integer<int>(required(j, o, "worker"), o, "worker");
  r.iterations = elements<IterationTime>(required(j, o, "iterations"), o, "iterations", [](const json& v) {
    constexpr std::string_view io = "iteration";
    object_of(v, io, {"start_ns", "end_ns"});
    return IterationTime{integer<std::int64_t>(required(v, io, "start_ns"), io, "start_ns"),
                         integer<std::int64_t>(required(v, io, "end_ns"), io, "end_ns")};
  });
  r.spans = elements<Span>(required(j, o, "spans"), o, "spans", span_from_json);
  return r;
}

json to_json(const Op& op) {
  json j{{"kind", to_string(op.kind)}};
  if (op.microbatch != -1) j["microbatch"] = op.microbatch;
  if (op.flops != 0) j["flops"] = op.flops;
  if (op.peer != -1) j["peer"] = op.peer;
  if (op.bytes != 0) j["bytes"] = op.bytes;
  if (op.tag != 0) j["tag"] = op.tag;
  if (!op.ring.empty()) j["ring"] = op.ring;
  if (op.rendezvous) j["rendezvous"] = true;
  if (op.chunk != 0) j["chunk"] = op.chunk;
  if (op.part != BackwardPart::full) j["part"] = to_string(op.part);
  return j;
}

std::string to_string(BackwardPart part) {
  switch (part) {
    case BackwardPart::input:
      return "input";
    case BackwardPart::weight:
      return "weight";
    default:
      return "full";
  }
}

json to_json(const StageShape& s) {
  return {{"layers", s.layers},       {"tokens", s.tokens},
          {"hidden", s.hidden},       {"ffn_hidden", s.ffn_hidden},
          {"heads", s.heads},         {"kv_heads", s.kv_heads},
          {"seq_len", s.seq_len},     {"vocab", s.vocab},
          {"gated_mlp", s.gated_mlp}, {"tp", s.tp}};
}

json to_json(const WorkerProgram& p) {
  json ops = json::array();
  for (const auto& op : p.ops) ops.push_back(to_json(op));
  json j{{"worker", p.worker},   {"stage", p.stage},          {"dp_rank", p.dp_rank},
         {"tp_rank", p.tp_rank}, {"shape", to_json(p.shape)}, {"ops", std::move(ops)}};
  if (!p.chunks.empty()) {
    json chunks = json::array();
    for (const auto& c : p.chunks) chunks.push_back(to_json(c));
    j["chunks"] = std::move(chunks);
  }
  return j;
}

Op op_from_json(const json& j) {
  constexpr std::string_view o = "op";
  object_of(j, o, {"kind", "microbatch", "flops", "peer", "bytes", "tag", "ring", "rendezvous", "chunk", "part"});
  Op op;
  const std::string kind = string(required(j, o, "kind"), o, "kind");
  try {
    op.kind = op_kind_from_string(kind);
  } catch (const std::invalid_argument& e) {
    fail(o, "kind", e.what());
  }
  optional_integer(j, o, "microbatch", op.microbatch);
  if (const json* v = field(j, "flops")) op.flops = number(*v, o, "flops");
  optional_integer(j, o, "peer", op.peer);
  optional_integer(j, o, "bytes", op.bytes);
  optional_integer(j, o, "tag", op.tag);
  if (const json* v = field(j, "ring"))
    op.ring = elements<int>(*v, o, "ring", [](const json& e) { return integer<int>(e, "ring", "rank"); });
  if (const json* v = field(j, "rendezvous")) {
    if (!v->is_boolean()) fail(o, "rendezvous", fmt::format("expected true or false, got {}", v->dump()));
    op.rendezvous = v->get<bool>();
    if (op.rendezvous && op.kind != OpKind::send && op.kind != OpKind::recv && op.kind != OpKind::allreduce)
      fail(o, "rendezvous",
           fmt::format("a {} has no receiver to wait for; only a send, a recv or an allreduce", kind));
  }
  optional_integer(j, o, "chunk", op.chunk);
  if (op.chunk < 0) fail(o, "chunk", fmt::format("{} is negative", op.chunk));
  if (const json* v = field(j, "part")) {
    const std::string part = string(*v, o, "part");
    if (part == "full") op.part = BackwardPart::full;
    else if (part == "input") op.part = BackwardPart::input;
    else if (part == "weight") op.part = BackwardPart::weight;
    else fail(o, "part", fmt::format("\"{}\": expected full, input or weight", part));
  }
  return op;
}

StageShape stage_shape_from_json(const json& j) {
  constexpr std::string_view o = "stage shape";
  object_of(j, o,
            {"layers", "tokens", "hidden", "ffn_hidden", "heads", "kv_heads", "seq_len", "vocab", "gated_mlp", "tp"});
  StageShape s;
  s.layers = integer<int>(required(j, o, "layers"), o, "layers");
  s.tokens = integer<std::int64_t>(required(j, o, "tokens"), o, "tokens");
  s.hidden = integer<int>(required(j, o, "hidden"), o, "hidden");
  s.ffn_hidden = integer<int>(required(j, o, "ffn_hidden"), o, "ffn_hidden");
  s.heads = integer<int>(required(j, o, "heads"), o, "heads");
  s.kv_heads = integer<int>(required(j, o, "kv_heads"), o, "kv_heads");
  s.seq_len = integer<int>(required(j, o, "seq_len"), o, "seq_len");
  s.vocab = integer<int>(required(j, o, "vocab"), o, "vocab");
  const json& gated = required(j, o, "gated_mlp");
  if (!gated.is_boolean()) fail(o, "gated_mlp", fmt::format("expected true or false, got {}", gated.dump()));
  s.gated_mlp = gated.get<bool>();
  s.tp = integer<int>(required(j, o, "tp"), o, "tp");
  return s;
}

WorkerProgram worker_program_from_json(const json& j) {
  constexpr std::string_view o = "worker program";
  object_of(j, o, {"worker", "stage", "dp_rank", "tp_rank", "shape", "ops", "chunks"});
  WorkerProgram p;
  p.worker = integer<int>(required(j, o, "worker"), o, "worker");
  p.stage = integer<int>(required(j, o, "stage"), o, "stage");
  p.dp_rank = integer<int>(required(j, o, "dp_rank"), o, "dp_rank");
  p.tp_rank = integer<int>(required(j, o, "tp_rank"), o, "tp_rank");
  try {
    p.shape = stage_shape_from_json(required(j, o, "shape"));
  } catch (const std::invalid_argument& e) {
    if (std::string_view(e.what()).starts_with(o)) throw;
    fail(o, "shape", e.what());
  }
  p.ops = elements<Op>(required(j, o, "ops"), o, "ops", op_from_json);
  if (const json* v = field(j, "chunks")) p.chunks = elements<StageShape>(*v, o, "chunks", stage_shape_from_json);
  for (const auto& op : p.ops)
    if (op.chunk != 0 && static_cast<std::size_t>(op.chunk) >= std::max<std::size_t>(p.chunks.size(), 1))
      fail(o, "ops", fmt::format("an op runs chunk {} but the program has {} chunks", op.chunk, p.chunks.size()));
  return p;
}

SpanKind compute_span_kind(OpKind kind) {
  switch (kind) {
    case OpKind::forward:
      return SpanKind::forward;
    case OpKind::backward:
      return SpanKind::backward;
    default:
      return SpanKind::optimizer;
  }
}

}  // namespace wanlab::program
