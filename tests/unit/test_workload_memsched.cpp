// The memory model (figures, refusal of a plan that does not fit), uneven layer splits,
// and the interleaved 1F1B and ZB-H1 schedules: their orders, their messages, and their
// bubble fractions with free communication against the analytic values.
#include <catch2/catch.hpp>

#include <filesystem>
#include <set>
#include <string>
#include <tuple>

#include "test_workload_fixtures.hpp"
#include "wanlab/sim/rescale.hpp"
#include "wanlab/sim/simulator.hpp"
#include "wanlab/workload/cost.hpp"
#include "wanlab/workload/execute.hpp"
#include "wanlab/workload/memory.hpp"
#include "wanlab/workload/metrics.hpp"
#include "wanlab/workload/plan.hpp"

using namespace wanlab;
using namespace wanlab::workload;
using namespace wanlab::workload::testing;
using namespace std::chrono_literals;
using program::BackwardPart;
using program::Op;
using program::OpKind;

namespace {

core::Topology one_dc(const std::string& gpu = "H100") {
  return lab(nlohmann::json::array({{{"name", "a"}, {"nodes", 8}, {"gpus_per_node", 8}, {"gpu", gpu}}}));
}

// "F0.1 B0.1 ..." (micro-batch.chunk); zero-bubble halves as "B" (input) and "W" (weight).
std::string steps(Schedule schedule, int v, int pp, int stage, int m) {
  std::string out;
  for (const auto& st : pipeline_steps(schedule, v, pp, stage, m)) {
    const std::string k = st.kind == OpKind::forward           ? "F"
                          : st.part == BackwardPart::weight ? "W"
                                                            : "B";
    out += (out.empty() ? "" : " ") + k + std::to_string(st.microbatch);
    if (v > 1) out += "." + std::to_string(st.chunk);
  }
  return out;
}

// The Llama 3.1 405B shape (126 layers, hidden 16384, 128 heads, 8 KV heads, FFN 53248).
ModelSpec llama_405b() {
  ModelSpec m;
  m.preset = "";
  m.layers = 126;
  m.hidden = 16384;
  m.heads = 128;
  m.kv_heads = 8;
  m.ffn_hidden = 53248;
  m.gated_mlp = true;
  m.seq_len = 8192;
  m.vocab = 128256;
  return m;
}

// Iteration time and bubble fraction of a plan run with per-op times and free communication.
std::pair<double, double> run_free(const Plan& plan, const ComputeTime& compute) {
  const CommTime comm = [](int, int, std::uint64_t) -> Duration { return 0ms; };
  const auto reports = execute(plan.programs, plan.scenario.iterations, compute, comm);
  const auto summary = summarize(plan, reports);
  return {summary["iteration_time_s"]["mean"].get<double>(), summary["bubble_fraction"].get<double>()};
}

}  // namespace

// ---- memory model ---------------------------------------------------------------------

TEST_CASE("memory: GPU kinds and their capacity", "[unit][workload][memory]") {
  CHECK(gpu_memory_bytes("A100") == 80 * kGiB);
  CHECK(gpu_memory_bytes("H100") == 80 * kGiB);
  CHECK(gpu_memory_bytes("H200") == 141 * kGiB);
  CHECK_THROWS_AS(gpu_memory_bytes("V100"), std::invalid_argument);
}

