// Topology files: every validation rule reports the right JSON path and reason, all
// problems come at once, and unreadable or malformed files name the file and the reason.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "test_topology_fixtures.hpp"

using namespace topology_test;  // wanlab, wanlab::core, json, fs, Contains, chrono literals

TEST_CASE("unknown keys name the key and list the known ones", "[unit][topology][validation]") {
  auto doc = base();
  doc["wan"][0].erase("rtt");
  doc["wan"][0]["rtt_ms"] = 68;
  auto ds = problems(doc);
  INFO(dump(ds));
  const auto* d = at(ds, "/wan/0/rtt_ms");
  REQUIRE(d != nullptr);
  CHECK_THAT(d->reason, Contains("unknown key \"rtt_ms\""));
  CHECK_THAT(d->reason, Contains("did you mean \"rtt\"?"));
  CHECK_THAT(d->reason, Contains("known keys: between, from, to, delay, rtt, rate, jitter, loss, loss_burst, queue, trace"));
  REQUIRE(at(ds, "/wan/0") != nullptr);  // and the delay is now missing
  CHECK(ds.size() == 2);

  doc = base();
  doc["dcs"][1]["gpus"] = 8;
  auto d1 = only_problem(doc, "/dcs/1/gpus");
  CHECK_THAT(d1.reason, Contains("known keys: name, region, nodes, gpus_per_node, gpu"));
  CHECK_THAT(d1.reason, Contains("did you mean \"gpus_per_node\"?"));

  doc = base();
  doc["dcs"][1]["ndoes"] = 8;  // a typo: two edits
  doc["dcs"][1]["x"] = 1;      // nothing close: no guess
  auto ds2 = problems(doc);
  INFO(dump(ds2));
  REQUIRE(at(ds2, "/dcs/1/ndoes") != nullptr);
  CHECK_THAT(at(ds2, "/dcs/1/ndoes")->reason, Contains("did you mean \"nodes\"?"));
  REQUIRE(at(ds2, "/dcs/1/x") != nullptr);
  CHECK_THAT(at(ds2, "/dcs/1/x")->reason, !Contains("did you mean"));

  doc = base();
  doc["lan"] = {{"bandwidth", "1Gbit"}};
  CHECK_THAT(only_problem(doc, "/lan/bandwidth").reason, Contains("known keys: rate, delay, mtu"));

  doc = base();
  doc["links"] = json::array();
  CHECK_THAT(only_problem(doc, "/links").reason, Contains("known keys: name, description, lan, node, dcs, wan"));

  doc = base();
  doc["a/b~c"] = 1;  // JSON-pointer escaping
  CHECK_THAT(only_problem(doc, "/a~1b~0c").reason, Contains("unknown key \"a/b~c\""));
}

TEST_CASE("wrong JSON types say what was expected and what was found", "[unit][topology][validation]") {
  auto doc = base();
  doc["wan"][0]["rtt"] = 68;
  CHECK(only_problem(doc, "/wan/0/rtt").reason == "expected a string with a unit such as \"68ms\", got number 68");

  doc = base();
  doc["wan"][0]["rate"] = 4.35;
  CHECK(only_problem(doc, "/wan/0/rate").reason == "expected a string with a unit such as \"4Gbit\", got number 4.35");

  doc = base();
  doc["dcs"][0]["nodes"] = "4";
  CHECK(only_problem(doc, "/dcs/0/nodes").reason == "expected an integer, got string \"4\"");

  doc = base();
  doc["dcs"][0]["nodes"] = 2.5;
  CHECK(only_problem(doc, "/dcs/0/nodes").reason == "expected an integer, got number 2.5");

  doc = base();
  doc["wan"][0]["loss"] = 0.1;
  CHECK_THAT(only_problem(doc, "/wan/0/loss").reason, Contains("expected a percentage string such as \"0.1%\""));

  doc = base();
  doc["dcs"][1] = "b";
  auto ds = problems(doc);
  INFO(dump(ds));
  REQUIRE(at(ds, "/dcs/1") != nullptr);
  CHECK_THAT(at(ds, "/dcs/1")->reason, Contains("got string \"b\""));

  doc = base();
  doc["name"] = true;
  CHECK_THAT(only_problem(doc, "/name").reason, Contains("got boolean true"));

  doc = base();
  doc["description"] = nullptr;
  CHECK_THAT(only_problem(doc, "/description").reason, Contains("expected a string, got null"));

  doc = base();
  doc["wan"] = json::object();
  CHECK_THAT(only_problem(doc, "/wan").reason, Contains("expected an array of links, got an object"));

  CHECK_THAT(only_problem(json::array(), "").reason, Contains("expected a JSON object"));
}

