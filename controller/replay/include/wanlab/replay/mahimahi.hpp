#pragma once
// Mahimahi link traces as wanlab traces. A Mahimahi trace (mm-link) has one line per
// delivery opportunity: an integer timestamp in milliseconds at which one packet of up to
// 1500 bytes may leave; several lines with the same timestamp are several packets in that
// millisecond. Mahimahi replays it in a loop whose period is the last timestamp.
//
// The importer counts the opportunities in fixed windows (default 100 ms):
//   rate of window k = opportunities in [k*W, (k+1)*W) x 1500 bytes x 8 / W,
// the last window being cut short at the period. Times are taken modulo the period (an
// opportunity at the period itself is the next loop's time 0, as in Mahimahi). Consecutive windows of the same rate are
// one step. The result loops (mode=loop, end = the period), as Mahimahi does. Rates only:
// Mahimahi link traces carry no delay or loss.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "wanlab/replay/trace.hpp"

namespace wanlab::replay {

struct MahimahiOptions {
  Duration window = std::chrono::milliseconds(100);  // whole milliseconds, >= 1 ms
  std::uint32_t packet_bytes = 1500;                 // bytes per delivery opportunity (Mahimahi: 1500)
};

/// Parses a Mahimahi trace and bins it into rate steps. Throws core::ConfigError with
/// every problem (file, line, reason).
Trace import_mahimahi(std::string_view text, const std::string& file, const MahimahiOptions& options = {});
Trace load_mahimahi(const std::filesystem::path& file, const MahimahiOptions& options = {});

}  // namespace wanlab::replay