TEST_CASE("memory: weights, gradients and mixed-precision Adam per parameter", "[unit][workload][memory]") {
  auto s = scenario(2, 2, 2, 4);
  const auto costs = stage_costs(s.model, s.parallelism, s.micro_batch_size);
  auto mem = stage_memory(s);
  REQUIRE(mem.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto p = costs[i].parameters_per_gpu;
    CHECK(mem[i].weights == 2 * p);      // bf16
    CHECK(mem[i].gradients == 2 * p);    // bf16
    CHECK(mem[i].optimizer == 12 * p);   // fp32 master weights, momentum, variance
    CHECK(mem[i].reserve == 0);
  }
  SECTION("settable: bytes per parameter, the distributed optimizer, a reserve") {
    s.memory.optimizer_bytes_per_parameter = 4;
    s.memory.distributed_optimizer = true;
    s.memory.reserve_bytes = 3 * kGiB;
    mem = stage_memory(s);
    CHECK(mem[0].optimizer == 4 * costs[0].parameters_per_gpu / 2);
    CHECK(mem[0].reserve == 3 * kGiB);
    CHECK(mem[0].needed() == mem[0].weights + mem[0].gradients + mem[0].optimizer + mem[0].activations + 3 * kGiB);
  }
  SECTION("fp32 training: Adam's momentum and variance, 8 bytes") {
    s.model.dtype = Dtype::fp32;
    mem = stage_memory(s);
    CHECK(mem[0].weights == 4 * costs[0].parameters_per_gpu);
    CHECK(mem[0].optimizer == 8 * costs[0].parameters_per_gpu);
  }
}

TEST_CASE("memory: activations of one layer follow Korthikanti et al. without dropout or scores",
          "[unit][workload][memory]") {
  // MHA, a plain MLP of 4h, bf16: 34 s b h with dropout and stored scores; without the
  // 2 s b h of dropout masks (one attention, one MLP... two in all) and with flash
  // attention (no s x s scores), 8 s b h replicated + 24 s b h / t, plus the fp32 softmax
  // statistics (4 s b heads / t).
  ModelSpec m;
  m.layers = 2;
  m.hidden = 1024;
  m.heads = 16;
  m.kv_heads = 16;
  m.ffn_hidden = 4096;
  m.seq_len = 2048;
  m.vocab = 1000;
  for (int t : {1, 2, 4}) {
    INFO("tp " << t);
    const std::uint64_t sbh = 2048ull * 1024;
    CHECK(layer_activation_bytes(m, 1, t) == 8 * sbh + 24 * sbh / t + 4ull * 2048 * 16 / t);
    // Sequence parallelism splits the norms' part too: Korthikanti's 34 s b h / t, less the same.
    CHECK(layer_activation_bytes(m, 1, t, true) == 8 * sbh / t + 24 * sbh / t + 4ull * 2048 * 16 / t);
  }
  CHECK(layer_activation_bytes(m, 2, 1) == 2 * layer_activation_bytes(m, 1, 1));
}

TEST_CASE("memory: micro-batches in flight per schedule", "[unit][workload][memory]") {
  auto s = scenario(4, 1, 1, 8);
  s.model.layers = 16;
  const auto per_layer = layer_activation_bytes(s.model, 1, 1);
  SECTION("1F1B: pp - stage") {
    const auto mem = stage_memory(s);
    for (int st = 0; st < 4; ++st) CHECK(mem[static_cast<std::size_t>(st)].peak_in_flight == 4 - st);
    CHECK(mem[0].activations == 4 * 4 * per_layer);  // 4 micro-batches x 4 layers
  }
  SECTION("GPipe: every micro-batch") {
    s.schedule = Schedule::gpipe;
    const auto mem = stage_memory(s);
    for (const auto& m : mem) CHECK(m.peak_in_flight == 8);
    CHECK(mem[0].activations == 8 * 4 * per_layer);
  }
  SECTION("recomputation keeps each layer's input and one layer's working set") {
    s.schedule = Schedule::gpipe;
    s.memory.recompute = true;
    const auto mem = stage_memory(s);
    const std::uint64_t input = 2ull * 32 * 128;  // bf16 x seq x hidden
    CHECK(mem[0].activations == 8 * 4 * input + per_layer);
    CHECK(mem[0].activations < 8 * 4 * per_layer / 4);
  }
  SECTION("interleaved 1F1B (v = 2): Megatron's warm-up, chunks of half a stage") {
    s.schedule = Schedule::interleaved_1f1b;
    s.virtual_stages = 2;
    const auto mem = stage_memory(s);
    // Stage 0 warms up with 2 (p - 1) + (v - 1) p = 10 chunk forwards and runs one more
    // before its first backward: 11 chunks of 2 layers held.
    CHECK(mem[0].peak_in_flight == 11);
    CHECK(mem[0].activations == 11 * 2 * per_layer);
    CHECK(mem[3].peak_in_flight == 5);  // (v - 1) p + 1
  }
  SECTION("ZB-H1: 1F1B's bound on forwards awaiting B, plus the deferred W's half") {
    s.schedule = Schedule::zb_h1;
    const auto mem = stage_memory(s);
    // Stage 0 (F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 W0 F7 ...): after F7, 4 micro-batches await
    // their B (1F1B's pp - stage) and 3 more their W, each holding half: 5.5 micro-batches.
    CHECK(mem[0].peak_in_flight == 7);
    CHECK(mem[0].activations == 22 * per_layer);  // 5.5 x 4 layers
    CHECK(mem[1].peak_in_flight == 6);
    CHECK(mem[1].activations == 18 * per_layer);  // 4.5 x 4 layers
  }
}