TEST_CASE("lab name", "[unit][topology][validation]") {
  auto doc = base();
  doc.erase("name");
  CHECK_THAT(only_problem(doc, "/name").reason, Contains("missing"));

  for (const char* bad : {"three.dc", "Three-dc", "-lab", "", "lab_1"}) {
    INFO(bad);
    doc["name"] = bad;
    CHECK_THAT(only_problem(doc, "/name").reason, Contains("[a-z0-9][a-z0-9-]*"));
  }
  doc["name"] = std::string(25, 'x');
  CHECK_THAT(only_problem(doc, "/name").reason, Contains("at most 24"));
  doc["name"] = std::string(24, 'x');
  CHECK_NOTHROW(parse_topology(doc, "t.json", {}));
  doc["name"] = "3-dc";
  CHECK_NOTHROW(parse_topology(doc, "t.json", {}));
}

TEST_CASE("lan section", "[unit][topology][validation]") {
  auto doc = base();
  doc["lan"] = {{"rate", "0Gbit"}};
  CHECK_THAT(only_problem(doc, "/lan/rate").reason, Contains("leave \"rate\" out for an unshaped LAN"));
  doc["lan"] = {{"rate", "10Gbps"}};
  CHECK_THAT(only_problem(doc, "/lan/rate").reason, Contains("'bps' is ambiguous"));
  doc["lan"] = {{"delay", "5"}};
  CHECK_THAT(only_problem(doc, "/lan/delay").reason, Contains("missing unit"));
  doc["lan"] = {{"mtu", 575}};
  CHECK_THAT(only_problem(doc, "/lan/mtu").reason, Contains("outside 576..9000"));
  doc["lan"] = {{"mtu", 9001}};
  CHECK_THAT(only_problem(doc, "/lan/mtu").reason, Contains("outside 576..9000"));
  doc["lan"] = "fast";
  CHECK_THAT(only_problem(doc, "/lan").reason, Contains("got string \"fast\""));
  doc["lan"] = {{"rate", "10Gbit"}, {"delay", "20us"}, {"mtu", 576}};
  const auto t = parse_topology(doc, "t.json", {});
  CHECK(t.lan == Lan{Rate{10'000'000'000ULL}, 20us, 576});
}

TEST_CASE("dcs list", "[unit][topology][validation]") {
  auto doc = base();
  doc.erase("dcs");
  doc.erase("wan");
  CHECK_THAT(only_problem(doc, "/dcs").reason, Contains("missing"));
  doc["dcs"] = json::array();
  CHECK_THAT(only_problem(doc, "/dcs").reason, Contains("at least one DC"));
  doc["dcs"] = {{"name", "a"}};
  CHECK_THAT(only_problem(doc, "/dcs").reason, Contains("expected an array of DCs, got an object"));
  doc["dcs"] = json::array();
  for (int i = 0; i < 65; ++i) doc["dcs"].push_back({{"name", "d" + std::to_string(i)}, {"nodes", 1}});
  for (int i = 0; i < 65; ++i)
    doc["wan"].push_back({{"between", {"d" + std::to_string(i), "d" + std::to_string((i + 1) % 65)}},
                          {"delay", "1ms"},
                          {"rate", "1Gbit"}});
  CHECK_THAT(only_problem(doc, "/dcs").reason, Contains("at most 64"));
  doc["dcs"].erase(64);
  doc["wan"].erase(64);
  doc["wan"].erase(63);
  doc["wan"].push_back({{"between", {"d63", "d0"}}, {"delay", "1ms"}, {"rate", "1Gbit"}});
  CHECK(parse_topology(doc, "t.json", {}).dcs.size() == 64);
}

TEST_CASE("DC names", "[unit][topology][validation]") {
  auto doc = base();
  doc["dcs"][0]["name"] = "useast123";  // 9 characters
  doc["wan"][0]["between"][0] = "useast123";
  auto d = only_problem(doc, "/dcs/0/name");
  CHECK_THAT(d.reason, Contains("at most 8"));
  CHECK_THAT(d.reason,
             Contains("DC names build interface names such as \"<dc>-1020-p\", which Linux limits to 15 characters"));

  for (const char* bad : {"US", "1dc", "us-e", "u.e", ""}) {
    INFO(bad);
    doc = base();
    doc["dcs"][0]["name"] = bad;
    doc["wan"][0]["between"][0] = bad;
    CHECK_THAT(only_problem(doc, "/dcs/0/name").reason, Contains("[a-z][a-z0-9]*"));
  }

  doc = base();
  doc["dcs"][0].erase("name");
  auto ds = problems(doc);
  INFO(dump(ds));
  REQUIRE(at(ds, "/dcs/0/name") != nullptr);
  CHECK_THAT(at(ds, "/dcs/0/name")->reason, Contains("missing"));
}

TEST_CASE("duplicate DC names are reported with both paths", "[unit][topology][validation]") {
  auto doc = base();
  doc["dcs"].push_back({{"name", "a"}, {"nodes", 1}});
  const auto d = only_problem(doc, "/dcs/2/name");
  CHECK_THAT(d.reason, Contains("duplicate DC name \"a\""));
  CHECK_THAT(d.reason, Contains("/dcs/0/name"));
}

TEST_CASE("node counts", "[unit][topology][validation]") {
  auto doc = base();
  doc["dcs"][1]["nodes"] = 0;
  CHECK_THAT(only_problem(doc, "/dcs/1/nodes").reason, Contains("at least 1"));
  doc["dcs"][1]["nodes"] = -3;
  CHECK_THAT(only_problem(doc, "/dcs/1/nodes").reason, Contains("at least 1"));
  doc["dcs"][1]["nodes"] = 1022;
  CHECK_THAT(only_problem(doc, "/dcs/1/nodes").reason,
             Contains("too many nodes for the address plan (a DC has a /22: at most 1021 nodes)"));
  doc["dcs"][1]["nodes"] = 18446744073709551615ULL;
  CHECK_THAT(only_problem(doc, "/dcs/1/nodes").reason, Contains("too many nodes"));
  doc["dcs"][1]["nodes"] = 1021;
  CHECK(parse_topology(doc, "t.json", {}).node_count() == 1023);
  doc["dcs"][1].erase("nodes");
  CHECK_THAT(only_problem(doc, "/dcs/1/nodes").reason, Contains("missing"));
}

TEST_CASE("GPUs per node and GPU kind", "[unit][topology][validation]") {
  auto doc = base();
  doc["dcs"][0]["gpus_per_node"] = 17;
  CHECK_THAT(only_problem(doc, "/dcs/0/gpus_per_node").reason, Contains("outside 0..16"));
  doc["dcs"][0]["gpus_per_node"] = -1;
  CHECK_THAT(only_problem(doc, "/dcs/0/gpus_per_node").reason, Contains("outside 0..16"));
  doc["dcs"][0]["gpus_per_node"] = 0;
  CHECK(parse_topology(doc, "t.json", {}).dcs[0].gpus_per_node == 0);

  doc = base();
  doc["dcs"][0]["gpu"] = "V100";
  const auto d = only_problem(doc, "/dcs/0/gpu");
  CHECK_THAT(d.reason, Contains("unknown GPU kind \"V100\""));
  CHECK_THAT(d.reason, Contains("A100, H100, H200"));
  doc["dcs"][0]["gpu"] = "A100";
  CHECK(parse_topology(doc, "t.json", {}).dcs[0].gpu == "A100");

  doc["dcs"][0]["region"] = 1;
  CHECK_THAT(only_problem(doc, "/dcs/0/region").reason, Contains("got number 1"));
}

TEST_CASE("a lab of several DCs needs a WAN", "[unit][topology][validation]") {
  auto doc = base();
  doc.erase("wan");
  CHECK_THAT(only_problem(doc, "/wan").reason, Contains("missing"));
  doc["wan"] = json::array();
  CHECK_THAT(only_problem(doc, "/wan").reason, Contains("empty"));
}

TEST_CASE("link endpoints: between or from/to", "[unit][topology][validation]") {
  auto doc = base();
  doc["wan"][0]["from"] = "a";
  CHECK_THAT(only_problem(doc, "/wan/0").reason, Contains("not both"));

  doc = base();
  doc["wan"][0].erase("between");
  CHECK_THAT(only_problem(doc, "/wan/0").reason, Contains("give the DCs the link joins"));

  doc["wan"][0]["between"] = {"a", "b", "a"};
  CHECK_THAT(only_problem(doc, "/wan/0/between").reason,
             Contains("expected an array of two DC names, got an array of 3"));
  doc["wan"][0]["between"] = "a-b";
  CHECK_THAT(only_problem(doc, "/wan/0/between").reason, Contains("expected an array of two DC names"));
  doc["wan"][0]["between"] = {"a", 2};
  CHECK_THAT(only_problem(doc, "/wan/0/between/1").reason, Contains("expected a DC name, got number 2"));

  doc = base();
  doc["wan"][0].erase("between");
  doc["wan"][0]["from"] = "a";
  auto ds = problems(doc);
  INFO(dump(ds));
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].path == "/wan/0/to");
  CHECK_THAT(ds[0].reason, Contains("missing"));
}

TEST_CASE("unknown DC names list the known DCs", "[unit][topology][validation]") {
  auto doc = base();
  doc["wan"][0]["between"][1] = "c";
  CHECK(only_problem(doc, "/wan/0/between/1").reason == "unknown DC \"c\"; known DCs: a, b");

  doc["wan"] = json::parse(R"([
    {"from": "x", "to": "b", "delay": "1ms", "rate": "1Gbit"},
    {"from": "b", "to": "y", "delay": "1ms", "rate": "1Gbit"}
  ])");
  auto ds = problems(doc);
  INFO(dump(ds));
  REQUIRE(ds.size() == 2);
  CHECK(ds[0].path == "/wan/0/from");
  CHECK(ds[0].reason == "unknown DC \"x\"; known DCs: a, b");
  CHECK(ds[1].path == "/wan/1/to");

  // Each known name once, in declaration order, even with a duplicate DC.
  doc = base();
  doc["dcs"].push_back({{"name", "a"}, {"nodes", 1}});
  doc["wan"][0]["between"][1] = "z";
  ds = problems(doc);
  REQUIRE(at(ds, "/wan/0/between/1") != nullptr);
  CHECK(at(ds, "/wan/0/between/1")->reason == "unknown DC \"z\"; known DCs: a, b");
}

