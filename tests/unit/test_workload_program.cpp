// Worker programs and reports (common/program): kind names, JSON round trips and errors,
// and the GEMMs of a stage with their FLOPs against hand-computed values.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>

#include "wanlab/common/program.hpp"

using namespace wanlab::program;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

std::string error_of(const auto& fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  FAIL("expected std::invalid_argument");
  return {};
}

// hidden 64, 4 heads (d 16), 2 KV heads, FFN 128 gated, seq 32, 2 samples (T = 64), tp 2.
StageShape small_shape(int layers, int vocab) {
  return StageShape{layers, 64, 64, 128, 4, 2, 32, vocab, true, 2};
}

}  // namespace

TEST_CASE("op and span kinds round-trip through their names", "[unit][workload][program]") {
  for (auto k : {OpKind::forward, OpKind::backward, OpKind::optimizer, OpKind::send, OpKind::recv, OpKind::allreduce})
    CHECK(op_kind_from_string(to_string(k)) == k);
  for (auto k : {SpanKind::forward, SpanKind::backward, SpanKind::optimizer, SpanKind::send, SpanKind::recv_wait,
                 SpanKind::allreduce, SpanKind::prefill})
    CHECK(span_kind_from_string(to_string(k)) == k);
  CHECK(to_string(SpanKind::recv_wait) == "recv_wait");
  CHECK_THAT(error_of([] { op_kind_from_string("fwd"); }), Contains("\"fwd\"") && Contains("forward"));
  CHECK_THROWS_AS(span_kind_from_string("idle"), std::invalid_argument);
}

TEST_CASE("programs and reports round-trip through JSON exactly", "[unit][workload][program]") {
  WorkerProgram p{5, 1, 2, 1, small_shape(3, 100), {}, {}};
  p.ops.push_back(Op{OpKind::recv, 0, 0, 1, 4096, 0, {}, false});
  p.ops.push_back(Op{OpKind::forward, 0, 1.0 / 3.0 * 1e12, -1, 0, 0, {}, false});
  p.ops.push_back(Op{OpKind::send, 7, 0, 9, 4096, 14, {}, false});
  Op posted{OpKind::recv, 8, 0, 9, 4096, 15, {}, true};
  p.ops.push_back(posted);
  posted.kind = OpKind::send;
  p.ops.push_back(posted);
  p.ops.push_back(Op{OpKind::allreduce, -1, 0, -1, 123456789012345ULL, 0, {1, 5, 9}, false});
  p.ops.push_back(Op{OpKind::optimizer, -1, 12.5, -1, 0, 0, {}, false});
  const json j = to_json(p);
  CHECK(worker_program_from_json(j) == p);
  CHECK(worker_program_from_json(json::parse(j.dump())) == p);  // through text as well

  WorkerReport r{3, {{0, 10}, {10, 25}}, {}};
  r.spans.push_back(Span{SpanKind::forward, 0, 2, 0, 5, 0, -1});
  r.spans.push_back(Span{SpanKind::recv_wait, 1, 0, 10, 12, 4096, 7});
  r.spans.push_back(Span{SpanKind::allreduce, 1, -1, 12, 25, 99, -1});
  r.spans.push_back(Span{SpanKind::prefill, 1, -1, 20, 21, 0, -1});
  CHECK(worker_report_from_json(json::parse(to_json(r).dump())) == r);
}

TEST_CASE("reading JSON names the field and the reason", "[unit][workload][program]") {
  CHECK_THAT(error_of([] {
               op_from_json(json{{"kind", "send"}, {"peer", "x"}});
             }),
             Contains("op field \"peer\"") && Contains("expected an integer"));
  CHECK_THAT(error_of([] {
               op_from_json(json{{"kind", "jump"}});
             }),
             Contains("op field \"kind\"") && Contains("\"jump\""));
  CHECK_THAT(error_of([] { op_from_json(json{{"peer", 1}}); }), Contains("op field \"kind\": missing"));
  CHECK_THAT(error_of([] { op_from_json(json{{"kind", "send"}, {"bytes", -1}}); }), Contains("\"bytes\""));
  CHECK_THAT(error_of([] {
               op_from_json(json{{"kind", "send"}, {"tagg", 1}});
             }),
             Contains("\"tagg\"") && Contains("unknown field"));
  CHECK_THAT(error_of([] {
               op_from_json(json{{"kind", "allreduce"}, {"ring", {0, "a"}}});
             }),
             Contains("\"ring\" element 1"));
  CHECK_THAT(error_of([] {
               span_from_json(json{{"kind", "forward"}, {"iteration", 0}, {"start_ns", 5}, {"end_ns", 4}});
             }),
             Contains("\"end_ns\""));
  auto program = to_json(WorkerProgram{0, 0, 0, 0, small_shape(1, 0), {}, {}});
  program["shape"].erase("tp");
  CHECK_THAT(error_of([&] { worker_program_from_json(program); }), Contains("\"shape\"") && Contains("\"tp\""));
  CHECK_THAT(error_of([] { worker_report_from_json(json::array()); }), Contains("expected a JSON object"));
  CHECK_THAT(error_of([] { op_from_json(json{{"kind", "send"}, {"rendezvous", 1}}); }),
             Contains("op field \"rendezvous\": expected true or false"));
  CHECK_THAT(error_of([] { op_from_json(json{{"kind", "forward"}, {"rendezvous", true}}); }),
             Contains("op field \"rendezvous\": a forward has no receiver"));
  CHECK_FALSE(op_from_json(json{{"kind", "send"}, {"rendezvous", false}}).rendezvous);
}

