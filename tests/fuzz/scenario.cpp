// Scenario files (workload::load_scenario, parse_scenario): any bytes either load or are
// refused with core::ConfigError; a loaded scenario's canonical JSON (to_json) loads back
// to the same scenario. Relative paths (the topology, arrival files) resolve against
// bench/scenarios/. Seeds: bench/scenarios/**/*.json.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_support.hpp"
#include "wanlab/core/diagnostics.hpp"
#include "wanlab/workload/scenario.hpp"

using namespace wanlab;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::filesystem::path base_dir = WANLAB_SOURCE_DIR "/bench/scenarios";
  workload::Scenario scenario;
  try {
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception&) {
      const auto& file = fuzz::scratch_file("scenario.json");
      fuzz::write_file(file, data, size);
      workload::load_scenario(file);
      fuzz::fail("load_scenario accepted a document nlohmann::json refuses", text);
    }
    scenario = workload::parse_scenario(doc, "fuzz.json", base_dir);
  } catch (const core::ConfigError& e) {
    WANLAB_FUZZ_CHECK(!e.diagnostics().empty(), text);
    return 0;
  }
  const nlohmann::json canonical = workload::to_json(scenario);
  try {
    const auto again = workload::parse_scenario(nlohmann::json::parse(canonical.dump()), "canonical.json", base_dir);
    WANLAB_FUZZ_CHECK(workload::to_json(again) == canonical, canonical.dump());
  } catch (const core::ConfigError& e) {
    fuzz::fail("the canonical JSON of a scenario does not load back", canonical.dump() + "\n" + e.what());
  }
  return 0;
}
