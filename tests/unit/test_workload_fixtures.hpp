#pragma once
// Shared by the test_workload_*.cpp tests: small labs and scenarios built in code.
#include <string>

#include <nlohmann/json.hpp>

#include "wanlab/core/topology.hpp"
#include "wanlab/workload/scenario.hpp"

namespace wanlab::workload::testing {

inline const std::string kSource = WANLAB_SOURCE_DIR;

inline core::Topology shipped_topology(const std::string& name) {
  return core::load_topology(kSource + "/topologies/" + name);
}

/// A lab from a list of DCs ({"name", "nodes", "gpus_per_node"}), fully meshed at 1 Gbit, 10 ms.
inline core::Topology lab(const nlohmann::json& dcs) {
  nlohmann::json wan = nlohmann::json::array();
  for (std::size_t a = 0; a < dcs.size(); ++a)
    for (std::size_t b = a + 1; b < dcs.size(); ++b)
      wan.push_back({{"between", {dcs[a]["name"], dcs[b]["name"]}}, {"rtt", "20ms"}, {"rate", "1Gbit"}});
  nlohmann::json doc{{"name", "t"}, {"dcs", dcs}};
  if (!wan.empty()) doc["wan"] = wan;
  return core::parse_topology(doc, "t.json", {});
}

/// A small custom model: 8 layers, hidden 128, 8 heads, seq 32, vocab 100.
inline ModelSpec small_model() {
  ModelSpec m;
  m.layers = 8;
  m.hidden = 128;
  m.heads = 8;
  m.kv_heads = 8;
  m.ffn_hidden = 512;
  m.seq_len = 32;
  m.vocab = 100;
  return m;
}

inline Scenario scenario(int pp, int dp, int tp, int micro_batches, Schedule schedule = Schedule::one_f_one_b) {
  Scenario s;
  s.name = "t";
  s.source_file = "t-scenario.json";
  s.model = small_model();
  s.parallelism = {pp, dp, tp};
  s.schedule = schedule;
  s.micro_batches = micro_batches;
  s.iterations = 3;
  s.warmup = 1;
  return s;
}

}  // namespace wanlab::workload::testing