TEST_CASE("stage GEMMs: shapes and FLOPs against hand-computed values", "[unit][workload][program]") {
  // T = 64 tokens (2 samples of 32), h = 64, d = 16, 4 heads, 2 KV heads, f = 128 gated, tp = 2.
  // Per layer, 2 m n k count each:
  //   QKV     T x (h + 2*2*16)/2 = 64 x 64,   k = 64:  2*64*64*64        =   524288
  //   scores  32 x 32, k 16, count (64/32)*(4/2) = 4:  2*32*32*16*4      =   131072
  //   context 32 x 16, k 32, count 4:                  2*32*16*32*4      =   131072
  //   output  64 x 64, k 64/2 = 32:                    2*64*64*32        =   262144
  //   up, gate 64 x 128/2, k 64:                       2 * 2*64*64*64    =  1048576
  //   down    64 x 64, k 64:                           2*64*64*64        =   524288
  //   layer total                                                        =  2621440
  //   LM head 64 x 100/2, k 64:                        2*64*50*64        =   409600
  const auto one = stage_gemms(small_shape(1, 0), OpKind::forward);
  REQUIRE(one.size() == 7);
  CHECK(one[0] == Gemm{64, 64, 64, 1});
  CHECK(one[1] == Gemm{32, 32, 16, 4});
  CHECK(one[2] == Gemm{32, 16, 32, 4});
  CHECK(one[3] == Gemm{64, 64, 32, 1});
  CHECK(one[4] == Gemm{64, 64, 64, 1});
  CHECK(one[6] == Gemm{64, 64, 64, 1});
  CHECK(gemm_flops(one) == 2621440.0);

  CHECK(gemm_flops(stage_gemms(small_shape(2, 0), OpKind::forward)) == 2 * 2621440.0);
  const auto with_head = stage_gemms(small_shape(1, 100), OpKind::forward);
  CHECK(with_head.back() == Gemm{64, 50, 64, 1});
  CHECK(gemm_flops(with_head) == 2621440.0 + 409600.0);

  // Backward: each forward GEMM twice (input and weight gradients), transposed shapes.
  const auto bwd = stage_gemms(small_shape(1, 100), OpKind::backward);
  CHECK(bwd.size() == 2 * with_head.size());
  CHECK(gemm_flops(bwd) == 2 * gemm_flops(with_head));
  CHECK(bwd[0] == Gemm{64, 64, 50, 1});  // dX of the LM head: T x h, k = vocab/tp
  CHECK(bwd[1] == Gemm{64, 50, 64, 1});  // dW of the LM head: h x vocab/tp, k = T

  // Non-gated: two MLP GEMMs.
  StageShape plain = small_shape(1, 0);
  plain.gated_mlp = false;
  CHECK(stage_gemms(plain, OpKind::forward).size() == 6);
  CHECK(gemm_flops(stage_gemms(plain, OpKind::forward)) == 2621440.0 - 524288.0);

  CHECK_THROWS_AS(stage_gemms(plain, OpKind::send), std::invalid_argument);
  plain.tp = 3;  // 4 heads do not split 3 ways
  CHECK_THROWS_AS(stage_gemms(plain, OpKind::forward), std::invalid_argument);
}

TEST_CASE("ring all-reduce chunks cover the buffer", "[unit][workload][program]") {
  CHECK(ring_chunk_bytes(100, 4) == 25);
  CHECK(ring_chunk_bytes(101, 4) == 26);
  CHECK(ring_chunk_bytes(7, 1) == 7);
}