TEST_CASE("memory: a plan that does not fit is refused with the figures", "[unit][workload][memory]") {
  // 405B at pp 6 x tp 8: about 2.6e9 parameters per GPU on the first stage, 16 bytes each.
  auto s = scenario(6, 1, 8, 12);
  s.model = llama_405b();
  s.source_file = "bench/scenarios/big.json";
  const auto fit = memory_fit(s, "H100");
  REQUIRE(fit.size() == 6);
  CHECK_FALSE(fits(fit));
  CHECK(fit[0].memory.needed() > 80 * kGiB);
  try {
    (void)build_plan(s, one_dc());
    FAIL("build_plan accepted a plan that does not fit");
  } catch (const core::ConfigError& e) {
    REQUIRE(e.diagnostics().size() == 1);
    const auto& d = e.diagnostics()[0];
    CHECK(d.file == "bench/scenarios/big.json");
    CHECK(d.path == "/parallelism");
    CHECK_THAT(d.reason, Catch::Contains("does not fit in GPU memory"));
    CHECK_THAT(d.reason, Catch::Contains("stage 0 needs"));
    CHECK_THAT(d.reason, Catch::Contains("of the 80.0 GiB of an H100 in DC a"));
    CHECK_THAT(d.reason, Catch::Contains("micro-batches in flight"));
  }
  SECTION("the same model fits with more stages, the distributed optimizer and recomputation on H200s") {
    auto big = scenario(16, 4, 8, 32);
    big.model = llama_405b();
    big.layers_per_stage = std::vector<int>(16, 8);
    big.layers_per_stage[0] = 6;
    big.layers_per_stage[15] = 126 - 6 - 14 * 8;
    big.memory.distributed_optimizer = true;
    big.memory.recompute = true;
    const auto f = memory_fit(big, "H200");
    for (const auto& st : f) INFO(describe(st));
    CHECK(fits(f));
  }
}

TEST_CASE("memory: a 7B plan fits, 70B on 4 stages of tp 8 fits on H100s", "[unit][workload][memory]") {
  auto s = scenario(4, 1, 8, 8);
  s.model = *find_preset("70b");
  const auto f = memory_fit(s, "H100");
  for (const auto& st : f) INFO(describe(st));
  CHECK(fits(f));
  auto small = scenario(2, 1, 1, 4);
  small.model = *find_preset("7b");
  CHECK(fits(memory_fit(small, "A100")));
  CHECK_NOTHROW(build_plan(small, one_dc("A100")));
}

TEST_CASE("memory: the smallest GPU among a stage's decides", "[unit][workload][memory]") {
  auto s = scenario(2, 2, 1, 4);
  s.model = *find_preset("7b");
  auto topo = lab(nlohmann::json::array({{{"name", "a"}, {"nodes", 1}, {"gpus_per_node", 2}, {"gpu", "H200"}},
                                         {{"name", "b"}, {"nodes", 1}, {"gpus_per_node", 2}, {"gpu", "A100"}}}));
  const auto f = memory_fit(s, topo, {{0, 1}, {0}});
  CHECK(f[0].gpu == "A100");
  CHECK(f[0].dc == "b");
  CHECK(f[0].available == 80 * kGiB);
  CHECK(f[1].gpu == "H200");
}

