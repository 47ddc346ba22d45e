// Scenario files: defaults, presets and overrides, every problem reported at once with its
// JSON pointer, bad JSON with line and column, the canonical form, and the shipped
// scenarios (bench/scenarios/*.json), which must load and plan on their labs.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>

#include "temp_dir.hpp"
#include "test_workload_fixtures.hpp"
#include "wanlab/workload/execute.hpp"
#include "wanlab/workload/metrics.hpp"
#include "wanlab/workload/plan.hpp"
#include "wanlab/workload/scenario.hpp"

using namespace wanlab;
using namespace wanlab::workload;
using namespace wanlab::workload::testing;
using Catch::Matchers::Contains;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const fs::path kTopologies = fs::path(kSource) / "topologies";

// A temp folder for the files of one test.
struct TempDir : test::TempDir {
  TempDir() : test::TempDir("scenario") {}
};

json base() {
  return json::parse(R"({
    "name": "t",
    "topology": "two-dc.json",
    "model": "7b",
    "parallelism": {"pp": 2, "dp": 2, "tp": 8},
    "schedule": "1f1b",
    "micro_batches": 8,
    "iterations": 4
  })");
}

Scenario parse(const json& doc) {
  return parse_scenario(doc, "t.json", kTopologies);
}

std::vector<core::Diagnostic> problems(const json& doc) {
  try {
    parse(doc);
  } catch (const core::ConfigError& e) {
    return e.diagnostics();
  }
  FAIL("expected a ConfigError");
  return {};
}

std::string dump(const std::vector<core::Diagnostic>& ds) {
  std::string out;
  for (const auto& d : ds) out += d.to_string() + "\n";
  return out;
}

const core::Diagnostic* at(const std::vector<core::Diagnostic>& ds, const std::string& path) {
  auto it = std::find_if(ds.begin(), ds.end(), [&](const core::Diagnostic& d) { return d.path == path; });
  return it == ds.end() ? nullptr : &*it;
}

std::string only_problem(const json& doc, const std::string& path) {
  const auto ds = problems(doc);
  INFO(dump(ds));
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].file == "t.json");
  CHECK(ds[0].path == path);
  return ds[0].reason;
}

}  // namespace

TEST_CASE("a minimal scenario takes the documented defaults", "[unit][workload][scenario]") {
  const auto s = parse(base());
  CHECK(s.name == "t");
  CHECK(s.source_file == "t.json");
  CHECK(s.topology_path == (kTopologies / "two-dc.json").lexically_normal());
  CHECK(s.model == *find_preset("7b"));
  CHECK(s.model.dtype == Dtype::bf16);
  CHECK_FALSE(s.mfu.has_value());  // each DC's GPU kind's default (gpu.hpp)
  CHECK(s.parallelism == Parallelism{2, 2, 8});
  CHECK(s.schedule == Schedule::one_f_one_b);
  CHECK(s.micro_batch_size == 1);
  CHECK(s.micro_batches == 8);
  CHECK(s.iterations == 4);
  CHECK(s.warmup == 0);
  CHECK(s.connections == 1);
  CHECK(s.policy == "fair");
  CHECK(s.compute == ComputeMode::modeled);
  CHECK(s.scale == 1.0);
  CHECK(s.seed == 1);
  CHECK(s.placement.empty());
  CHECK_FALSE(s.tcp_window);
  CHECK(run_tcp_window(s) == 3.0 * 1024 * 1024);  // the nodes' own buffers, not scaled
  CHECK(s.send_mode == SendMode::eager);
  CHECK_FALSE(to_json(s).contains("send_mode"));
  CHECK(s.tcp_pacing);
  CHECK_FALSE(to_json(s).contains("tcp_pacing"));
}

TEST_CASE("tcp_pacing: on unless the scenario turns it off, a boolean", "[unit][workload][scenario]") {
  auto doc = base();
  doc["tcp_pacing"] = false;
  const auto s = parse(doc);
  CHECK_FALSE(s.tcp_pacing);
  CHECK(to_json(s)["tcp_pacing"] == false);
  CHECK_FALSE(parse(to_json(s)).tcp_pacing);
  doc["tcp_pacing"] = true;
  CHECK(parse(doc).tcp_pacing);
  doc["tcp_pacing"] = "fq";
  const auto p = problems(doc);
  REQUIRE(p.size() == 1);
  CHECK(p[0].path == "/tcp_pacing");
}

