#include "wanlab/replay/mahimahi.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <utility>
#include <vector>

#include "text.hpp"

namespace wanlab::replay {

Trace import_mahimahi(std::string_view text, const std::string& file, const MahimahiOptions& options) {
  Problems p(file);
  const auto window_ms = std::chrono::duration_cast<std::chrono::milliseconds>(options.window).count();
  if (options.window.count() <= 0 || options.window % kGranularity != Duration{0}) {
    p.add("", fmt::format("window {}: must be a positive whole number of milliseconds", to_string(options.window)));
    p.throw_if_any();
  }
  if (options.packet_bytes == 0) {
    p.add("", "packet size must be positive");
    p.throw_if_any();
  }

  std::vector<std::uint64_t> stamps;  // ms
  std::size_t lineno = 0, last_line = 0;
  for (std::string_view raw : text::lines(text)) {
    ++lineno;
    const auto line = text::trim(raw);
    if (line.empty()) continue;
    std::uint64_t ms = 0;
    auto [ptr, ec] = std::from_chars(line.data(), line.data() + line.size(), ms);
    if (ec != std::errc() || ptr != line.data() + line.size()) {
      // Quoted only when it looks like a number: the file may be no trace at all, and its
      // text is not shown (docs/security.md).
      const bool numberish = line.size() <= 24 && line.find_first_not_of("0123456789.+-eE") == std::string_view::npos;
      p.add(location(lineno, 1),
            fmt::format("{}expected a whole number of milliseconds (one line per 1500-byte delivery opportunity)",
                        numberish ? fmt::format("'{}': ", line) : ""));
      continue;
    }
    if (ms > static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(kMaxTraceTime).count())) {
      p.add(location(lineno, 1), fmt::format("{} ms: longer than 30 days", ms));
      continue;
    }
    if (!stamps.empty() && ms < stamps.back()) {
      p.add(location(lineno, 1), fmt::format("{} ms is before the previous line's {} ms (line {}): timestamps must "
                                             "not decrease",
                                             ms, stamps.back(), last_line));
      continue;
    }
    stamps.push_back(ms);
    last_line = lineno;
  }
  if (stamps.empty() && p.empty())
    p.add("", "no delivery opportunities: a Mahimahi trace has one timestamp (ms) per line");
  if (!stamps.empty() && stamps.back() == 0)
    p.add(location(last_line, 1),
          "the last timestamp is 0: Mahimahi loops with the last timestamp as its period, "
          "which must be positive");
  p.throw_if_any();

  const std::uint64_t period = stamps.back();
  const auto w = static_cast<std::uint64_t>(window_ms);
  const std::uint64_t windows = (period + w - 1) / w;
  // The opportunities per window, for the windows that have any, in order: memory follows
  // the file, not the period (a one-line file "2591999999" spans 259 million 10 ms windows).
  // Mahimahi runs opportunity t of loop n at n * period + t, so the one at the period
  // itself is the next loop's time 0.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> counts;  // (window, opportunities)
  std::uint64_t at_period = 0;
  for (auto t : stamps) {
    if (t == period) {
      ++at_period;
      continue;
    }
    const std::uint64_t k = t / w;  // stamps are sorted: so are their windows
    if (counts.empty() || counts.back().first != k)
      counts.emplace_back(k, 1);
    else
      ++counts.back().second;
  }
  if (at_period > 0) {
    if (!counts.empty() && counts.front().first == 0)
      counts.front().second += at_period;
    else
      counts.insert(counts.begin(), {0, at_period});
  }

  Trace trace;
  trace.source = file;
  trace.mode = EndMode::loop;
  trace.end = std::chrono::milliseconds(period);
  const std::uint64_t bits = static_cast<std::uint64_t>(options.packet_bytes) * 8;
  // A step where the rate changes: at each window with opportunities, and at the first
  // window of each run of empty ones (rate 0).
  auto step = [&](std::uint64_t k, std::uint64_t count) {
    const std::uint64_t start = k * w;
    const std::uint64_t len = std::min(w, period - start);
    const Rate rate{count * bits * 1000 / len};
    if (!trace.steps.empty() && trace.steps.back().rate == rate) return;
    Step s;
    s.at = std::chrono::milliseconds(start);
    s.rate = rate;
    trace.steps.push_back(s);
  };
  std::uint64_t next = 0;  // the first window not yet stepped over
  for (const auto& [k, count] : counts) {
    if (k > next) step(next, 0);
    step(k, count);
    next = k + 1;
  }
  if (next < windows) step(next, 0);
  return trace;
}

Trace load_mahimahi(const std::filesystem::path& file, const MahimahiOptions& options) {
  std::string text;
  if (auto err = text::read_file(file, text); !err.empty()) {
    core::Diagnostics d(file.string());
    d.add("", fmt::format("cannot read the file: {}", err));
    d.throw_if_any();
  }
  return import_mahimahi(text, file.string(), options);
}

}  // namespace wanlab::replay