TEST_CASE("memory: scenario fields parse, and bad ones are named", "[unit][workload][memory]") {
  nlohmann::json doc{{"name", "m"},
                     {"topology", "three-dc.json"},
                     {"model", {{"preset", "7b"}}},
                     {"parallelism", {{"pp", 4}, {"dp", 1}, {"tp", 1}, {"layers_per_stage", {9, 8, 8, 7}}}},
                     {"schedule", "1f1b"},
                     {"micro_batches", 8},
                     {"iterations", 2},
                     {"memory",
                      {{"optimizer_bytes_per_parameter", 6},
                       {"distributed_optimizer", true},
                       {"recompute", true},
                       {"sequence_parallel", false},
                       {"reserve_gib", 2}}}};
  const auto s = parse_scenario(doc, "m.json", kSource + "/topologies");
  CHECK(s.layers_per_stage == std::vector<int>{9, 8, 8, 7});
  CHECK(s.memory.optimizer_bytes_per_parameter == 6);
  CHECK(s.memory.distributed_optimizer);
  CHECK(s.memory.recompute);
  CHECK_FALSE(s.memory.sequence_parallel);
  CHECK(s.memory.reserve_bytes == 2 * kGiB);
  CHECK(parse_scenario(to_json(s), "m.json", kSource + "/topologies").memory == s.memory);
  CHECK(parse_scenario(to_json(s), "m.json", kSource + "/topologies").layers_per_stage == s.layers_per_stage);

  const auto reason = [&](nlohmann::json bad) {
    try {
      (void)parse_scenario(bad, "m.json", kSource + "/topologies");
    } catch (const core::ConfigError& e) {
      std::string all;
      for (const auto& d : e.diagnostics()) all += d.path + ": " + d.reason + "\n";
      return all;
    }
    return std::string("accepted");
  };
  auto bad = doc;
  bad["parallelism"]["layers_per_stage"] = {9, 8, 8};
  CHECK_THAT(reason(bad), Catch::Contains("/parallelism/layers_per_stage: 3 entries for pp 4"));
  bad["parallelism"]["layers_per_stage"] = {9, 8, 8, 8};
  CHECK_THAT(reason(bad), Catch::Contains("/parallelism/layers_per_stage: the stages hold 33 layers but the model has 32"));
  bad["parallelism"]["layers_per_stage"] = {9, 0, 8, 15};
  CHECK_THAT(reason(bad), Catch::Contains("/parallelism/layers_per_stage/1"));
  bad = doc;
  bad["memory"]["recompute"] = "yes";
  CHECK_THAT(reason(bad), Catch::Contains("/memory/recompute"));
  bad = doc;
  bad["memory"]["recompte"] = true;
  CHECK_THAT(reason(bad), Catch::Contains("recompute"));
  bad = doc;
  bad["virtual_stages"] = 2;
  CHECK_THAT(reason(bad), Catch::Contains("/virtual_stages: 2: only interleaved-1f1b"));
  bad["schedule"] = "interleaved-1f1b";
  bad["micro_batches"] = 6;
  CHECK_THAT(reason(bad), Catch::Contains("/micro_batches: 6 does not divide by pp 4"));
  bad["micro_batches"] = 8;
  bad["virtual_stages"] = 8;
  CHECK_THAT(reason(bad), Catch::Contains("/virtual_stages: 8 chunks per GPU, but a stage holds only 7 layers"));
  bad["virtual_stages"] = 1;
  CHECK_THAT(reason(bad), Catch::Contains("interleaved-1f1b needs at least 2"));
}

// ---- uneven splits ----------------------------------------------------------------------