TEST_CASE("send_mode: eager or rendezvous, on every pipeline send and recv and every ring all-reduce",
          "[unit][workload][scenario]") {
  auto doc = base();
  doc["send_mode"] = "rendezvous";
  const auto s = parse(doc);
  CHECK(s.send_mode == SendMode::rendezvous);
  CHECK(to_json(s)["send_mode"] == "rendezvous");
  const auto plan = build_plan(s, core::load_topology(s.topology_path));
  int flagged = 0;
  for (const auto& p : plan.programs)
    for (const auto& op : p.ops) {
      const bool transfer = op.kind == program::OpKind::send || op.kind == program::OpKind::recv ||
                            op.kind == program::OpKind::allreduce;
      CHECK(op.rendezvous == transfer);
      flagged += op.rendezvous ? 1 : 0;
    }
  CHECK(flagged > 0);
  doc["send_mode"] = "lazy";
  const auto p = problems(doc);
  REQUIRE(p.size() == 1);
  CHECK(p[0].path == "/send_mode");
  CHECK_THAT(p[0].reason, Contains("eager") && Contains("rendezvous"));
}

TEST_CASE("tcp_window: a size at full scale, run as window x scale", "[unit][workload][scenario]") {
  auto doc = base();
  doc["tcp_window"] = "3MiB";
  doc["scale"] = 0.05;
  auto s = parse(doc);
  REQUIRE(s.tcp_window == 3u * 1024 * 1024);
  CHECK(run_tcp_window(s) == Approx(3.0 * 1024 * 1024 * 0.05));
  CHECK(to_json(s)["tcp_window"] == 3u * 1024 * 1024);
  doc["tcp_window"] = 65536;
  CHECK(parse(doc).tcp_window == 65536u);
  for (const auto& [bad, why] : std::vector<std::pair<json, std::string>>{
           {"3Mbit", "'3Mbit': unknown size unit"},
           {true, "expected a size such as \"3MiB\""},
           {-4096, "expected a size such as"},
           {100, "100 bytes: give 4KiB to 1GiB"},
           {"2GiB", "give 4KiB to 1GiB"}}) {
    doc["tcp_window"] = bad;
    const auto p = problems(doc);
    REQUIRE(p.size() == 1);
    CHECK(p[0].path == "/tcp_window");
    CHECK_THAT(p[0].reason, Contains(why));
  }
}

TEST_CASE("lan_scale: the bytes of all-reduces inside a DC, scale by default", "[unit][workload][scenario]") {
  auto doc = base();
  doc["scale"] = 0.05;
  CHECK_FALSE(parse(doc).lan_scale);
  CHECK(run_lan_scale(parse(doc)) == 0.05);
  doc["lan_scale"] = 0.001;
  const auto s = parse(doc);
  REQUIRE(s.lan_scale);
  CHECK(run_lan_scale(s) == 0.001);
  CHECK(to_json(s)["lan_scale"] == 0.001);
  CHECK_FALSE(to_json(parse(base())).contains("lan_scale"));
  for (const json& bad : {json(0), json(-0.1), json(1.5)}) {
    doc["lan_scale"] = bad;
    INFO(bad.dump());
    CHECK_THAT(only_problem(doc, "/lan_scale"), Contains("all-reduces inside a DC"));
  }
  doc["lan_scale"] = "0.01";
  CHECK_THAT(only_problem(doc, "/lan_scale"), Contains("expected a number in (0, 1]"));
}

TEST_CASE("custom models: defaults and preset overrides", "[unit][workload][scenario]") {
  auto doc = base();
  doc["model"] = {{"layers", 4}, {"hidden", 4096}, {"heads", 32}, {"seq_len", 1024}, {"vocab", 1000}};
  auto m = parse(doc).model;
  CHECK(m.preset.empty());
  CHECK(m.kv_heads == 32);       // default: heads
  CHECK(m.ffn_hidden == 16384);  // default: 4 h
  CHECK_FALSE(m.gated_mlp);

  doc["model"]["gated_mlp"] = true;
  doc["model"]["dtype"] = "fp32";
  m = parse(doc).model;
  CHECK(m.ffn_hidden == 11008);  // 8/3 h rounded up to a multiple of 256
  CHECK(m.dtype == Dtype::fp32);

  doc["model"] = {{"preset", "8b"}, {"layers", 4}, {"seq_len", 2048}};
  m = parse(doc).model;
  CHECK(m.preset == "8b");
  CHECK(m.layers == 4);
  CHECK(m.seq_len == 2048);
  CHECK(m.kv_heads == 8);
  CHECK(m.ffn_hidden == 14336);
  CHECK(m.vocab == 128256);
}