TEST_CASE("self links", "[unit][topology][validation]") {
  auto doc = base();
  doc["wan"].push_back(json::parse(R"({"between": ["a", "a"], "delay": "1ms", "rate": "1Gbit"})"));
  CHECK_THAT(only_problem(doc, "/wan/1/between").reason, Contains("links DC \"a\" to itself"));
  doc["wan"][1] = json::parse(R"({"from": "b", "to": "b", "delay": "1ms", "rate": "1Gbit"})");
  CHECK_THAT(only_problem(doc, "/wan/1/to").reason, Contains("links DC \"b\" to itself"));
}

TEST_CASE("delay or rtt, exactly one", "[unit][topology][validation]") {
  auto doc = base();
  doc["wan"][0].erase("rtt");
  CHECK(only_problem(doc, "/wan/0").reason == "give the one-way delay or the rtt; \"0ms\" for none");
  doc["wan"][0]["delay"] = "5ms";
  doc["wan"][0]["rtt"] = "10ms";
  CHECK_THAT(only_problem(doc, "/wan/0").reason, Contains("not both"));
  doc["wan"][0].erase("rtt");
  doc["wan"][0]["delay"] = "0ms";
  CHECK(parse_topology(doc, "t.json", {}).links[0].params.delay == 0ns);
  doc["wan"][0]["delay"] = "-5ms";
  CHECK(only_problem(doc, "/wan/0/delay").reason == "'-5ms': must not be negative");
}

