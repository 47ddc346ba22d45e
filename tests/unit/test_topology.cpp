// Topology files: the shipped ones load, the model's helpers and defaults, the canonical form
// round-trips, and how two topologies differ (validation: test_topology_validation.cpp).
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

// --- shipped topologies ---------------------------------------------------------------------

TEST_CASE("two-dc.json", "[unit][topology]") {
  const auto t = load_topology(shipped("two-dc.json"));
  CHECK(t.name == "two-dc");
  CHECK(t.source_file == shipped("two-dc.json"));
  REQUIRE(t.dcs.size() == 2);
  CHECK(t.dcs[0].name == "use");
  CHECK(t.dcs[0].region == "aws:us-east-1");
  CHECK(t.dcs[1].name == "euw");
  CHECK(t.node_count() == 4);
  REQUIRE(t.links.size() == 2);
  const auto* l = t.find_link(0, 1);
  REQUIRE(l != nullptr);
  CHECK(l->params.delay == Duration{42'450'000});  // rtt 84.9ms / 2
  CHECK(l->params.rate == Rate{4'310'000'000ULL});
  REQUIRE(t.find_link(1, 0) != nullptr);
  CHECK(t.find_link(1, 0)->params == l->params);
}

TEST_CASE("three-dc.json: the default lab", "[unit][topology]") {
  const auto t = load_topology(shipped("three-dc.json"));
  CHECK(t.name == "three-dc");
  REQUIRE(t.dcs.size() == 3);
  CHECK(t.dc_index("use") == 0u);
  CHECK(t.dc_index("usw") == 1u);
  CHECK(t.dc_index("euw") == 2u);
  CHECK(t.node_count() == 12);
  CHECK(t.links.size() == 6);  // full mesh, both directions
  for (std::size_t a = 0; a < 3; ++a)
    for (std::size_t b = 0; b < 3; ++b) CHECK((a == b) == (t.find_link(a, b) == nullptr));
  CHECK(t.find_link(0, 1)->params.delay == 34'200us);
  CHECK(t.find_link(0, 1)->params.rate == Rate{4'350'000'000ULL});
  CHECK(t.find_link(2, 1)->params.delay == 61'150us);
  CHECK(t.find_link(2, 1)->params.rate == Rate{3'860'000'000ULL});
  CHECK(t.lan.rate == Rate{});  // unshaped
}

TEST_CASE("five-dc-global.json", "[unit][topology]") {
  const auto t = load_topology(shipped("five-dc-global.json"));
  REQUIRE(t.dcs.size() == 5);
  CHECK(t.node_count() == 10);
  CHECK(t.links.size() == 20);
  for (std::size_t a = 0; a < 5; ++a)
    for (std::size_t b = 0; b < 5; ++b) CHECK((a == b) == (t.find_link(a, b) == nullptr));
  const auto apne = t.dc_index("apne");
  const auto apse = t.dc_index("apse");
  REQUIRE(apne);
  REQUIRE(apse);
  CHECK(t.find_link(*apne, *apse)->params.delay == 37'300us);  // rtt 74.6ms
}

TEST_CASE("bringup-96.json", "[unit][topology]") {
  const auto t = load_topology(shipped("bringup-96.json"));
  CHECK(t.node_count() >= 96);
  CHECK(t.dcs.size() == 3);
  CHECK(t.links.size() == 6);
}

TEST_CASE("every shipped topology loads and round-trips", "[unit][topology]") {
  int count = 0;
  for (const auto& entry : fs::directory_iterator(kSource + "/topologies")) {
    if (entry.path().extension() != ".json") continue;
    INFO(entry.path());
    ++count;
    const auto t = load_topology(entry.path());
    CHECK(t.name == entry.path().stem().string());
    check_same(t, parse_topology(to_json(t), "canonical", {}));
  }
  CHECK(count >= 4);
}

TEST_CASE("the full example in topologies/README.md is valid", "[unit][topology]") {
  std::ifstream in(kSource + "/topologies/README.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const auto start = text.find("```json\n");
  REQUIRE(start != std::string::npos);
  const auto end = text.find("```", start + 8);
  REQUIRE(end != std::string::npos);
  const auto t =
      parse_topology(json::parse(text.substr(start + 8, end - start - 8)), "README.md", kSource + "/topologies");
  CHECK(t.dcs.size() == 3);
  CHECK(!t.links.empty());
}

// --- model helpers ----------------------------------------------------------------------------

TEST_CASE("model helpers", "[unit][topology]") {
  const auto t = parse_topology(base(), "t.json", {});
  CHECK(t.source_file == "t.json");
  CHECK(node_name(t.dcs[0], 0) == "a-0");
  CHECK(node_name(Dc{"use", "", 4, 8, "H100", {}}, 1020) == "use-1020");
  CHECK(known_gpu_kinds() == std::vector<std::string>{"A100", "H100", "H200"});
  CHECK(t.dc_index("b") == 1u);
  CHECK_FALSE(t.dc_index("c"));
  CHECK(t.node_count() == 3);
  CHECK(t.find_link(0, 0) == nullptr);
  Topology m = t;
  m.find_link(0, 1)->params.rate = Rate{5};
  CHECK(m.find_link(0, 1)->params.rate == Rate{5});
}

TEST_CASE("defaults", "[unit][topology]") {
  const auto t = parse_topology(base(), "t.json", {});
  CHECK(t.lan.rate == Rate{});
  CHECK(t.lan.delay == 0ns);
  CHECK(t.lan.mtu == 1500);
  CHECK(t.dcs[0].gpus_per_node == 8);
  CHECK(t.dcs[0].gpu == "H100");
  CHECK(t.dcs[0].region.empty());
  const auto& p = t.links[0].params;
  CHECK(p.jitter == 0ns);
  CHECK(p.loss == Probability{});
  CHECK_FALSE(p.queue);
  CHECK_FALSE(t.links[0].trace);
}

TEST_CASE("one DC needs no WAN", "[unit][topology]") {
  auto doc = json::parse(R"({"name": "solo", "dcs": [{"name": "a", "nodes": 3}]})");
  CHECK(parse_topology(doc, "t.json", {}).links.empty());
  doc["wan"] = json::array();
  CHECK(parse_topology(doc, "t.json", {}).node_count() == 3);
}

TEST_CASE("between and rtt expand to two directed links of half the rtt", "[unit][topology]") {
  auto doc = base();
  doc["wan"][0] = json::parse(R"({"between": ["b", "a"], "rtt": "68.4ms", "rate": "4.35Gbit",
                                  "jitter": "0.2ms", "loss": "0.01%", "queue": "2000p"})");
  const auto t = parse_topology(doc, "t.json", {});
  REQUIRE(t.links.size() == 2);
  CHECK(t.links[0].src == 1);
  CHECK(t.links[0].dst == 0);
  CHECK(t.links[1].src == 0);
  CHECK(t.links[1].dst == 1);
  for (const auto& l : t.links) {
    CHECK(l.json_path == "/wan/0");
    CHECK(l.params.delay == 34'200us);
    CHECK(l.params.jitter == 200us);
    CHECK(l.params.loss == Probability{100'000});
    CHECK(l.params.rate == Rate{4'350'000'000ULL});
    CHECK(l.params.queue == QueueLimit{QueueLimit::Unit::packets, 2000});
  }
}

TEST_CASE("from/to links may be asymmetric; rtt on a from/to entry is halved too", "[unit][topology]") {
  auto doc = base();
  doc["wan"] = json::parse(R"([
    {"from": "a", "to": "b", "delay": "10ms", "rate": "1Gbit"},
    {"from": "b", "to": "a", "rtt": "60ms", "rate": "200Mbit"}
  ])");
  const auto t = parse_topology(doc, "t.json", {});
  REQUIRE(t.links.size() == 2);
  CHECK(t.find_link(0, 1)->params.delay == 10ms);
  CHECK(t.find_link(0, 1)->json_path == "/wan/0");
  CHECK(t.find_link(1, 0)->params.delay == 30ms);
  CHECK(t.find_link(1, 0)->params.rate == Rate{200'000'000});
  CHECK(t.find_link(1, 0)->json_path == "/wan/1");
}

TEST_CASE("DC pairs without any link are allowed", "[unit][topology]") {
  auto doc = base();
  doc["dcs"].push_back({{"name", "c"}, {"nodes", 1}});
  doc["wan"].push_back(json::parse(R"({"between": ["b", "c"], "delay": "0ms", "rate": "1Gbit"})"));
  const auto t = parse_topology(doc, "t.json", {});
  CHECK(t.links.size() == 4);
  CHECK(t.find_link(0, 2) == nullptr);
}

TEST_CASE("round trip through to_json", "[unit][topology]") {
  TempDir dir;
  dir.write("traces/a-b.csv", "t_ms,rate_mbit\n0,100\n");
  const auto doc = json::parse(R"({
    "name": "rt-lab",
    "description": "everything set",
    "lan": {"rate": "25Gbit", "delay": "50us", "mtu": 9000},
    "dcs": [{"name": "a", "region": "aws:us-east-1", "nodes": 3, "gpus_per_node": 4, "gpu": "A100"},
            {"name": "b", "nodes": 1021, "gpus_per_node": 0, "gpu": "H200"}],
    "wan": [{"from": "a", "to": "b", "delay": "1.234567ms", "rate": "1.5Mbit", "jitter": "15ns", "loss": "0.0001%",
             "queue": "4MB", "trace": "traces/a-b.csv"},
            {"between": ["b", "c0"], "rtt": "0.000003ms", "rate": "999bit"},
            {"from": "b", "to": "a", "rtt": "68.4ms", "rate": "4.35Gbit", "queue": "100p"}]
  })");
  auto with_c0 = doc;
  with_c0["dcs"].push_back({{"name", "c0"}, {"nodes", 1}});
  const auto t = parse_topology(with_c0, "rt.json", dir.path());
  REQUIRE(t.links[0].trace);
  CHECK(t.links[0].trace->is_absolute());
  CHECK(*t.links[0].trace == dir.path() / "traces" / "a-b.csv");

  const auto canonical = to_json(t);
  CHECK(canonical["wan"].size() == 4);
  CHECK(canonical["wan"][0]["from"] == "a");
  CHECK(canonical["wan"][0]["delay"] == "1234.567us");
  CHECK(canonical["wan"][0]["loss"] == "0.0001%");
  CHECK(canonical["wan"][0]["queue"] == "4000000B");
  CHECK(canonical["wan"][3]["delay"] == "34.2ms");
  CHECK(canonical["lan"]["rate"] == "25Gbit");
  CHECK_FALSE(canonical["wan"][1].contains("between"));
  CHECK_FALSE(canonical["wan"][1].contains("rtt"));
  // Read back from anywhere: the trace path is absolute.
  const auto back = parse_topology(canonical, "canonical.json", "/nonexistent");
  check_same(t, back);
  CHECK(to_json(back) == canonical);
}

TEST_CASE("default_queue_packets: 1.5 x bandwidth x RTT in MTU frames", "[unit][topology]") {
  auto doc = base();
  doc["wan"][0] = json::parse(R"({"between": ["a", "b"], "rtt": "68.4ms", "rate": "4.35Gbit"})");
  auto t = parse_topology(doc, "t.json", {});
  // 1.5 * 543,750,000 B/s * 0.0684 s / (1500 + 14) B = 55,788,750 / 1514 = 36,848.6 -> 36,849
  CHECK(default_queue_packets(t, t.links[0]) == 36'849);

  // Asymmetric: 10ms + 30ms one way each, 1ms jitter each way, 1Gbit forward (the reverse
  // rate does not count): 1.5 * 125e6 * 0.042 / 1514 = 5201.45 -> 5202.
  doc["wan"] = json::parse(R"([
    {"from": "a", "to": "b", "delay": "10ms", "jitter": "1ms", "rate": "1Gbit"},
    {"from": "b", "to": "a", "delay": "30ms", "jitter": "1ms", "rate": "10Mbit"}
  ])");
  t = parse_topology(doc, "t.json", {});
  CHECK(default_queue_packets(t, *t.find_link(0, 1)) == 5'202);
  // Reverse: 1.5 * 1.25e6 * 0.042 / 1514 = 52.01 -> 53, below the floor of 64.
  CHECK(default_queue_packets(t, *t.find_link(1, 0)) == 64);

  // Jumbo frames: fewer, larger packets. 1.5 * 125e6 * 0.042 / 9014 = 873.6 -> 874.
  doc["lan"] = {{"mtu", 9000}};
  t = parse_topology(doc, "t.json", {});
  CHECK(default_queue_packets(t, *t.find_link(0, 1)) == 874);
}

// --- validation: one test per rule ----------------------------------------------------------

TEST_CASE("topology_differences names every DC, link and field that differs", "[unit][topology]") {
  // `up` of another topology under a running lab's name said "already up ... nothing done"
  // (exit 0), and `run` said nothing when the lab's links differed from the scenario's.
  const auto two_dc = [](const std::string& rtt, const std::string& rate, int euw_nodes) {
    return parse_topology(nlohmann::json{{"name", "t"},
                               {"dcs", {{{"name", "use"}, {"nodes", 1}}, {{"name", "euw"}, {"nodes", euw_nodes}}}},
                               {"wan", {{{"between", {"use", "euw"}}, {"rtt", rtt}, {"rate", rate}}}}},
                          "t.json", {});
  };
  const auto a = two_dc("20ms", "50Mbit", 1);
  CHECK(topology_differences(a, a).empty());
  CHECK(topology_differences(a, parse_topology(to_json(a), "canonical", {})).empty());

  const auto delays = topology_differences(a, two_dc("40ms", "50Mbit", 1));
  REQUIRE(delays.size() == 2);
  CHECK(delays[0] == "link use->euw: delay 10ms (running) vs 20ms");
  CHECK(delays[1] == "link euw->use: delay 10ms (running) vs 20ms");

  const auto rates = topology_differences(a, two_dc("20ms", "1Gbit", 1));
  REQUIRE(rates.size() == 2);
  CHECK(rates[0] == "link use->euw: rate 50Mbit (running) vs 1Gbit");

  const auto nodes = topology_differences(a, two_dc("20ms", "50Mbit", 2));
  REQUIRE(nodes.size() == 1);
  CHECK(nodes[0] == "DC euw: 1 nodes (running) vs 2");

  const auto three = parse_topology(
      nlohmann::json{{"name", "t"},
           {"dcs", {{{"name", "use"}, {"nodes", 1}}, {{"name", "euw"}, {"nodes", 1}}, {{"name", "apne"}, {"nodes", 1}}}},
           {"wan", {{{"between", {"use", "euw"}}, {"rtt", "20ms"}, {"rate", "50Mbit"}},
                    {{"between", {"use", "apne"}}, {"rtt", "20ms"}, {"rate", "50Mbit"}}}}},
      "t3.json", {});
  const auto more = topology_differences(a, three);
  CHECK(std::find(more.begin(), more.end(), "DC apne: not in the running lab") != more.end());
  CHECK(std::find(more.begin(), more.end(), "link use->apne: not in the running lab") != more.end());
  const auto fewer = topology_differences(three, a);
  CHECK(std::find(fewer.begin(), fewer.end(), "DC apne: only in the running lab") != fewer.end());
}
