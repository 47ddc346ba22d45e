#pragma once
// A WAN trace: time-stamped steps for one directed link, each setting any of rate, delay,
// jitter and loss; at its end the trace holds its last values or loops. Read from CSV
// (traces/README.md documents the format) and validated like topologies: every problem
// at once, each naming the file, the line, the column and the reason. Pure, no I/O beyond
// reading the file.
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wanlab/common/units.hpp"
#include "wanlab/core/diagnostics.hpp"
#include "wanlab/core/topology.hpp"

namespace wanlab::replay {

/// Steps are placed at whole milliseconds: the replay's granularity.
inline constexpr Duration kGranularity = std::chrono::milliseconds(1);
/// The longest trace time accepted (steps, end): 30 days.
inline constexpr Duration kMaxTraceTime = std::chrono::hours(24 * 30);
/// At most this many problems are listed for one file (then "... and N more").
inline constexpr std::size_t kMaxDiagnostics = 50;

using wanlab::to_string;  // units keep their spelling next to the ones below

enum class EndMode { hold, loop };
std::string to_string(EndMode m);  // "hold", "loop"
std::optional<EndMode> parse_end_mode(std::string_view text);

/// One step: the parameters it sets (the others keep their values).
struct Step {
  Duration at{};             // from the start of the trace (of each loop), whole milliseconds
  std::optional<Rate> rate;  // 0 is an outage: nothing is delivered until the next rate
  std::optional<Duration> delay;
  std::optional<Duration> jitter;
  std::optional<Probability> loss;
  std::size_t line = 0;  // 1-based line in the source file (0: built in memory)
  bool empty() const { return !rate && !delay && !jitter && !loss; }
  bool operator==(const Step&) const = default;
};

struct Trace {
  std::string source;  // file name, for messages
  EndMode mode = EndMode::hold;
  /// The trace's length. For loop, the period: the trace starts over at `end`. For hold,
  /// optional: the replay counts as finished at `end` (else at its last step).
  std::optional<Duration> end;
  std::vector<Step> steps;  // times strictly increasing
  /// `end`, or the time of the last step.
  Duration length() const;
};

/// Trace times: a decimal number with a unit: ms, s, min or h ("250ms", "1.5s", "2h"),
/// whole milliseconds, at most kMaxTraceTime. (Durations elsewhere stop at one hour; a
/// trace can be longer.)
Parsed<Duration> parse_trace_time(std::string_view text);
/// The canonical spelling: seconds with up to 3 decimals ("0s", "0.25s", "3599s").
std::string format_trace_time(Duration t);
/// For people: whole hours or minutes as such ("24h", "30min"), else as format_trace_time.
std::string human_trace_time(Duration t);

/// Parses and validates trace text. `file` names it in diagnostics. Throws
/// core::ConfigError listing every problem (with "line L, column C (name)" locations).
Trace parse_trace(std::string_view text, const std::string& file);
/// Reads and parses a trace file.
Trace load_trace(const std::filesystem::path& file);

/// The canonical CSV form (directives, header with the columns used, one row per step);
/// parse_trace reads it back. `comment` lines are written first, each prefixed with "# ".
std::string to_csv(const Trace& trace, const std::vector<std::string>& comment = {});

/// A link's parameters after a step: the step's fields over `current`.
core::LinkParams apply_step(const core::LinkParams& current, const Step& step);

/// Checks that replaying `trace` on a link that starts with `initial` never sets a jitter
/// above the delay (a packet cannot leave before it was sent). Loops are checked over two
/// passes, after which every loop is the same. Throws core::ConfigError naming the steps.
void check_against(const Trace& trace, const core::LinkParams& initial, const std::string& link_name);

/// Summary figures of a trace, for messages: steps, length, smallest and largest rate.
struct TraceSummary {
  std::size_t steps = 0;
  Duration length{};
  std::optional<Rate> min_rate, max_rate;
  std::size_t outages = 0;  // steps setting rate 0 or loss 100%
};
TraceSummary summarize(const Trace& trace);

/// Collects diagnostics for one file, keeping the first kMaxDiagnostics and counting the rest.
class Problems {
 public:
  explicit Problems(std::string file) : d_(std::move(file)) {}
  void add(std::string where, std::string reason);
  bool empty() const { return d_.empty() && dropped_ == 0; }
  std::size_t count() const { return d_.items().size() + dropped_; }
  /// Throws core::ConfigError if anything was collected.
  void throw_if_any();

 private:
  core::Diagnostics d_;
  std::size_t dropped_ = 0;
};

/// "line 5, column 2 (rate)".
std::string location(std::size_t line, std::size_t column = 0, std::string_view name = {});

}  // namespace wanlab::replay