TEST_CASE("every problem is reported at once, each with its path", "[unit][workload][scenario]") {
  auto doc = base();
  doc["name"] = "Bad_Name";
  doc["topology"] = "missing.json";
  doc["model"] = "7B";
  doc["parallelism"]["tp"] = 0;
  doc["schedule"] = "1f1";
  doc["iterations"] = 4;
  doc["warmup"] = 4;
  doc["connections"] = 100;
  doc["scale"] = 2;
  doc["policy"] = "atlsa";
  doc["compute"] = "gpu";
  doc["gpu"] = {{"mfu", 0}};
  doc["iteration"] = 3;
  const auto ds = problems(doc);
  INFO(dump(ds));
  CHECK(ds.size() == 12);
  const auto reason = [&](const std::string& path) {
    const auto* d = at(ds, path);
    INFO(path);
    REQUIRE(d != nullptr);
    CHECK(d->file == "t.json");
    return d->reason;
  };
  CHECK_THAT(reason("/name"), Contains("[a-z0-9][a-z0-9-]*"));
  CHECK_THAT(reason("/topology"), Contains("topology file not found") && Contains("missing.json"));
  CHECK_THAT(reason("/model"), Contains("unknown model preset \"7B\" (did you mean \"7b\"?)") && Contains("70b"));
  CHECK_THAT(reason("/parallelism/tp"), Contains("outside 1.."));
  CHECK_THAT(reason("/schedule"), Contains("(did you mean \"1f1b\"?)") && Contains("gpipe"));
  CHECK_THAT(reason("/warmup"), Contains("4 warm-up iterations leave none of the 4"));
  CHECK_THAT(reason("/connections"), Contains("100 is outside 1..64"));
  CHECK_THAT(reason("/scale"), Contains("outside (0, 1]"));
  CHECK_THAT(reason("/policy"), Contains("\"atlsa\"") && Contains("did you mean \"atlas\"") && Contains("priority"));
  CHECK_THAT(reason("/compute"), Contains("modeled, cuda"));
  CHECK_THAT(reason("/gpu/mfu"), Contains("outside (0, 1]"));
  CHECK_THAT(reason("/iteration"), Contains("unknown key \"iteration\" (did you mean \"iterations\"?)"));
  CHECK(at(ds, "/model/layers") == nullptr);  // a broken preset does not add noise
}

TEST_CASE("missing fields and nested unknown keys", "[unit][workload][scenario]") {
  const auto ds = problems(json{{"model", {{"layers", 2}, {"hiden", 64}}}, {"parallelism", {{"pp", 1}}}});
  INFO(dump(ds));
  for (const char* path : {"/name", "/topology", "/schedule", "/micro_batches", "/iterations", "/model/hidden",
                           "/model/heads", "/model/seq_len", "/model/vocab", "/parallelism/dp", "/parallelism/tp"})
    CHECK(at(ds, path) != nullptr);
  REQUIRE(at(ds, "/model/hiden") != nullptr);
  CHECK_THAT(at(ds, "/model/hiden")->reason, Contains("did you mean \"hidden\"?"));
  CHECK_THAT(only_problem(json::array(), ""), Contains("expected a JSON object"));
}

TEST_CASE("the split must fit the model", "[unit][workload][scenario]") {
  auto doc = base();
  doc["model"] = {{"preset", "7b"}, {"layers", 2}};
  doc["parallelism"]["pp"] = 3;
  CHECK_THAT(only_problem(doc, "/parallelism/pp"), Contains("3 stages for a model of 2 layers"));

  doc = base();
  doc["parallelism"]["tp"] = 3;
  CHECK_THAT(only_problem(doc, "/parallelism/tp"), Contains("does not divide heads 32"));

  doc = base();
  doc["model"] = {{"preset", "8b"}, {"heads", 64}};  // kv_heads 8 stays
  doc["parallelism"]["tp"] = 16;
  CHECK_THAT(only_problem(doc, "/parallelism/tp"), Contains("kv_heads 8"));

  doc = base();
  doc["parallelism"] = {{"pp", 1}, {"dp", 4096}, {"tp", 32}};
  CHECK_THAT(only_problem(doc, "/parallelism"), Contains("more than 65536 GPUs"));

  doc = base();
  doc["model"] = {{"preset", "7b"}, {"hidden", 4100}};
  CHECK_THAT(only_problem(doc, "/model/hidden"), Contains("does not divide by heads 32"));

  doc = base();
  doc["model"] = {{"preset", "7b"}, {"kv_heads", 5}};
  doc["parallelism"]["tp"] = 1;
  CHECK_THAT(only_problem(doc, "/model/kv_heads"), Contains("must divide heads 32"));
}