TEST_CASE("rate: required, positive, unambiguous", "[unit][topology][validation]") {
  auto doc = base();
  doc["wan"][0].erase("rate");
  CHECK_THAT(only_problem(doc, "/wan/0/rate").reason, Contains("missing or non-positive rate"));
  doc["wan"][0]["rate"] = "0Gbit";
  CHECK_THAT(only_problem(doc, "/wan/0/rate").reason, Contains("missing or non-positive rate"));
  doc["wan"][0]["rate"] = "4Gbps";
  CHECK_THAT(only_problem(doc, "/wan/0/rate").reason, Contains("'4Gbps': 'bps' is ambiguous"));
  doc["wan"][0]["rate"] = "4";
  CHECK_THAT(only_problem(doc, "/wan/0/rate").reason, Contains("'4': missing unit"));
}

TEST_CASE("jitter must not exceed the one-way delay", "[unit][topology][validation]") {
  auto doc = base();  // rtt 10ms: 5ms each way
  doc["wan"][0]["jitter"] = "6ms";
  CHECK_THAT(only_problem(doc, "/wan/0/jitter").reason, Contains("jitter 6ms exceeds the one-way delay 5ms"));
  doc["wan"][0]["jitter"] = "5ms";
  CHECK(parse_topology(doc, "t.json", {}).links[0].params.jitter == 5ms);
  doc["wan"][0]["jitter"] = "5 parsecs";
  CHECK_THAT(only_problem(doc, "/wan/0/jitter").reason, Contains("unknown time unit"));
}

