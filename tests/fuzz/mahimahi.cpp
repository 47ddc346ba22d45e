// Mahimahi link traces (replay::import_mahimahi): any bytes either import or are refused
// with core::ConfigError; an imported trace passes the trace checks (trace_checks.hpp).
// The input's last byte picks the binning window, 1-200 ms (what `--window` and the API's
// "window" set); the bytes before it are the file. Memory must not grow with the
// timestamps' values (run.sh's -malloc_limit_mb). Seeds: traces/mahimahi/*.mahi.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trace_checks.hpp"
#include "wanlab/replay/mahimahi.hpp"

using namespace wanlab;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size - 1);
  replay::MahimahiOptions options;
  options.window = std::chrono::milliseconds(1 + data[size - 1] % 200);
  replay::Trace trace;
  try {
    trace = replay::import_mahimahi(text, "fuzz.mahi", options);
  } catch (const core::ConfigError& e) {
    WANLAB_FUZZ_CHECK(!e.diagnostics().empty(), text);
    return 0;
  }
  fuzz::check_trace(trace);
  return 0;
}
