// Topology files (core::load_topology, parse_topology): any bytes either load or are
// refused with core::ConfigError; a loaded topology's canonical JSON (to_json) loads back
// to the same topology; default queue limits are computed for every link.
// Seeds: topologies/*.json.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_support.hpp"
#include "wanlab/core/diagnostics.hpp"
#include "wanlab/core/topology.hpp"

using namespace wanlab;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::filesystem::path base_dir = WANLAB_SOURCE_DIR "/topologies";
  core::Topology topo;
  try {
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception&) {
      // Not JSON: through the file reader, whose diagnostic places the error.
      const auto& file = fuzz::scratch_file("topology.json");
      fuzz::write_file(file, data, size);
      core::load_topology(file);
      fuzz::fail("load_topology accepted a document nlohmann::json refuses", text);
    }
    topo = core::parse_topology(doc, "fuzz.json", base_dir);
  } catch (const core::ConfigError& e) {
    WANLAB_FUZZ_CHECK(!e.diagnostics().empty(), text);
    return 0;
  }
  for (const auto& link : topo.links) (void)core::default_queue_packets(topo, link);
  const nlohmann::json canonical = core::to_json(topo);
  try {
    const core::Topology again = core::parse_topology(nlohmann::json::parse(canonical.dump()), "canonical.json", base_dir);
    WANLAB_FUZZ_CHECK(core::to_json(again) == canonical, canonical.dump());
  } catch (const core::ConfigError& e) {
    fuzz::fail("the canonical JSON of a topology does not load back", canonical.dump() + "\n" + e.what());
  }
  return 0;
}