TEST_CASE("loss and queue", "[unit][topology][validation]") {
  auto doc = base();
  doc["wan"][0]["loss"] = "101%";
  CHECK_THAT(only_problem(doc, "/wan/0/loss").reason, Contains("more than 100%"));
  doc["wan"][0]["loss"] = "0.1";
  CHECK_THAT(only_problem(doc, "/wan/0/loss").reason, Contains("write a percentage"));
  doc["wan"][0]["loss"] = "0.1%";
  doc["wan"][0]["queue"] = "1000";
  CHECK_THAT(only_problem(doc, "/wan/0/queue").reason, Contains("missing unit"));
  doc["wan"][0]["queue"] = "512KiB";
  const auto t = parse_topology(doc, "t.json", {});
  CHECK(t.links[0].params.loss == Probability{1'000'000});
  CHECK(t.links[0].params.queue == QueueLimit{QueueLimit::Unit::bytes, 524'288});
  CHECK_FALSE(t.links[0].params.loss_burst);
}

TEST_CASE("bursty loss: loss_burst \"P R [BAD]\"", "[unit][topology][validation]") {
  auto doc = base();
  doc["wan"][0]["loss_burst"] = "0.5% 25%";
  auto t = parse_topology(doc, "t.json", {});
  for (const auto& l : t.links) {
    REQUIRE(l.params.loss_burst);
    CHECK(l.params.loss_burst->p == Probability{5'000'000});
    CHECK(l.params.loss_burst->r == Probability{250'000'000});
    CHECK(l.params.loss_burst->bad == Probability{Probability::kOne});
  }
  CHECK(to_json(t)["wan"][0]["loss_burst"] == "0.5% 25% 100%");
  doc["wan"][0]["loss_burst"] = "1% 30% 50%";
  CHECK(parse_topology(doc, "t.json", {}).links[0].params.loss_burst->bad == Probability{500'000'000});
  doc["wan"][0]["loss_burst"] = "1%";
  CHECK_THAT(only_problem(doc, "/wan/0/loss_burst").reason, Contains("write \"P R\" or \"P R BAD\""));
  doc["wan"][0]["loss_burst"] = "1% 0%";
  CHECK_THAT(only_problem(doc, "/wan/0/loss_burst").reason, Contains("would never end"));
  doc["wan"][0]["loss_burst"] = "1% 20% 120%";
  CHECK_THAT(only_problem(doc, "/wan/0/loss_burst").reason, Contains("BAD (loss in the bad state)"));
  doc["wan"][0]["loss_burst"] = 0.5;
  CHECK_THAT(only_problem(doc, "/wan/0/loss_burst").reason, Contains("a string of percentages"));
}

TEST_CASE("trace files resolve against the base folder and must exist", "[unit][topology][validation]") {
  TempDir dir;
  dir.write("traces/a-b.csv", "0,100\n");
  fs::create_directories(dir.path() / "topologies");
  auto doc = base();
  doc["wan"][0]["trace"] = "../traces/a-b.csv";
  const auto t = parse_topology(doc, "t.json", dir.path() / "topologies");
  REQUIRE(t.links[0].trace);
  CHECK(*t.links[0].trace == dir.path() / "traces" / "a-b.csv");
  CHECK(t.links[1].trace == t.links[0].trace);

  doc["wan"][0]["trace"] = "../traces/missing.csv";
  auto ds = problems(doc, dir.path() / "topologies");
  INFO(dump(ds));
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].path == "/wan/0/trace");
  CHECK(ds[0].reason == "trace file not found: " + (dir.path() / "traces" / "missing.csv").string());

  doc["wan"][0]["trace"] = "../traces";
  ds = problems(doc, dir.path() / "topologies");
  REQUIRE(ds.size() == 1);
  CHECK_THAT(ds[0].reason, Contains("not a file"));

  doc["wan"][0]["trace"] = (dir.path() / "traces" / "a-b.csv").string();  // absolute stays
  CHECK(*parse_topology(doc, "t.json", "/elsewhere").links[0].trace == dir.path() / "traces" / "a-b.csv");
}

