#pragma once
// Helpers of the topology tests (test_topology.cpp, test_topology_validation.cpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "temp_dir.hpp"
#include "wanlab/core/topology.hpp"

namespace topology_test {

using namespace wanlab;
using namespace wanlab::core;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using nlohmann::json;
namespace fs = std::filesystem;
inline const std::string kSource = WANLAB_SOURCE_DIR;

inline std::string shipped(const std::string& name) {
  return kSource + "/topologies/" + name;
}

// A temp folder for the files of one test.
struct TempDir : test::TempDir {
  TempDir() : test::TempDir("topology") {}
};

// A small valid lab to break one rule at a time.
inline json base() {
  return json::parse(R"({
    "name": "t",
    "dcs": [{"name": "a", "nodes": 2}, {"name": "b", "nodes": 1}],
    "wan": [{"between": ["a", "b"], "rtt": "10ms", "rate": "1Gbit"}]
  })");
}

inline std::vector<Diagnostic> problems(const json& doc, const fs::path& base_dir = {}) {
  try {
    parse_topology(doc, "t.json", base_dir);
  } catch (const ConfigError& e) {
    return e.diagnostics();
  }
  FAIL("expected a ConfigError");
  return {};
}

inline std::string dump(const std::vector<Diagnostic>& ds) {
  std::string out;
  for (const auto& d : ds) out += d.to_string() + "\n";
  return out;
}

// The single diagnostic the document produces; checks its path.
inline Diagnostic only_problem(const json& doc, const std::string& path) {
  auto ds = problems(doc);
  INFO(dump(ds));
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].file == "t.json");
  CHECK(ds[0].path == path);
  return ds[0];
}

// The diagnostic at `path` among several.
inline const Diagnostic* at(const std::vector<Diagnostic>& ds, const std::string& path) {
  auto it = std::find_if(ds.begin(), ds.end(), [&](const Diagnostic& d) { return d.path == path; });
  return it == ds.end() ? nullptr : &*it;
}

inline void check_same(const Topology& a, const Topology& b) {
  CHECK(a.name == b.name);
  CHECK(a.lan == b.lan);
  REQUIRE(a.dcs.size() == b.dcs.size());
  for (std::size_t i = 0; i < a.dcs.size(); ++i) {
    CHECK(a.dcs[i].name == b.dcs[i].name);
    CHECK(a.dcs[i].region == b.dcs[i].region);
    CHECK(a.dcs[i].nodes == b.dcs[i].nodes);
    CHECK(a.dcs[i].gpus_per_node == b.dcs[i].gpus_per_node);
    CHECK(a.dcs[i].gpu == b.dcs[i].gpu);
  }
  REQUIRE(a.links.size() == b.links.size());
  for (std::size_t i = 0; i < a.links.size(); ++i) {
    CHECK(a.links[i].src == b.links[i].src);
    CHECK(a.links[i].dst == b.links[i].dst);
    CHECK(a.links[i].params == b.links[i].params);
    CHECK(a.links[i].trace == b.links[i].trace);
  }
}

}  // namespace topology_test