TEST_CASE("memory: one recompute switch; the top-level field is read into it, deprecated",
          "[unit][workload][memory]") {
  nlohmann::json doc{{"name", "r"},
                     {"topology", "three-dc.json"},
                     {"model", {{"preset", "7b"}}},
                     {"parallelism", {{"pp", 4}, {"dp", 1}, {"tp", 1}}},
                     {"schedule", "gpipe"},
                     {"micro_batches", 8},
                     {"iterations", 2}};
  const auto plain = parse_scenario(doc, "r.json", kSource + "/topologies");
  CHECK_FALSE(plain.memory.recompute);
  CHECK(plain.warnings.empty());

  auto old = doc;
  old["recompute"] = true;  // as varuna's scenario.json was written before
  const auto s = parse_scenario(old, "r.json", kSource + "/topologies");
  CHECK(s.memory.recompute);
  REQUIRE(s.warnings.size() == 1);
  CHECK_THAT(s.warnings[0], Catch::Contains("r.json: /recompute: deprecated") &&
                                Catch::Contains("\"memory\": {\"recompute\": true}"));
  // Written back as memory.recompute only, and read back without a warning.
  const auto j = to_json(s);
  CHECK_FALSE(j.contains("recompute"));
  CHECK(j["memory"]["recompute"] == true);
  const auto again = parse_scenario(j, "r.json", kSource + "/topologies");
  CHECK(again.memory.recompute);
  CHECK(again.warnings.empty());

  // The old field and the new one say the same thing: one memory model, one FLOP count.
  auto now = doc;
  now["memory"] = {{"recompute", true}};
  const auto n = parse_scenario(now, "r.json", kSource + "/topologies");
  CHECK(n.memory == s.memory);
  const auto topo = core::load_topology(n.topology_path);
  const auto pa = build_plan(s, topo), pb = build_plan(n, topo), pc = build_plan(plain, topo);
  CHECK(pa.programs == pb.programs);
  CHECK(stage_memory(s)[0].activations == stage_memory(n)[0].activations);
  CHECK(stage_memory(s)[0].activations < stage_memory(plain)[0].activations);
  CHECK_FALSE(pa.programs == pc.programs);  // the extra forward's FLOPs

  // Both, contradicting: refused, naming both.
  auto both = now;
  both["recompute"] = false;
  try {
    (void)parse_scenario(both, "r.json", kSource + "/topologies");
    FAIL("accepted");
  } catch (const core::ConfigError& e) {
    REQUIRE(e.diagnostics().size() == 1);
    CHECK(e.diagnostics()[0].path == "/recompute");
    CHECK_THAT(e.diagnostics()[0].reason, Catch::Contains("contradicts /memory/recompute true"));
  }
}

TEST_CASE("uneven split: stage costs, programs and memory follow layers_per_stage", "[unit][workload][schedule]") {
  auto s = scenario(3, 1, 1, 4);  // 8 layers
  s.layers_per_stage = {2, 4, 2};
  const auto plan = build_plan(s, one_dc());
  REQUIRE(plan.stages.size() == 3);
  CHECK(plan.stages[0].layers == 2);
  CHECK(plan.stages[1].layers == 4);
  CHECK(plan.stages[1].first_layer == 2);
  CHECK(plan.stages[2].first_layer == 6);
  CHECK(plan.programs[1].shape.layers == 4);
  const auto even = build_plan(scenario(3, 1, 1, 4), one_dc());
  CHECK(even.stages[1].layers == 3);
  CHECK(plan.stages[1].forward_flops == Approx(even.stages[1].forward_flops * 4 / 3));
  const auto mem = stage_memory(s);
  CHECK(mem[1].activations == 2 * 4 * layer_activation_bytes(s.model, 1, 1));
  CHECK_THROWS_AS(stage_costs(s.model, s.parallelism, 1, {2, 4, 3}), std::invalid_argument);
}

// ---- interleaved 1F1B -------------------------------------------------------------------