TEST_CASE("placement overrides are checked for shape", "[unit][workload][scenario]") {
  auto doc = base();
  doc["placement"] = json::parse(R"([["use", "use"], ["euw", "euw"]])");
  CHECK(parse(doc).placement == std::vector<std::vector<std::string>>{{"use", "use"}, {"euw", "euw"}});
  doc["placement"] = json::parse(R"([["use"], ["euw", "euw"], ["euw", "use"]])");
  const auto ds = problems(doc);
  INFO(dump(ds));
  REQUIRE(at(ds, "/placement") != nullptr);
  CHECK_THAT(at(ds, "/placement")->reason, Contains("3 entries for pp 2"));
  REQUIRE(at(ds, "/placement/0") != nullptr);
  CHECK_THAT(at(ds, "/placement/0")->reason, Contains("1 DC names for dp 2"));
  doc["placement"] = json::parse(R"([["use", 3], ["euw", "euw"]])");
  CHECK_THAT(only_problem(doc, "/placement/0/1"), Contains("expected a DC name"));
}

TEST_CASE("bad JSON names the line and column", "[unit][workload][scenario]") {
  TempDir dir;
  const auto file = dir.write("bad.json", "{\n  \"name\": \"x\",\n  \"model\" \"7b\"\n}\n");
  try {
    load_scenario(file);
    FAIL("expected a ConfigError");
  } catch (const core::ConfigError& e) {
    REQUIRE(e.diagnostics().size() == 1);
    CHECK(e.diagnostics()[0].file == file.string());
    CHECK_THAT(e.diagnostics()[0].reason, Contains("invalid JSON at line 3, column 14"));  // the end of "7b"
  }
  CHECK_THROWS_WITH(load_scenario(dir.path() / "none.json"), Contains("cannot read the file"));
  // A number no double holds (found by tests/fuzz): a ConfigError, not json::out_of_range.
  const auto overflow = dir.write("overflow.json", "{\"name\": \"x\", \"scale\": -1e400}");
  try {
    load_scenario(overflow);
    FAIL("expected a ConfigError");
  } catch (const core::ConfigError& e) {
    REQUIRE(e.diagnostics().size() == 1);
    CHECK(e.diagnostics()[0].file == overflow.string());
    CHECK(e.diagnostics()[0].reason == "invalid JSON: number overflow parsing '-1e400'");
  }
}

TEST_CASE("the topology path resolves against the scenario's folder", "[unit][workload][scenario]") {
  TempDir dir;
  dir.write("lab.json", core::to_json(shipped_topology("two-dc.json")).dump());
  auto doc = base();
  doc["topology"] = "lab.json";
  const auto file = dir.write("s.json", doc.dump());
  const auto s = load_scenario(file);
  CHECK(s.topology_path == (file.parent_path() / "lab.json").lexically_normal());
  CHECK(s.source_file == file.string());
}

TEST_CASE("the canonical form is accepted back unchanged", "[unit][workload][scenario]") {
  auto doc = base();
  doc["description"] = "round trip";
  doc["model"] = {{"preset", "8b"}, {"layers", 4}, {"dtype", "fp16"}};
  doc["gpu"] = {{"mfu", 0.37}};
  doc["warmup"] = 1;
  doc["scale"] = 0.03;
  doc["seed"] = 18446744073709551615ULL;
  doc["connections"] = 8;
  doc["schedule"] = "gpipe";
  doc["tcp_window"] = "256KiB";
  doc["placement"] = json::parse(R"([["use", "euw"], ["euw", "use"]])");
  const auto s = parse(doc);
  const json canonical = to_json(s);
  const auto back = parse_scenario(json::parse(canonical.dump()), "canonical", "/nonexistent");
  CHECK(to_json(back) == canonical);
  CHECK(back.model == s.model);
  CHECK(back.topology_path == s.topology_path);
  CHECK(back.scale == 0.03);
  CHECK(back.seed == 18446744073709551615ULL);
}

TEST_CASE("the full example in bench/scenarios/README.md is valid", "[unit][workload][scenario]") {
  const fs::path folder = fs::path(kSource) / "bench" / "scenarios";
  std::ifstream in(folder / "README.md");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto start = text.find("```json\n");
  REQUIRE(start != std::string::npos);
  const auto end = text.find("```", start + 8);
  REQUIRE(end != std::string::npos);
  const auto s = parse_scenario(json::parse(text.substr(start + 8, end - start - 8)), "README.md", folder);
  CHECK(s.placement.size() == 3);
  const auto plan = build_plan(s, core::load_topology(s.topology_path));
  CHECK(plan.workers.back().dc == 2);
}

