#pragma once
// What the benchmarks share: stopping cleanly on SIGINT/SIGTERM, finding the shipped
// topologies from any working directory, and labs that are always torn down.
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <fmt/format.h>
#include <memory>
#include <spdlog/spdlog.h>
#include <stdexcept>
#include <string>

#include "wanlab/api/lab_controller.hpp"
#include "wanlab/lab/state.hpp"
#include "wanlab/lab/teardown.hpp"

namespace wanlab::bench {

/// Set by SIGINT/SIGTERM; loops check it and the run ends with its labs removed.
inline std::atomic<bool> g_stop{false};

inline void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_stop = true; };
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

/// The topology as given, else relative to the source tree (so a benchmark works from any
/// working directory of a checkout).
inline std::filesystem::path resolve_topology(const std::string& given) {
  std::filesystem::path p(given);
  if (std::filesystem::exists(p) || p.is_absolute()) return p;
  const auto repo = std::filesystem::path(__FILE__).parent_path().parent_path();
  if (std::filesystem::exists(repo / p)) return repo / p;
  return p;  // load_topology reports it
}

/// Removes whatever a previous (crashed) run left under the lab's name. Refuses if a
/// controller daemon owns a lab of that name.
inline void clear_lab(const std::string& lab) {
  if (lab::controller_alive(lab))
    throw std::runtime_error(fmt::format(
        "a wanlab controller is running lab '{}'; pick another name with --lab or run `wanlab down {}`", lab, lab));
  const auto report = lab::teardown(lab, {});
  if (!report.removed.empty())
    spdlog::warn("removed {} namespace(s) left over from an earlier lab '{}'", report.removed.size(), lab);
  lab::remove_lab_dir(lab);
}

/// Tears a lab down on every exit path.
struct LabGuard {
  std::unique_ptr<api::LabController> ctl;
  std::string lab;
  ~LabGuard() {
    if (!ctl) return;
    try {
      ctl->teardown();
      lab::remove_lab_dir(lab);
    } catch (const std::exception& e) {
      spdlog::error("teardown of lab {} failed: {} (run `wanlab down {}`)", lab, e.what(), lab);
    }
  }
};

}  // namespace wanlab::bench