TEST_CASE("duplicate directed links name the other declaration", "[unit][topology][validation]") {
  auto doc = base();
  doc["wan"].push_back(json::parse(R"({"from": "b", "to": "a", "delay": "1ms", "rate": "1Gbit"})"));
  CHECK(only_problem(doc, "/wan/1").reason == "link b->a already declared at /wan/0");

  doc = base();
  doc["wan"].push_back(json::parse(R"({"between": ["b", "a"], "delay": "1ms", "rate": "1Gbit"})"));
  CHECK(only_problem(doc, "/wan/1").reason == "links b->a and a->b already declared at /wan/0");

  doc["wan"] = json::parse(R"([
    {"from": "a", "to": "b", "delay": "1ms", "rate": "1Gbit"},
    {"from": "a", "to": "b", "delay": "2ms", "rate": "1Gbit"},
    {"from": "b", "to": "a", "delay": "1ms", "rate": "1Gbit"}
  ])");
  CHECK(only_problem(doc, "/wan/1").reason == "link a->b already declared at /wan/0");
}

TEST_CASE("every directed link needs its reverse", "[unit][topology][validation]") {
  auto doc = base();
  doc["wan"] = json::parse(R"([{"from": "a", "to": "b", "delay": "1ms", "rate": "1Gbit"}])");
  CHECK(only_problem(doc, "/wan/0").reason ==
        "link a->b has no reverse link b->a: TCP needs a return path; declare one or use \"between\"");

  doc["dcs"].push_back({{"name", "c"}, {"nodes", 1}});
  doc["wan"].push_back(json::parse(R"({"from": "c", "to": "b", "delay": "1ms", "rate": "1Gbit"})"));
  auto ds = problems(doc);
  INFO(dump(ds));
  REQUIRE(ds.size() == 2);  // once per missing direction
  CHECK(ds[0].path == "/wan/0");
  CHECK(ds[1].path == "/wan/1");
  CHECK_THAT(ds[1].reason, Contains("link c->b has no reverse link b->c"));

  // A reverse link with a broken parameter still counts as declared: only the real error.
  doc = base();
  doc["wan"] = json::parse(R"([
    {"from": "a", "to": "b", "delay": "1ms", "rate": "1Gbit"},
    {"from": "b", "to": "a", "delay": "1ms", "rate": "1Gbps"}
  ])");
  CHECK_THAT(only_problem(doc, "/wan/1/rate").reason, Contains("ambiguous"));
}

TEST_CASE("all problems are reported at once", "[unit][topology][validation]") {
  const auto doc = json::parse(R"({
    "name": "Bad.Lab",
    "lan": {"mtu": 100},
    "dcs": [
      {"name": "use", "nodes": 0},
      {"name": "use", "nodes": 2, "gpu": "K80"},
      {"name": "averylongname", "nodes": 1}
    ],
    "wan": [
      {"between": ["use", "nowhere"], "rtt": "10ms", "rate": "1Gbit"},
      {"from": "use", "to": "averylongname", "rtt_ms": 68, "rate": "4Gbps", "loss": "200%"}
    ]
  })");
  try {
    parse_topology(doc, "bad.json", {});
    FAIL("expected a ConfigError");
  } catch (const ConfigError& e) {
    const auto& ds = e.diagnostics();
    INFO(dump(ds));
    for (const char* path : {"/name", "/lan/mtu", "/dcs/0/nodes", "/dcs/1/name", "/dcs/1/gpu", "/dcs/2/name",
                             "/wan/0/between/1", "/wan/1/rtt_ms", "/wan/1", "/wan/1/rate", "/wan/1/loss"}) {
      INFO(path);
      CHECK(at(ds, path) != nullptr);
    }
    // /wan/1 has two problems of its own: no delay, and no reverse link.
    CHECK(std::count_if(ds.begin(), ds.end(), [](const Diagnostic& d) { return d.path == "/wan/1"; }) == 2);
    CHECK(ds.size() == 12);
    CHECK_THAT(std::string(e.what()), Contains("12 problems found:"));
    CHECK_THAT(std::string(e.what()), Contains("bad.json: /lan/mtu: "));
    for (const auto& d : ds) CHECK(d.file == "bad.json");
  }
}