TEST_CASE("interleaved 1F1B: Megatron-LM's order, P = 2, M = 4, v = 2", "[unit][workload][schedule]") {
  // Warm-up 2 (P - s - 1) + (v - 1) P: 4 on stage 0, 2 on stage 1; forwards go chunk by
  // chunk in groups of P micro-batches, backwards the other way round.
  CHECK(steps(Schedule::interleaved_1f1b, 2, 2, 0, 4) ==
        "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
  CHECK(steps(Schedule::interleaved_1f1b, 2, 2, 1, 4) ==
        "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
  // M == P: all forwards first, as Megatron-LM does.
  CHECK(steps(Schedule::interleaved_1f1b, 2, 2, 1, 2) == "F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0");
}

TEST_CASE("interleaved 1F1B: chunks wrap from the last stage to the first, tags unique", "[unit][workload][schedule]") {
  auto s = scenario(2, 1, 1, 4, Schedule::interleaved_1f1b);
  s.virtual_stages = 2;
  const auto plan = build_plan(s, one_dc());
  const auto& p0 = plan.programs[0];
  const auto& p1 = plan.programs[1];
  REQUIRE(p0.chunks.size() == 2);
  CHECK(p0.chunks[0].layers == 2);
  CHECK(p1.chunks[1].vocab == 100);  // the LM head on the last chunk of the last stage
  CHECK(p1.chunks[0].vocab == 0);
  // Stage 0's chunk 1 forward receives from stage 1 (its chunk 0), stage 1's chunk 1 sends nothing on.
  bool saw_wrap = false;
  for (std::size_t i = 0; i + 1 < p0.ops.size(); ++i)
    if (p0.ops[i].kind == OpKind::recv && p0.ops[i + 1].kind == OpKind::forward && p0.ops[i + 1].chunk == 1) {
      CHECK(p0.ops[i].peer == 1);
      CHECK(p0.ops[i].tag == activation_tag(p0.ops[i].microbatch, 0, 4));
      saw_wrap = true;
    }
  CHECK(saw_wrap);
  // (peer, tag) unique per direction; every send has its recv.
  for (const auto& prog : plan.programs) {
    std::set<std::pair<int, std::uint32_t>> sends, recvs;
    for (const auto& op : prog.ops) {
      if (op.kind == OpKind::send) CHECK(sends.insert({op.peer, op.tag}).second);
      if (op.kind == OpKind::recv) CHECK(recvs.insert({op.peer, op.tag}).second);
    }
  }
  // Chunk FLOPs add up to the stage's.
  double f = 0;
  for (const auto& op : p1.ops)
    if (op.kind == OpKind::forward) f += op.flops;
  CHECK(f == Approx(4 * plan.stages[1].forward_flops));
}

TEST_CASE("interleaved 1F1B: bubble fraction with free communication is (P-1)/(vM+P-1)",
          "[unit][workload][schedule]") {
  // Every chunk costs 1/v of a stage: forward 1 ms / v, backward 2 ms / v; the optimizer
  // is free. The bubble is then P-1 chunk forwards and backwards: (P-1) x 3 ms / v.
  for (auto [p, m, v] : {std::tuple{2, 4, 2}, {4, 8, 2}, {4, 4, 2}, {4, 8, 4}, {3, 9, 3}, {8, 16, 2}, {2, 2, 4}}) {
    INFO("P=" << p << " M=" << m << " v=" << v);
    auto s = scenario(p, 1, 1, m, Schedule::interleaved_1f1b);
    s.model.layers = 48;
    s.virtual_stages = v;
    const auto plan = build_plan(s, one_dc());
    const double chunk = 1e6 / v;  // ns
    const ComputeTime compute = [&](int, const Op& op) -> Duration {
      const double ns = op.kind == OpKind::forward ? chunk : op.kind == OpKind::backward ? 2 * chunk : 0;
      return Duration{static_cast<std::int64_t>(ns)};
    };
    const auto [iteration, bubble] = run_free(plan, compute);
    const double expected = static_cast<double>(p - 1) / (v * m + p - 1);
    CHECK(bubble == Approx(expected).epsilon(0.01));
    CHECK(iteration == Approx((v * m + p - 1) * 3e-3 / v).epsilon(0.01));
  }
}

// ---- ZB-H1 --------------------------------------------------------------------------------

TEST_CASE("ZB-H1: B before F before W, W's deferred into the drain", "[unit][workload][schedule]") {
  CHECK(steps(Schedule::zb_h1, 1, 2, 0, 4) == "F0 F1 B0 F2 B1 W0 F3 B2 W1 W2 B3 W3");
  CHECK(steps(Schedule::zb_h1, 1, 2, 1, 4) == "F0 B0 F1 B1 W0 F2 B2 W1 F3 B3 W2 W3");
  // Every stage runs every F, B and W once.
  for (int st = 0; st < 4; ++st) CHECK(pipeline_steps(Schedule::zb_h1, 1, 4, st, 8).size() == 24);
}

TEST_CASE("ZB-H1: bubble (P-1)(F+B-W), a third of 1F1B's when F = B = W", "[unit][workload][schedule]") {
  // F = B = W = 1 ms (1F1B's backward is B + W = 2 ms); the optimizer is free.
  const ComputeTime compute = [](int, const Op& op) -> Duration {
    if (op.kind == OpKind::forward) return 1ms;
    if (op.kind == OpKind::backward) return op.part == BackwardPart::full ? 2ms : 1ms;
    return 0ms;
  };
  for (auto [p, m] : {std::pair{2, 4}, {4, 8}, {4, 4}, {4, 12}, {8, 16}, {3, 7}, {8, 8}}) {
    INFO("P=" << p << " M=" << m);
    auto zb = scenario(p, 1, 1, m, Schedule::zb_h1);
    zb.model.layers = 16;
    const auto [t_zb, bubble_zb] = run_free(build_plan(zb, one_dc()), compute);
    auto ob = scenario(p, 1, 1, m, Schedule::one_f_one_b);
    ob.model.layers = 16;
    const auto [t_1f1b, bubble_1f1b] = run_free(build_plan(ob, one_dc()), compute);
    CHECK(t_zb == Approx((3 * m + p - 1) * 1e-3).epsilon(0.01));
    CHECK(bubble_zb == Approx(static_cast<double>(p - 1) / (3 * m + p - 1)).epsilon(0.01));
    // Bubble time per GPU: 1F1B (P-1)(F+B+W) = 3 (P-1) ms, ZB-H1 (P-1)(F+B-W) = (P-1) ms.
    const double idle_zb = bubble_zb * t_zb;
    const double idle_1f1b = bubble_1f1b * t_1f1b;
    CHECK(idle_zb / idle_1f1b == Approx(1.0 / 3).epsilon(0.01));
  }
}

TEST_CASE("ZB-H1 programs: W's carry no messages and half the backward's FLOPs", "[unit][workload][schedule]") {
  auto s = scenario(2, 1, 1, 4, Schedule::zb_h1);
  const auto plan = build_plan(s, one_dc());
  for (const auto& prog : plan.programs) {
    const auto& cost = plan.stages[static_cast<std::size_t>(prog.stage)];
    int inputs = 0, weights = 0;
    for (std::size_t i = 0; i < prog.ops.size(); ++i) {
      const auto& op = prog.ops[i];
      if (op.kind != OpKind::backward) continue;
      CHECK(op.part != BackwardPart::full);
      CHECK(op.flops == Approx(cost.backward_flops / 2));
      if (op.part == BackwardPart::weight) {
        ++weights;
        if (i + 1 < prog.ops.size()) CHECK(prog.ops[i + 1].kind != OpKind::send);
        if (i > 0) CHECK(prog.ops[i - 1].kind != OpKind::recv);
      } else {
        ++inputs;
      }
    }
    CHECK(inputs == 4);
    CHECK(weights == 4);
  }
}

TEST_CASE("program format: chunk, part and chunk shapes round-trip", "[unit][workload][schedule]") {
  auto s = scenario(2, 1, 1, 4, Schedule::interleaved_1f1b);
  s.virtual_stages = 2;
  for (const auto& prog : build_plan(s, one_dc()).programs)
    CHECK(program::worker_program_from_json(program::to_json(prog)) == prog);
  auto zb = scenario(2, 1, 1, 4, Schedule::zb_h1);
  for (const auto& prog : build_plan(zb, one_dc()).programs)
    CHECK(program::worker_program_from_json(program::to_json(prog)) == prog);
  nlohmann::json bad{{"kind", "backward"}, {"part", "both"}};
  CHECK_THROWS_WITH(program::op_from_json(bad), Catch::Contains("part"));
}

TEST_CASE("the simulator runs the new schedules as execute() does without contention", "[unit][sim][schedule]") {
  for (auto schedule : {Schedule::interleaved_1f1b, Schedule::zb_h1}) {
    INFO(to_string(schedule));
    auto s = scenario(4, 1, 1, 8, schedule);
    s.model = *find_preset("7b");  // ops of milliseconds: the clocks' nanosecond rounding is noise
    s.model.layers = 16;
    if (schedule == Schedule::interleaved_1f1b) s.virtual_stages = 2;
    const auto plan = build_plan(s, one_dc());
    sim::SimOptions opt;
    const auto r = sim::simulate(plan, opt);
    const CommTime comm = [](int, int, std::uint64_t) -> Duration { return 0ms; };
    const auto oracle = execute(plan.programs, s.iterations, modeled_compute(plan), comm);
    const auto a = summarize(plan, r.reports());
    const auto b = summarize(plan, oracle);
    CHECK(a.at("iteration_time_s").at("mean").get<double>() ==
          Approx(b.at("iteration_time_s").at("mean").get<double>()).epsilon(1e-3));
    CHECK(a.at("bubble_fraction").get<double>() == Approx(b.at("bubble_fraction").get<double>()).margin(1e-3));
  }
}

TEST_CASE("memory: every shipped scenario fits its lab's GPUs", "[unit][workload][memory]") {
  namespace fs = std::filesystem;
  int checked = 0;
  for (const auto& dir : {kSource + "/bench/scenarios", kSource + "/bench/scenarios/paper"})
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() != ".json") continue;
      INFO(e.path().string());
      const auto s = load_scenario(e.path());
      const auto topo = core::load_topology(s.topology_path);
      const auto plan = build_plan(s, topo);  // throws when a stage does not fit
      std::vector<std::vector<std::size_t>> dcs(static_cast<std::size_t>(s.parallelism.pp));
      for (const auto& w : plan.workers) dcs[static_cast<std::size_t>(w.stage)].push_back(w.dc);
      for (const auto& f : memory_fit(s, topo, dcs)) {
        INFO(describe(f));
        CHECK(f.fits());
      }
      ++checked;
    }
  CHECK(checked >= 8);
}

TEST_CASE("uneven split: simulate --gpus keeps layers_per_stage and the new schedules", "[unit][workload][schedule]") {
  auto s = scenario(2, 1, 1, 4, Schedule::interleaved_1f1b);
  s.virtual_stages = 2;
  s.layers_per_stage = {3, 5};
  const auto topo = lab(nlohmann::json::array({{{"name", "a"}, {"nodes", 1}, {"gpus_per_node", 2}},
                                               {{"name", "b"}, {"nodes", 1}, {"gpus_per_node", 2}}}));
  const auto r = sim::rescale_gpus(s, topo, 8);
  CHECK(r.scenario.parallelism.dp == 4);
  CHECK(r.scenario.layers_per_stage == std::vector<int>{3, 5});
  CHECK(r.scenario.virtual_stages == 2);
  const auto plan = build_plan(r.scenario, r.topology);
  CHECK(plan.stages[1].layers == 5);
  // Stage 1's chunks: 3 and 2 layers (earlier chunks take the extra).
  CHECK(plan.programs.back().chunks.at(0).layers == 3);
  CHECK(plan.programs.back().chunks.at(1).layers == 2);
}
