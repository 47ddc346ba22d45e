// Trace CSV files (replay::parse_trace): any bytes either parse or are refused with
// core::ConfigError; an accepted trace has strictly increasing step times, its canonical
// CSV (to_csv) reads back to the same trace, and its schedule, summary and jitter check
// run (trace_checks.hpp). Seeds: traces/*.csv, traces/generated/*.csv.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trace_checks.hpp"

using namespace wanlab;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  replay::Trace trace;
  try {
    trace = replay::parse_trace(text, "fuzz.csv");
  } catch (const core::ConfigError& e) {
    WANLAB_FUZZ_CHECK(!e.diagnostics().empty(), text);
    return 0;
  }
  fuzz::check_trace(trace);
  return 0;
}