// --- files ------------------------------------------------------------------------------------

TEST_CASE("bad JSON reports line and column", "[unit][topology][files]") {
  TempDir dir;
  const auto file = dir.write("broken.json", "{\n  \"name\": \"x\",\n  \"dcs\": [}\n");
  try {
    load_topology(file);
    FAIL("expected a ConfigError");
  } catch (const ConfigError& e) {
    REQUIRE(e.diagnostics().size() == 1);
    const auto& d = e.diagnostics()[0];
    CHECK(d.file == file.string());
    CHECK(d.path.empty());
    CHECK_THAT(d.reason, Contains("invalid JSON at line 3, column 11 (byte 28)"));
    CHECK_THAT(d.reason, Contains("unexpected '}'"));
    CHECK_THAT(d.reason, !Contains("[json.exception"));
  }

  // A number no double holds: nlohmann throws out_of_range (406), not parse_error; it
  // escaped load_topology and load_scenario (found by tests/fuzz).
  const auto overflow = dir.write("overflow.json", "{\"name\": \"x\", \"lan\": {\"mtu\": 1e954}}");
  try {
    load_topology(overflow);
    FAIL("expected a ConfigError");
  } catch (const ConfigError& e) {
    REQUIRE(e.diagnostics().size() == 1);
    CHECK(e.diagnostics()[0].file == overflow.string());
    CHECK(e.diagnostics()[0].reason == "invalid JSON: number overflow parsing '1e954'");
  }

  const auto truncated = dir.write("truncated.json", "{\"name\": \"x\",\n");
  try {
    load_topology(truncated);
    FAIL("expected a ConfigError");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.diagnostics().at(0).reason, Contains("line 2, column 1"));
  }
}

TEST_CASE("unreadable files name the file and the OS reason", "[unit][topology][files]") {
  TempDir dir;
  const auto missing = dir.path() / "nope.json";
  try {
    load_topology(missing);
    FAIL("expected a ConfigError");
  } catch (const ConfigError& e) {
    REQUIRE(e.diagnostics().size() == 1);
    CHECK(e.diagnostics()[0].file == missing.string());
    CHECK(e.diagnostics()[0].path.empty());
    CHECK_THAT(e.diagnostics()[0].reason, Contains("No such file or directory"));
    CHECK_THAT(std::string(e.what()), Contains(missing.string()));
  }
  CHECK_THROWS_WITH(load_topology(dir.path()), Contains("Is a directory"));
}

TEST_CASE("load_topology: validation problems carry the path as given; traces resolve next to the file",
          "[unit][topology][files]") {
  TempDir dir;
  dir.write("traces/a-b.csv", "0,100\n");
  auto doc = base();
  doc["wan"][0]["trace"] = "../traces/a-b.csv";
  const auto file = dir.write("topologies/lab.json", doc.dump(2));
  const auto t = load_topology(file);
  CHECK(t.source_file == file.string());
  CHECK(*t.links[0].trace == dir.path() / "traces" / "a-b.csv");

  doc["wan"][0]["rate"] = "fast";
  const auto bad = dir.write("topologies/bad.json", doc.dump(2));
  try {
    load_topology(bad);
    FAIL("expected a ConfigError");
  } catch (const ConfigError& e) {
    REQUIRE(e.diagnostics().size() == 1);
    CHECK(e.diagnostics()[0].to_string() == bad.string() + ": /wan/0/rate: 'fast': does not start with a number");
  }
}