TEST_CASE("every shipped scenario loads and plans on its lab", "[unit][workload][scenario]") {
  int count = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(kSource) / "bench" / "scenarios")) {
    if (entry.path().extension() != ".json") continue;
    INFO(entry.path());
    ++count;
    const auto s = load_scenario(entry.path());
    CHECK(s.name == entry.path().stem().string());
    const auto topo = core::load_topology(s.topology_path);
    const auto plan = build_plan(s, topo);
    CHECK(plan.programs.size() == static_cast<std::size_t>(s.parallelism.gpus()));
    // Sized for one small machine: scaled WAN links of at most 250 Mbit/s and under 1 GB of
    // WAN traffic per iteration.
    for (const auto& link : topo.links) CHECK(static_cast<double>(link.params.rate.bps) * s.scale <= 250e6);
    CHECK(plan.wan_bytes_total() > 0);
    CHECK(plan.wan_bytes_total() < 1'000'000'000ULL);
    const auto again = parse_scenario(to_json(s), "canonical", {});
    CHECK(to_json(again) == to_json(s));

    const auto reports = execute(plan.programs, s.iterations, modeled_compute(plan), uncontended_comm(plan));
    const auto summary = summarize(plan, reports);
    CHECK(summary["iteration_time_s"]["mean"].get<double>() > 0);
    CHECK(summary["bubble_fraction"].get<double>() > 0);
    CHECK(summary["bubble_fraction"].get<double>() < 1);
    CHECK(summary["gpu_utilization"]["mean"].get<double>() <= 1);
    CHECK(chrome_trace(plan, reports)["traceEvents"].size() > plan.workers.size());
  }
  CHECK(count >= 2);
}

TEST_CASE("scenario: a prefill load is read, defaulted and round-trips", "[unit][workload][prefill]") {
  auto doc = base();
  doc["prefill"] = {{"model", "8b"},
                    {"rate_per_s", 150},
                    {"prompt_tokens", {{"distribution", "lognormal"}, {"median", 2048}, {"sigma", 0.5}}},
                    {"decode", {"use-1", "euw-1"}}};
  const auto s = parse(doc);
  REQUIRE(s.prefill);
  CHECK(s.prefill->model.preset == "8b");
  CHECK(s.prefill->rate_per_s == 150);
  CHECK(s.prefill->prompt.kind == PromptTokens::Kind::lognormal);
  CHECK(s.prefill->deadline_s == 2);
  CHECK(s.prefill->decode_nodes == std::vector<std::string>{"use-1", "euw-1"});
  const auto back = parse_scenario(json::parse(to_json(s).dump()), "canonical", "/nonexistent");
  CHECK(back.prefill->model == s.prefill->model);
  CHECK(back.prefill->prompt == s.prefill->prompt);
  CHECK(back.prefill->scale == Approx(s.scale));
  // Without a model, the training model serves.
  doc["prefill"].erase("model");
  CHECK(parse(doc).prefill->model == parse(doc).model);
}

TEST_CASE("scenario: every problem of a prefill section is reported", "[unit][workload][prefill]") {
  auto doc = base();
  doc["prefill"] = {{"rate_per_sec", 10},
                    {"prompt_tokens", {{"distribution", "uniform"}, {"min", 900}, {"max", 100}}},
                    {"deadline_s", -1},
                    {"model", "7B"}};
  const auto p = problems(doc);
  const auto has = [&](const std::string& path, const std::string& words) {
    return std::any_of(p.begin(), p.end(), [&](const core::Diagnostic& d) {
      return d.path == path && d.reason.find(words) != std::string::npos;
    });
  };
  CHECK(has("/prefill/rate_per_sec", "unknown key \"rate_per_sec\" (did you mean \"rate_per_s\"?)"));
  CHECK(has("/prefill/rate_per_s", "missing"));
  CHECK(has("/prefill/prompt_tokens/min", "above max"));
  CHECK(has("/prefill/deadline_s", "outside"));
  CHECK(has("/prefill/model", "unknown model preset \"7B\""));

  TempDir dir;
  const auto csv = dir.path() / "arrivals.csv";
  std::ofstream(csv) << "time_s,prompt_tokens\n0.5,100\n0.2,100\nx,3\n";
  auto traced = base();
  traced["prefill"] = {{"arrival", "trace"}, {"trace", csv.string()}};
  const auto q = problems(traced);
  const auto names = [&](const std::string& words) {
    return std::any_of(q.begin(), q.end(), [&](const core::Diagnostic& d) {
      return d.path == "/prefill/trace" && d.reason.find(words) != std::string::npos;
    });
  };
  CHECK(names(csv.string() + ":3: time 0.2 must be >= 0 and not before the previous row"));
  CHECK(names(csv.string() + ":4: expected \"seconds,tokens\""));
}
