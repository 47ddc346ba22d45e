// The virtual executor: message timing and recv waits, ring all-reduce steps, iteration
// bookkeeping, deadlock detection and malformed programs.
#include <catch2/catch.hpp>

#include "wanlab/workload/execute.hpp"

using namespace wanlab;
using namespace wanlab::workload;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using program::Op;
using program::OpKind;
using program::Span;
using program::SpanKind;
using program::WorkerProgram;

namespace {

Op compute(OpKind kind, double ms, int mb = -1) {
  Op op;
  op.kind = kind;
  op.flops = ms;  // the test's compute time reads milliseconds from the FLOPs
  op.microbatch = mb;
  return op;
}

Op message(OpKind kind, int peer, std::uint32_t tag, std::uint64_t bytes = 100) {
  Op op;
  op.kind = kind;
  op.peer = peer;
  op.tag = tag;
  op.bytes = bytes;
  return op;
}

Op allreduce(std::vector<int> ring, std::uint64_t bytes = 300) {
  Op op;
  op.kind = OpKind::allreduce;
  op.ring = std::move(ring);
  op.bytes = bytes;
  return op;
}

WorkerProgram worker(int id, std::vector<Op> ops) {
  WorkerProgram p;
  p.worker = id;
  p.ops = std::move(ops);
  return p;
}

const ComputeTime kMs = [](int, const Op& op) { return Duration{static_cast<std::int64_t>(op.flops * 1e6)}; };

CommTime fixed(Duration d) {
  return [d](int, int, std::uint64_t) { return d; };
}

constexpr std::int64_t ms(std::int64_t n) {
  return n * 1'000'000;
}

}  // namespace

TEST_CASE("a message arrives comm time after its send starts", "[unit][workload][execute]") {
  const std::vector<WorkerProgram> programs{
      worker(0, {compute(OpKind::forward, 1, 0), message(OpKind::send, 1, 7), compute(OpKind::forward, 3, 1)}),
      worker(1, {message(OpKind::recv, 0, 7), compute(OpKind::forward, 1, 0)}),
  };
  const auto reports = execute(programs, 2, kMs, fixed(5ms));
  REQUIRE(reports.size() == 2);
  // Worker 0: F [0,1], send [1,6], F [1,4]; then iteration 1 from 4.
  const auto& r0 = reports[0];
  REQUIRE(r0.iterations.size() == 2);
  CHECK(r0.iterations[0] == program::IterationTime{0, ms(4)});
  CHECK(r0.iterations[1] == program::IterationTime{ms(4), ms(8)});
  CHECK(r0.spans[0] == Span{SpanKind::forward, 0, 0, 0, ms(1), 0, -1});
  CHECK(r0.spans[1] == Span{SpanKind::send, 0, -1, ms(1), ms(6), 100, 1});
  // Worker 1 waits [0,6], computes [6,7]; in iteration 1 the message (sent at 5) arrives at 10.
  const auto& r1 = reports[1];
  REQUIRE(r1.spans.size() == 4);
  CHECK(r1.spans[0] == Span{SpanKind::recv_wait, 0, -1, 0, ms(6), 100, 0});
  CHECK(r1.spans[1] == Span{SpanKind::forward, 0, 0, ms(6), ms(7), 0, -1});
  CHECK(r1.spans[2] == Span{SpanKind::recv_wait, 1, -1, ms(7), ms(10), 100, 0});
  CHECK(r1.iterations[1] == program::IterationTime{ms(7), ms(11)});
}

