#pragma once
// Checks on a trace the parsers accepted, shared by the trace and Mahimahi harnesses: its
// canonical CSV reads back to the same trace, its schedule walks, its summary and the
// jitter check against a link run.
#include <algorithm>
#include <string>

#include "fuzz_support.hpp"
#include "wanlab/core/diagnostics.hpp"
#include "wanlab/replay/schedule.hpp"
#include "wanlab/replay/trace.hpp"

namespace wanlab::fuzz {

inline bool same_steps(const replay::Trace& a, const replay::Trace& b) {
  return a.mode == b.mode && a.end == b.end &&
         std::equal(a.steps.begin(), a.steps.end(), b.steps.begin(), b.steps.end(),
                    [](replay::Step x, replay::Step y) {
                      x.line = y.line = 0;
                      return x == y;
                    });
}

inline void check_trace(const replay::Trace& trace) {
  for (std::size_t i = 1; i < trace.steps.size(); ++i)
    WANLAB_FUZZ_CHECK(trace.steps[i - 1].at < trace.steps[i].at, replay::to_csv(trace));
  const std::string csv = replay::to_csv(trace);
  try {
    WANLAB_FUZZ_CHECK(same_steps(replay::parse_trace(csv, "canonical.csv"), trace), csv);
  } catch (const core::ConfigError& e) {
    fail("the canonical CSV of a trace does not read back", csv + "\n" + e.what());
  }
  (void)replay::summarize(trace);

  const replay::Schedule schedule(trace);
  auto due = schedule.first();
  WANLAB_FUZZ_CHECK(due.has_value() == !trace.steps.empty(), csv);
  // Two passes of a loop (bounded, as the input is).
  for (std::size_t i = 0; due && i < 2 * trace.steps.size() + 2; ++i) {
    auto next = schedule.next(*due);
    if (!next) break;
    WANLAB_FUZZ_CHECK(next->at >= due->at, csv);
    WANLAB_FUZZ_CHECK(schedule.between(*due, *next) == 0, csv);
    due = next;
  }
  if (due) {
    const auto latest = schedule.latest(due->at);
    WANLAB_FUZZ_CHECK(latest && latest->at == due->at, csv);
  }
  (void)schedule.finish();

  core::LinkParams initial;
  initial.delay = std::chrono::milliseconds(10);
  try {
    replay::check_against(trace, initial, "use->euw");
  } catch (const core::ConfigError& e) {
    WANLAB_FUZZ_CHECK(!e.diagnostics().empty(), csv);
  }
}

}  // namespace wanlab::fuzz