TEST_CASE("a rendezvous send leaves once its recv is posted and the sender heard", "[unit][workload][execute]") {
  // comm: 5 ms one way plus 1 ms per 100 bytes. Worker 1 reaches its recv at 10 ms (after a
  // forward); the notice is back at worker 0 at 15 ms; the 100 bytes arrive at 15 + 6 = 21.
  // Eager, they would have left at 1 ms and been there at 7.
  const CommTime comm = [](int, int, std::uint64_t bytes) {
    return Duration{ms(5) + static_cast<std::int64_t>(bytes) * 10'000};
  };
  auto tx = message(OpKind::send, 1, 3);
  auto rx = message(OpKind::recv, 0, 3);
  tx.rendezvous = rx.rendezvous = true;
  const std::vector<WorkerProgram> late{
      worker(0, {compute(OpKind::forward, 1, 0), tx, compute(OpKind::forward, 2, 1)}),
      worker(1, {compute(OpKind::forward, 10, 0), rx}),
  };
  auto reports = execute(late, 1, kMs, comm);
  // The send's span runs from when worker 0 reached it to the arrival, in program order.
  CHECK(reports[0].spans[1] == Span{SpanKind::send, 0, -1, ms(1), ms(21), 100, 1});
  CHECK(reports[0].iterations[0].end_ns == ms(3));  // the send does not block its worker
  CHECK(reports[1].spans[1] == Span{SpanKind::recv_wait, 0, -1, ms(10), ms(21), 100, 0});
  CHECK(reports[1].iterations[0].end_ns == ms(21));

  // A recv posted long before the send costs nothing more than an eager send: posted at 0,
  // heard at 5, sent at 20 (the sender's forward), in at 26.
  const std::vector<WorkerProgram> early{
      worker(0, {compute(OpKind::forward, 20, 0), tx}),
      worker(1, {rx}),
  };
  reports = execute(early, 1, kMs, comm);
  CHECK(reports[1].spans[0] == Span{SpanKind::recv_wait, 0, -1, 0, ms(26), 100, 0});
  CHECK(reports[0].spans[1] == Span{SpanKind::send, 0, -1, ms(20), ms(26), 100, 1});

  // The same programs without the flag: the eager arrival.
  auto eager = late;
  eager[0].ops[1].rendezvous = eager[1].ops[1].rendezvous = false;
  reports = execute(eager, 1, kMs, comm);
  CHECK(reports[1].iterations[0].end_ns == ms(10));  // in at 7, before the recv
}

TEST_CASE("a message that arrived early costs no wait", "[unit][workload][execute]") {
  const std::vector<WorkerProgram> programs{
      worker(0, {message(OpKind::send, 1, 1)}),
      worker(1, {compute(OpKind::forward, 10), message(OpKind::recv, 0, 1)}),
  };
  const auto reports = execute(programs, 1, kMs, fixed(2ms));
  REQUIRE(reports[1].spans.size() == 1);  // the forward only
  CHECK(reports[1].iterations[0].end_ns == ms(10));
}

TEST_CASE("ring all-reduce: 2(n-1) steps that wait for the slowest rank", "[unit][workload][execute]") {
  // Ranks 1 and 2 arrive at 0, rank 0 at 10 ms; a step costs 1 ms. Step 0 of rank 1 needs
  // rank 0's chunk (10 + 1); from then on every step ends 1 ms later: 11, 12, 13, 14.
  const std::vector<WorkerProgram> programs{
      worker(0, {compute(OpKind::backward, 10), allreduce({0, 1, 2})}),
      worker(1, {allreduce({0, 1, 2})}),
      worker(2, {allreduce({0, 1, 2})}),
  };
  std::vector<std::uint64_t> chunks;
  const CommTime comm = [&](int, int, std::uint64_t bytes) {
    chunks.push_back(bytes);
    return Duration{1ms};
  };
  const auto reports = execute(programs, 1, kMs, comm);
  for (const auto& r : reports) {
    INFO(r.worker);
    CHECK(r.iterations[0].end_ns == ms(14));
    CHECK(r.spans.back().kind == SpanKind::allreduce);
    CHECK(r.spans.back().end_ns == ms(14));
    CHECK(r.spans.back().bytes == 300);
  }
  CHECK(reports[1].spans.back().start_ns == 0);
  CHECK(reports[0].spans.back().start_ns == ms(10));
  for (auto c : chunks) CHECK(c == 100);  // 300 bytes over 3 ranks
}

TEST_CASE("deadlocks are detected and name the waiting workers", "[unit][workload][execute]") {
  // Each waits for the other first.
  std::vector<WorkerProgram> programs{
      worker(0, {message(OpKind::recv, 1, 1), message(OpKind::send, 1, 2)}),
      worker(1, {message(OpKind::recv, 0, 2), message(OpKind::send, 0, 1)}),
  };
  try {
    execute(programs, 1, kMs, fixed(1ms));
    FAIL("expected a DeadlockError");
  } catch (const DeadlockError& e) {
    REQUIRE(e.blocked().size() == 2);
    CHECK(e.blocked()[0].worker == 0);
    CHECK(e.blocked()[0].op == 0);
    CHECK(e.blocked()[0].waiting == "recv 100 bytes tag 1 from worker 1");
    CHECK_THAT(std::string(e.what()),
               Contains("worker 1 waits at iteration 0, op 0 (recv 100 bytes tag 2 from worker 0)"));
  }

  // A recv no one sends, in the second iteration: the tag exists only once.
  programs = {worker(0, {compute(OpKind::forward, 1)}), worker(1, {message(OpKind::recv, 0, 9)})};
  CHECK_THROWS_WITH(execute(programs, 1, kMs, fixed(1ms)),
                    Contains("worker 1 waits at iteration 0, op 0 (recv 100 bytes tag 9 from worker 0)"));

  // An all-reduce one rank never joins.
  programs = {worker(0, {allreduce({0, 1})}), worker(1, {compute(OpKind::forward, 1)})};
  CHECK_THROWS_WITH(execute(programs, 1, kMs, fixed(1ms)), Contains("worker 0") && Contains("all-reduce step 1 of 2"));
}

TEST_CASE("malformed programs are refused", "[unit][workload][execute]") {
  CHECK_THROWS_WITH(execute({worker(1, {})}, 1, kMs, fixed(1ms)), Contains("worker id order"));
  CHECK_THROWS_WITH(execute({worker(0, {message(OpKind::send, 3, 1)})}, 1, kMs, fixed(1ms)), Contains("peer 3"));
  // Sent, never received.
  CHECK_THROWS_WITH(execute({worker(0, {message(OpKind::send, 1, 4)}), worker(1, {})}, 1, kMs, fixed(1ms)),
                    Contains("never receives it"));
  // Sent twice with one tag.
  CHECK_THROWS_WITH(execute({worker(0, {message(OpKind::send, 1, 4), message(OpKind::send, 1, 4)}),
                             worker(1, {message(OpKind::recv, 0, 4)})},
                            1, kMs, fixed(1ms)),
                    Contains("twice"));
  CHECK_THROWS_WITH(execute({worker(0, {allreduce({0, 1})}), worker(1, {allreduce({0, 1}, 200)})}, 1, kMs, fixed(1ms)),
                    Contains("disagree"));
  CHECK_THROWS_WITH(execute({worker(0, {allreduce({1})}), worker(1, {})}, 1, kMs, fixed(1ms)),
                    Contains("ring lacks it"));
}
